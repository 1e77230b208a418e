package checkpoint

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/labels"
)

// maxMeta bounds a checkpoint.json read from an archive.
const maxMeta = 1 << 20

// leftoverAge is how old an archive folder without its checkpoint.json
// (a checkpoint whose process died while it was made) must be before
// Prune removes it.
const leftoverAge = time.Hour

// List returns our checkpoints, newest first: eng's committed images
// (nil: none) and the archives under root ("": none).
func List(ctx context.Context, eng Engine, root string) ([]sandboxagent.Checkpoint, error) {
	var out []sandboxagent.Checkpoint
	if eng != nil {
		imgs, err := eng.Images(ctx, labels.Checkpoint)
		if err != nil {
			return nil, fmt.Errorf("list checkpoint images: %w", err)
		}
		for _, img := range imgs {
			if c, ok := fromImage(img); ok {
				out = append(out, c)
			}
		}
	}
	if root != "" {
		arch, _, err := archives(root)
		if err != nil {
			return nil, err
		}
		out = append(out, arch...)
	}
	slices.SortFunc(out, func(a, b sandboxagent.Checkpoint) int {
		return cmp.Or(b.Created.Compare(a.Created), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// Get returns the checkpoint with that id, or ErrNotFound.
func Get(ctx context.Context, eng Engine, root, id string) (sandboxagent.Checkpoint, error) {
	all, err := List(ctx, eng, root)
	if err != nil {
		return sandboxagent.Checkpoint{}, err
	}
	for _, c := range all {
		if c.ID == id {
			return c, nil
		}
	}
	return sandboxagent.Checkpoint{}, fmt.Errorf("%w: %q", ErrNotFound, id)
}

// Remove deletes checkpoint c: its image (ErrInUse while a container runs
// on it) or its archive folder under root.
func Remove(ctx context.Context, eng Engine, root string, c sandboxagent.Checkpoint) error {
	switch {
	case c.Image != "":
		if eng == nil {
			return fmt.Errorf("%w: checkpoint %s is an engine image and no engine was given", sandboxagent.ErrInvalidArgument, c.ID)
		}
		if c.Image != sandboxagent.CheckpointRepo+":"+c.ID {
			return fmt.Errorf("%w: checkpoint %s names image %q, not one of ours", sandboxagent.ErrInvalidArgument, c.ID, c.Image)
		}
		return eng.RemoveImage(ctx, c.Image)
	case c.Archive != "":
		dir, err := archiveDir(root, c.ID)
		if err != nil {
			return err
		}
		if filepath.Clean(c.Archive) != dir {
			return fmt.Errorf("%w: checkpoint %s: archive %q is not under %s", sandboxagent.ErrInvalidArgument, c.ID, c.Archive, root)
		}
		if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %q", ErrNotFound, c.ID)
		}
		return os.RemoveAll(dir)
	}
	return fmt.Errorf("%w: checkpoint %q has neither image nor archive", sandboxagent.ErrInvalidArgument, c.ID)
}

// Prune removes the checkpoints keep does not keep, except those in use,
// and the archive folders left half-made more than an hour ago. It
// returns what it removed; it goes on past a failure and reports them all.
func Prune(ctx context.Context, eng Engine, root string, keep func(sandboxagent.Checkpoint) bool) ([]sandboxagent.Checkpoint, error) {
	all, err := List(ctx, eng, root)
	if err != nil {
		return nil, err
	}
	var removed []sandboxagent.Checkpoint
	var errs []error
	for _, c := range all {
		if keep(c) {
			continue
		}
		switch err := Remove(ctx, eng, root, c); {
		case err == nil:
			removed = append(removed, c)
		case errors.Is(err, ErrInUse), errors.Is(err, ErrNotFound):
		default:
			errs = append(errs, fmt.Errorf("remove checkpoint %s: %w", c.ID, err))
		}
	}
	if root != "" {
		_, leftovers, err := archives(root)
		errs = append(errs, err)
		for _, dir := range leftovers {
			if fi, err := os.Lstat(dir); err == nil && time.Since(fi.ModTime()) > leftoverAge {
				errs = append(errs, os.RemoveAll(dir))
			}
		}
	}
	return removed, errors.Join(errs...)
}

// fromImage decodes an image's checkpoint label; one that does not name
// the image it is on is not ours.
func fromImage(img Image) (sandboxagent.Checkpoint, bool) {
	b, err := base64.RawURLEncoding.DecodeString(img.Labels[labels.Checkpoint])
	var c sandboxagent.Checkpoint
	if err != nil || json.Unmarshal(b, &c) != nil || !validID(c.ID) || c.Image != img.Ref || img.Ref != sandboxagent.CheckpointRepo+":"+c.ID {
		return sandboxagent.Checkpoint{}, false
	}
	return c, true
}

func validID(id string) bool {
	if !strings.HasPrefix(id, "ck-") || len(id) > 64 {
		return false
	}
	for _, r := range id[3:] {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return len(id) > 3
}

func archiveDir(root, id string) (string, error) {
	if root == "" || !filepath.IsAbs(root) {
		return "", fmt.Errorf("%w: checkpoint root %q: want an absolute path", sandboxagent.ErrInvalidArgument, root)
	}
	if !validID(id) {
		return "", fmt.Errorf("%w: checkpoint id %q", sandboxagent.ErrInvalidArgument, id)
	}
	return filepath.Join(filepath.Clean(root), id), nil
}

// archives reads the archived checkpoints under root, and the folders of
// checkpoints never completed (no checkpoint.json).
func archives(root string) (done []sandboxagent.Checkpoint, leftovers []string, _ error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list archived checkpoints: %w", err)
	}
	for _, e := range ents {
		if !e.IsDir() || !validID(e.Name()) {
			continue
		}
		dir := filepath.Join(root, e.Name())
		c, err := readMeta(dir)
		switch {
		case errors.Is(err, os.ErrNotExist):
			leftovers = append(leftovers, dir)
		case err == nil && c.ID == e.Name() && filepath.Clean(c.Archive) == filepath.Clean(dir):
			done = append(done, c)
		}
	}
	return done, leftovers, nil
}

func readMeta(dir string) (sandboxagent.Checkpoint, error) {
	f, err := os.Open(filepath.Join(dir, "checkpoint.json"))
	if err != nil {
		return sandboxagent.Checkpoint{}, err
	}
	defer f.Close()
	var c sandboxagent.Checkpoint
	err = json.NewDecoder(io.LimitReader(f, maxMeta)).Decode(&c)
	return c, err
}
