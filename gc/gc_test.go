package gc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/boundary"
	"github.com/sandbox-agent/sandbox-agent/internal/labels"
)

// fakeRuntime lists what it holds and records removals.
type fakeRuntime struct {
	list    []sandboxagent.ContainerState
	removed []string
}

func (f *fakeRuntime) List(_ context.Context, want map[string]string) ([]sandboxagent.ContainerState, error) {
	return f.list, nil // unfiltered: Run must not trust the engine's filter
}

func (f *fakeRuntime) Remove(_ context.Context, id string) error {
	f.removed = append(f.removed, id)
	return nil
}

func TestPolicy(t *testing.T) {
	host, _ := os.Hostname()
	now := time.Now()
	f := &fakeRuntime{list: []sandboxagent.ContainerState{
		{ID: "mine-alive", Running: true, Labels: map[string]string{sandboxagent.LabelManaged: "true", sandboxagent.LabelHost: host, sandboxagent.LabelPID: strconv.Itoa(os.Getpid())}},
		{ID: "mine-dead-owner", Running: true, Labels: map[string]string{sandboxagent.LabelManaged: "true", sandboxagent.LabelHost: host, sandboxagent.LabelPID: "999999999"}},
		{ID: "other-host-exited", Status: sandboxagent.StatusExited, Labels: map[string]string{sandboxagent.LabelManaged: "true", sandboxagent.LabelHost: "elsewhere"}},
		{ID: "other-host-running", Running: true, Labels: map[string]string{sandboxagent.LabelManaged: "true", sandboxagent.LabelHost: "elsewhere"}},
		{ID: "other-host-creating", Status: sandboxagent.StatusCreated, Created: now, Labels: map[string]string{sandboxagent.LabelManaged: "true", sandboxagent.LabelHost: "elsewhere"}},
		{ID: "foreign", Running: true, Labels: map[string]string{sandboxagent.LabelManaged: "false"}},
	}}
	res, err := Run(context.Background(), f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.removed, ","); got != "mine-dead-owner,other-host-exited" {
		t.Errorf("removed %s", got)
	}
	if len(res.Kept) != 3 {
		t.Errorf("kept %+v", res.Kept)
	}
	f.removed = nil
	if _, err := Run(context.Background(), f, Options{All: true}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.removed, ","); strings.Contains(got, "foreign") || len(f.removed) != 5 {
		t.Errorf("--all removed %s", got)
	}
	f.removed = nil
	if _, err := Run(context.Background(), f, Options{All: true, DryRun: true}); err != nil || len(f.removed) != 0 {
		t.Errorf("dry run removed %v (%v)", f.removed, err)
	}
}

// gc removes the socket folder of a sandbox whose owner died, and only a
// folder of the shape sandbox-agent makes, inside this user's socket root.
func TestRemovesSocketFolders(t *testing.T) {
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
	dead := map[string]string{sandboxagent.LabelManaged: "true", sandboxagent.LabelHost: host, sandboxagent.LabelPID: "999999999"}
	with := func(sockets string) map[string]string {
		l := map[string]string{labels.Sockets: sockets}
		for k, v := range dead {
			l[k] = v
		}
		return l
	}
	rt := &fakeRuntime{list: []sandboxagent.ContainerState{
		{ID: "a", Labels: with(filepath.Base(dir))},
		{ID: "b", Labels: with("../" + filepath.Base(outside))},
		{ID: "c", Labels: with(outside)},
	}}
	res, err := Run(context.Background(), rt, Options{})
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
func TestSweepsSocketFolders(t *testing.T) {
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
	// Another host's running sandbox naming the folder: Run keeps both.
	rt := &fakeRuntime{list: []sandboxagent.ContainerState{{ID: "a", Running: true, Status: sandboxagent.StatusRunning,
		Labels: map[string]string{sandboxagent.LabelManaged: "true", sandboxagent.LabelHost: "elsewhere", sandboxagent.LabelPID: "1", labels.Sockets: filepath.Base(named)}}}}
	res, err := Run(context.Background(), rt, Options{})
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

// Run keeps a running sandbox a server owns, whatever its PID label says,
// and removes a stopped one; --all removes it.
func TestKeepsOwnedSandboxes(t *testing.T) {
	host, _ := os.Hostname()
	owned := map[string]string{sandboxagent.LabelManaged: "true", sandboxagent.LabelHost: host, sandboxagent.LabelPID: "999999999", labels.Owner: "srv-a"}
	rt := &fakeRuntime{list: []sandboxagent.ContainerState{
		{ID: "run", Running: true, Status: sandboxagent.StatusRunning, Labels: owned},
		{ID: "stopped", Status: sandboxagent.StatusExited, Labels: owned},
		{ID: "unowned", Running: true, Status: sandboxagent.StatusRunning, Labels: map[string]string{sandboxagent.LabelManaged: "true", sandboxagent.LabelHost: host, sandboxagent.LabelPID: "999999999"}},
	}}
	res, err := Run(context.Background(), rt, Options{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Kept) != 1 || res.Kept[0].ID != "run" || res.Kept[0].Reason != "owned by server srv-a" {
		t.Errorf("kept %+v", res.Kept)
	}
	if len(res.Removed) != 2 || res.Removed[0].Reason != "not running (exited)" {
		t.Errorf("removed %+v", res.Removed)
	}
	if res, _ := Run(context.Background(), rt, Options{DryRun: true, All: true}); len(res.Removed) != 3 {
		t.Errorf("--all removed %+v", res.Removed)
	}
}
