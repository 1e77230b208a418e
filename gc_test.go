package sandboxagent

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// gc removes the socket folder of a sandbox whose owner died, and only a
// folder of the shape sandbox-agent makes, inside this user's socket root.
func TestGCRemovesSocketFolders(t *testing.T) {
	root, err := socketRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(root, "s-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	outside := t.TempDir()
	host, _ := os.Hostname()
	dead := map[string]string{LabelManaged: "true", LabelHost: host, LabelPID: "999999999"}
	with := func(sockets string) map[string]string {
		l := map[string]string{LabelSockets: sockets}
		for k, v := range dead {
			l[k] = v
		}
		return l
	}
	rt := &fakeRuntime{list: []ContainerState{
		{ID: "a", Labels: with(filepath.Base(dir))},
		{ID: "b", Labels: with("../" + filepath.Base(outside))},
		{ID: "c", Labels: with(outside)},
	}}
	res, err := GC(context.Background(), rt, GCOptions{})
	if err != nil || len(res.Removed) != 3 {
		t.Fatalf("gc: %+v %v", res, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket folder of a dead owner kept: %v", err)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("a folder named by a label outside the socket root was touched: %v", err)
	}
}

// The sweep removes a folder only when the PID in its name is gone, no
// socket in it answers and no container names it; a folder of the old
// shape (no PID) only when it is also a day old.
func TestSweepSocketDirs(t *testing.T) {
	root := t.TempDir()
	dead := "999999999" // above any pid_max: no such process
	mk := func(name string) string {
		t.Helper()
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	// A socket whose listener died without unlinking it, as after SIGKILL.
	staleSock := func(dir string) {
		t.Helper()
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "model.sock"), Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		l.SetUnlinkOnClose(false)
		l.Close()
	}
	deadDir := mk("s-" + dead + "-1")
	staleSock(deadDir)
	emptyDead := mk("s-" + dead + "-2")
	mine := mk("s-" + strconv.Itoa(os.Getpid()) + "-3")
	named := mk("s-" + dead + "-4")
	listening := mk("s-" + dead + "-5")
	l, err := net.Listen("unix", filepath.Join(listening, "egress.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	oldShapeNew := mk("s-6")
	oldShapeOld := mk("s-7")
	dayAgo := time.Now().Add(-25 * time.Hour)
	if err := os.Chtimes(oldShapeOld, dayAgo, dayAgo); err != nil {
		t.Fatal(err)
	}
	other := mk("x-" + dead + "-8")
	if err := os.WriteFile(filepath.Join(root, "s-"+dead+"-9"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var asked []string
	inUse := func(name string) bool {
		asked = append(asked, name)
		return name == filepath.Base(named)
	}

	dry := sweepSocketDirs(root, inUse, true)
	slices.Sort(dry)
	want := []string{deadDir, emptyDead, oldShapeOld}
	slices.Sort(want)
	if !slices.Equal(dry, want) {
		t.Errorf("dry run lists %v, want %v", dry, want)
	}
	if _, err := os.Stat(deadDir); err != nil {
		t.Errorf("dry run removed %s: %v", deadDir, err)
	}
	if slices.Contains(asked, filepath.Base(mine)) || slices.Contains(asked, filepath.Base(listening)) {
		t.Errorf("the engine was asked about a live owner's folder: %v", asked)
	}

	got := sweepSocketDirs(root, inUse, false)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("removed %v, want %v", got, want)
	}
	for _, d := range want {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s kept: %v", d, err)
		}
	}
	for _, d := range []string{mine, named, listening, oldShapeNew, other, filepath.Join(root, "s-"+dead+"-9")} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s removed: %v", d, err)
		}
	}
}

// GC sweeps the socket root too, keeping a folder a remaining container
// names, and reports what it removed.
func TestGCSweepsSocketFolders(t *testing.T) {
	root, err := socketRoot()
	if err != nil {
		t.Fatal(err)
	}
	leftover, err := os.MkdirTemp(root, "s-999999999-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(leftover)
	named, err := os.MkdirTemp(root, "s-999999999-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(named)
	// Another host's running sandbox naming the folder: GC keeps both.
	rt := &fakeRuntime{list: []ContainerState{{ID: "a", Running: true, Status: StatusRunning,
		Labels: map[string]string{LabelManaged: "true", LabelHost: "elsewhere", LabelPID: "1", LabelSockets: filepath.Base(named)}}}}
	res, err := GC(context.Background(), rt, GCOptions{})
	if err != nil || len(res.Kept) != 1 {
		t.Fatalf("gc: %+v %v", res, err)
	}
	if !slices.Contains(res.SocketDirs, leftover) || slices.Contains(res.SocketDirs, named) {
		t.Errorf("SocketDirs %v: want %s, not %s", res.SocketDirs, leftover, named)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover kept: %v", err)
	}
	if _, err := os.Stat(named); err != nil {
		t.Errorf("folder a container names removed: %v", err)
	}
}
