package boundary

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// The sweep removes a folder only when it is older than minSweepAge, the
// PID in its name is gone, no socket in it answers and no container names
// it; a folder of the old shape (no PID) only when it is also a day old.
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
	young := mk("s-" + dead + "-10") // its owner just died: kept whatever the engine says
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
	// Every folder but young is older than minSweepAge (oldShapeOld a day).
	aged := time.Now().Add(-minSweepAge - time.Minute)
	for _, d := range []string{deadDir, emptyDead, mine, named, listening, oldShapeNew, other} {
		if err := os.Chtimes(d, aged, aged); err != nil {
			t.Fatal(err)
		}
	}
	var asked []string
	inUse := func(name string) bool {
		asked = append(asked, name)
		return name == filepath.Base(named)
	}

	dry := SweepSocketDirs(root, inUse, true)
	slices.Sort(dry)
	want := []string{deadDir, emptyDead, oldShapeOld}
	slices.Sort(want)
	if !slices.Equal(dry, want) {
		t.Errorf("dry run lists %v, want %v", dry, want)
	}
	if _, err := os.Stat(deadDir); err != nil {
		t.Errorf("dry run removed %s: %v", deadDir, err)
	}
	if slices.Contains(asked, filepath.Base(mine)) || slices.Contains(asked, filepath.Base(listening)) || slices.Contains(asked, filepath.Base(young)) {
		t.Errorf("the engine was asked about a live owner's folder: %v", asked)
	}

	got := SweepSocketDirs(root, inUse, false)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("removed %v, want %v", got, want)
	}
	for _, d := range want {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s kept: %v", d, err)
		}
	}
	for _, d := range []string{mine, named, listening, young, oldShapeNew, other, filepath.Join(root, "s-"+dead+"-9")} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s removed: %v", d, err)
		}
	}
}
