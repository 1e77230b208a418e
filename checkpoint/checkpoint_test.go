package checkpoint_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
	"github.com/sandbox-agent/sandbox-agent/checkpoint/checkpointtest"
	"github.com/sandbox-agent/sandbox-agent/internal/labels"
)

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

func ck(id string, age time.Duration) sandboxagent.Checkpoint {
	return sandboxagent.Checkpoint{ID: id, Created: t0.Add(-age), Driver: "pi", Parent: "sandbox-agent-x"}
}

func ids(cs []sandboxagent.Checkpoint) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

// forged lists images whose checkpoint label does not name them.
type forged struct{ imgs []checkpoint.Image }

func (f forged) Images(context.Context, string) ([]checkpoint.Image, error) { return f.imgs, nil }
func (f forged) RemoveImage(context.Context, string) error                  { return nil }

func labelOf(c sandboxagent.Checkpoint) map[string]string {
	b, _ := json.Marshal(c)
	return map[string]string{labels.Checkpoint: base64.RawURLEncoding.EncodeToString(b)}
}

func TestListMixesImagesAndArchives(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	var eng checkpointtest.Engine
	eng.Commit(t, ck("ck-aa", 0))
	checkpointtest.WriteArchive(t, root, ck("ck-bb", time.Hour))
	eng.Commit(t, ck("ck-cc", 2*time.Hour))
	if err := os.Mkdir(filepath.Join(root, "not-a-checkpoint"), 0o700); err != nil {
		t.Fatal(err)
	}
	all, err := checkpoint.List(ctx, &eng, root)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(all); !slices.Equal(got, []string{"ck-aa", "ck-bb", "ck-cc"}) {
		t.Errorf("List = %v, want newest first, images and archives", got)
	}
	if c, err := checkpoint.Get(ctx, &eng, root, "ck-bb"); err != nil || c.Archive != filepath.Join(root, "ck-bb") {
		t.Errorf("Get(ck-bb) = %+v, %v", c, err)
	}
	if _, err := checkpoint.Get(ctx, &eng, root, "ck-99"); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("Get(missing) = %v, want ErrNotFound", err)
	}
	// Nil engine, empty root: none.
	if all, err := checkpoint.List(ctx, nil, ""); err != nil || len(all) != 0 {
		t.Errorf("List(nil, \"\") = %v, %v", all, err)
	}
}

// An image whose label names another image, or a label that is not ours,
// is not listed: Remove and StartFrom act on what List returns.
func TestListSkipsForgedLabels(t *testing.T) {
	good := ck("ck-aa", 0)
	good.Image = sandboxagent.CheckpointRepo + ":ck-aa"
	other := ck("ck-bb", 0)
	other.Image = sandboxagent.CheckpointRepo + ":ck-bb"
	badID := ck("ck-../x", 0)
	badID.Image = sandboxagent.CheckpointRepo + ":ck-../x"
	eng := forged{imgs: []checkpoint.Image{
		{Ref: good.Image, Labels: labelOf(good)},
		{Ref: "debian:stable-slim", Labels: labelOf(other)},                                                // names another image
		{Ref: sandboxagent.CheckpointRepo + ":ck-cc", Labels: labelOf(other)},                              // another checkpoint's label
		{Ref: badID.Image, Labels: labelOf(badID)},                                                         // an id with a path
		{Ref: sandboxagent.CheckpointRepo + ":ck-dd", Labels: map[string]string{labels.Checkpoint: "%%%"}}, // not base64
	}}
	all, err := checkpoint.List(context.Background(), eng, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(all); !slices.Equal(got, []string{"ck-aa"}) {
		t.Errorf("List = %v, want only ck-aa", got)
	}
}

func TestRemoveRefusesWhatIsNotOurs(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	var eng checkpointtest.Engine
	outside := t.TempDir()
	for name, c := range map[string]sandboxagent.Checkpoint{
		"foreign image":         {ID: "ck-aa", Image: "debian:stable-slim"},
		"archive outside root":  {ID: "ck-aa", Archive: outside},
		"archive of another id": {ID: "ck-aa", Archive: filepath.Join(root, "ck-bb")},
		"id with a path":        {ID: "ck-../..", Archive: filepath.Join(root, "ck-../..")},
		"neither":               {ID: "ck-aa"},
	} {
		if err := checkpoint.Remove(ctx, &eng, root, c); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("%s: Remove = %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("the outside folder: %v", err)
	}
	if err := checkpoint.Remove(ctx, nil, root, sandboxagent.Checkpoint{ID: "ck-aa", Image: sandboxagent.CheckpointRepo + ":ck-aa"}); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("an image with no engine: %v", err)
	}
}

// Prune removes what keep does not keep, except what is in use, and
// archive folders left half-made over an hour ago.
func TestPrune(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	var eng checkpointtest.Engine
	eng.Commit(t, ck("ck-aa", 0))
	old := eng.Commit(t, ck("ck-bb", 48*time.Hour))
	used := eng.Commit(t, ck("ck-cc", 48*time.Hour))
	eng.SetInUse(used.Image, true)
	checkpointtest.WriteArchive(t, root, ck("ck-dd", 48*time.Hour))
	for _, d := range []struct {
		name string
		age  time.Duration
	}{{"ck-ee", 2 * time.Hour}, {"ck-ff", time.Minute}} { // half-made: no checkpoint.json
		dir := filepath.Join(root, d.name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(dir, time.Now().Add(-d.age), time.Now().Add(-d.age)); err != nil {
			t.Fatal(err)
		}
	}
	keep := func(c sandboxagent.Checkpoint) bool { return c.Created.After(t0.Add(-24 * time.Hour)) }
	removed, err := checkpoint.Prune(ctx, &eng, root, keep)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(removed); !slices.Equal(got, []string{"ck-bb", "ck-dd"}) && !slices.Equal(got, []string{"ck-dd", "ck-bb"}) {
		t.Errorf("Prune removed %v, want ck-bb and ck-dd", got)
	}
	if !eng.WasRemoved(old.Image) || eng.WasRemoved(used.Image) {
		t.Errorf("images removed %v", eng.Removed())
	}
	for name, want := range map[string]bool{"ck-dd": false, "ck-ee": false, "ck-ff": true} {
		_, err := os.Stat(filepath.Join(root, name))
		if (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", name, err == nil, want)
		}
	}
}
