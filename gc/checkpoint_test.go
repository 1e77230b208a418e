package gc

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
	"github.com/sandbox-agent/sandbox-agent/checkpoint/checkpointtest"
)

// leftover makes a folder of an archive never completed, age old.
func leftover(t *testing.T, root, id string, age time.Duration) string {
	t.Helper()
	dir := filepath.Join(root, id)
	if err := os.MkdirAll(filepath.Join(dir, "files"), 0o700); err != nil {
		t.Fatal(err)
	}
	then := time.Now().Add(-age)
	if err := os.Chtimes(dir, then, then); err != nil {
		t.Fatal(err)
	}
	return dir
}

func ids(es []CheckpointEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Checkpoint.ID)
	}
	slices.Sort(out)
	return out
}

func TestCheckpointsRetention(t *testing.T) {
	ctx := context.Background()
	now := time.Now().UTC()
	old, recent := now.Add(-200*time.Hour), now.Add(-time.Hour)
	eng := &checkpointtest.Engine{}
	eng.SetInUse(sandboxagent.CheckpointRepo+":ck-03", true)
	eng.Commit(t, sandboxagent.Checkpoint{ID: "ck-01", Name: "old", Created: old, Driver: "pi"})
	eng.Commit(t, sandboxagent.Checkpoint{ID: "ck-02", Name: "owned", Created: old, Owner: "serve-a", Driver: "pi"})
	eng.Commit(t, sandboxagent.Checkpoint{ID: "ck-03", Name: "in use", Created: old, Driver: "pi"})
	eng.Commit(t, sandboxagent.Checkpoint{ID: "ck-04", Name: "recent", Created: recent, Driver: "pi"})
	root := t.TempDir()
	oldDir := checkpointtest.WriteArchive(t, root, sandboxagent.Checkpoint{ID: "ck-0a", Created: old, Driver: "pi"}).Archive
	recentDir := checkpointtest.WriteArchive(t, root, sandboxagent.Checkpoint{ID: "ck-0b", Created: recent, Driver: "pi"}).Archive
	ownedDir := checkpointtest.WriteArchive(t, root, sandboxagent.Checkpoint{ID: "ck-0c", Created: old, Owner: "serve-a", Driver: "pi"}).Archive
	stale := leftover(t, root, "ck-0d", 2*time.Hour)
	fresh := leftover(t, root, "ck-0e", time.Minute)
	notOurs := leftover(t, root, "keep-me", 2*time.Hour)
	opts := CheckpointOptions{Retention: 168 * time.Hour}

	// A dry run reports and removes nothing.
	dry := opts
	dry.DryRun = true
	res, err := Checkpoints(ctx, eng, root, dry)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(res.Removed); !slices.Equal(got, []string{"ck-01", "ck-03", "ck-0a"}) {
		t.Errorf("dry run would remove %v", got)
	}
	if got := ids(res.Kept); !slices.Equal(got, []string{"ck-02", "ck-0c"}) {
		t.Errorf("dry run keeps %v", got)
	}
	if !slices.Equal(res.Leftovers, []string{stale}) {
		t.Errorf("dry run leftovers %v", res.Leftovers)
	}
	if removed := eng.Removed(); len(removed) != 0 {
		t.Errorf("dry run removed %v", removed)
	}
	for _, d := range []string{oldDir, stale} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("dry run removed %s", d)
		}
	}

	res, err = Checkpoints(ctx, eng, root, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(res.Removed); !slices.Equal(got, []string{"ck-01", "ck-0a"}) {
		t.Errorf("removed %v", got)
	}
	if removed := eng.Removed(); !slices.Equal(removed, []string{sandboxagent.CheckpointRepo + ":ck-01"}) {
		t.Errorf("engine removed %v", removed)
	}
	kept := map[string]string{}
	for _, e := range res.Kept {
		kept[e.Checkpoint.ID] = e.Reason
	}
	if kept["ck-02"] != "owned by server serve-a" || kept["ck-0c"] != "owned by server serve-a" || kept["ck-03"] != "in use: an agent still runs on it" || len(kept) != 3 {
		t.Errorf("kept %v", kept)
	}
	if !slices.Equal(res.Leftovers, []string{stale}) {
		t.Errorf("leftovers %v", res.Leftovers)
	}
	for d, want := range map[string]bool{oldDir: false, stale: false, recentDir: true, ownedDir: true, fresh: true, notOurs: true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s exists %v, want %v", filepath.Base(d), err == nil, want)
		}
	}
	left, err := checkpoint.List(ctx, eng, root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range left {
		names = append(names, c.ID)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"ck-02", "ck-03", "ck-04", "ck-0b", "ck-0c"}) {
		t.Errorf("left %v", names)
	}
}

// No engine (Kubernetes) and no root: nothing to look at, no error; a
// retention of zero removes nothing.
func TestCheckpointsNothing(t *testing.T) {
	res, err := Checkpoints(context.Background(), nil, "", CheckpointOptions{Retention: time.Hour})
	if err != nil || len(res.Removed)+len(res.Kept)+len(res.Leftovers) != 0 {
		t.Errorf("%+v, %v", res, err)
	}
	root := t.TempDir()
	checkpointtest.WriteArchive(t, root, sandboxagent.Checkpoint{ID: "ck-01", Created: time.Now().Add(-1000 * time.Hour), Driver: "pi"})
	res, err = Checkpoints(context.Background(), nil, root, CheckpointOptions{})
	if err != nil || len(res.Removed) != 0 {
		t.Errorf("retention 0: %+v, %v", res, err)
	}
}

func TestCheckpointID(t *testing.T) {
	for id, want := range map[string]bool{"ck-0123abcdef": true, "ck-": false, "ck-XYZ": false, "ck-../x": false, "other": false} {
		if checkpointID(id) != want {
			t.Errorf("checkpointID(%q) = %v", id, !want)
		}
	}
}
