// Package checkpointtest is the test kit of code that manages checkpoints
// (package checkpoint) without an engine: Engine, a fake checkpoint.Engine
// whose images are committed checkpoints, and WriteArchive, a finished
// archived checkpoint under a root. It depends on the root package and
// package checkpoint alone.
package checkpointtest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
	"github.com/sandbox-agent/sandbox-agent/internal/labels"
)

// Engine is a checkpoint.Engine that holds committed checkpoints as
// images (Commit). An image in use (SetInUse) refuses removal as an
// engine does while a container runs on it; a missing one is
// checkpoint.ErrNotFound. Its zero value holds none; it is safe for
// concurrent use.
type Engine struct {
	mu      sync.Mutex
	images  []checkpoint.Image
	inUse   map[string]bool
	removed []string
}

var _ checkpoint.Engine = (*Engine)(nil)

// Images lists the images that carry the label key.
func (e *Engine) Images(_ context.Context, label string) ([]checkpoint.Image, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []checkpoint.Image
	for _, img := range e.images {
		if _, ok := img.Labels[label]; ok {
			out = append(out, img)
		}
	}
	return out, nil
}

// RemoveImage removes the image ref: an error wrapping
// checkpoint.ErrInUse, in an engine's words (they name a container),
// while it is in use; checkpoint.ErrNotFound when it holds none.
func (e *Engine) RemoveImage(_ context.Context, ref string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inUse[ref] {
		return fmt.Errorf("remove image %s: conflict: image is being used by running container sandbox-agent-4242: %w", ref, checkpoint.ErrInUse)
	}
	i := slices.IndexFunc(e.images, func(img checkpoint.Image) bool { return img.Ref == ref })
	if i < 0 {
		return fmt.Errorf("%w: no image %s", checkpoint.ErrNotFound, ref)
	}
	e.images = slices.Delete(e.images, i, i+1)
	e.removed = append(e.removed, ref)
	return nil
}

// Commit holds c as the library commits it: its image
// (CheckpointRepo:ID), labelled with c. It returns c with its image.
func (e *Engine) Commit(t testing.TB, c sandboxagent.Checkpoint) sandboxagent.Checkpoint {
	t.Helper()
	c.Image, c.Archive = sandboxagent.CheckpointRepo+":"+c.ID, ""
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.images = append(e.images, checkpoint.Image{Ref: c.Image, ID: "sha256:" + c.ID, Created: c.Created,
		Labels: map[string]string{labels.Checkpoint: base64.RawURLEncoding.EncodeToString(b)}})
	return c
}

// SetInUse marks the image ref in use (a container runs on it) or not.
func (e *Engine) SetInUse(ref string, inUse bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inUse == nil {
		e.inUse = map[string]bool{}
	}
	e.inUse[ref] = inUse
}

// Refs are the images it holds, in the order of their commits.
func (e *Engine) Refs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := []string{}
	for _, img := range e.images {
		out = append(out, img.Ref)
	}
	return out
}

// Removed are the images RemoveImage removed, in that order.
func (e *Engine) Removed() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.removed)
}

// WasRemoved reports whether RemoveImage removed the image ref.
func (e *Engine) WasRemoved(ref string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Contains(e.removed, ref)
}

// WriteArchive writes c as a finished archived checkpoint under root, as
// the library archives one: root/ID with its files folder and its
// checkpoint.json. It returns c with its archive (and no image).
func WriteArchive(t testing.TB, root string, c sandboxagent.Checkpoint) sandboxagent.Checkpoint {
	t.Helper()
	c.Image, c.Archive = "", filepath.Join(root, c.ID)
	if err := os.MkdirAll(filepath.Join(c.Archive, "files"), 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.Archive, "checkpoint.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}
