package sandboxagent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/internal/boundary"
)

// gc removes the socket folder of a sandbox whose owner died, and only a
// folder of the shape sandbox-agent makes, inside this user's socket root.
func TestGCRemovesSocketFolders(t *testing.T) {
	root, err := boundary.SocketRoot()
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
		l := map[string]string{labelSockets: sockets}
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

// GC sweeps the socket root too, keeping a folder a remaining container
// names, and reports what it removed.
func TestGCSweepsSocketFolders(t *testing.T) {
	root, err := boundary.SocketRoot()
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
	// Both are older than the sweep's minimum age.
	aged := time.Now().Add(-time.Hour)
	for _, d := range []string{leftover, named} {
		if err := os.Chtimes(d, aged, aged); err != nil {
			t.Fatal(err)
		}
	}
	// Another host's running sandbox naming the folder: GC keeps both.
	rt := &fakeRuntime{list: []ContainerState{{ID: "a", Running: true, Status: StatusRunning,
		Labels: map[string]string{LabelManaged: "true", LabelHost: "elsewhere", LabelPID: "1", labelSockets: filepath.Base(named)}}}}
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
