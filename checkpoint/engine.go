// Package checkpoint manages the checkpoints agents leave (Agent.Checkpoint,
// Agent.Fork): it lists, inspects and removes them, and prunes those past
// their retention. A checkpoint is an engine image of the sandbox
// (Docker, Podman: a commit, labelled as ours) or, on engines without
// commits (Kubernetes), a folder under Config.CheckpointRoot.
package checkpoint

import (
	"context"
	"errors"
	"time"
)

var (
	// ErrNotFound: no checkpoint of ours has that id.
	ErrNotFound = errors.New("checkpoint not found")
	// ErrInUse: a container still runs on the checkpoint's image.
	ErrInUse = errors.New("checkpoint in use")
)

// Image is one engine image as Engine lists it.
type Image struct {
	Ref     string // repository:tag
	ID      string
	Labels  map[string]string
	Size    int64 // the image's whole size, its base's layers included
	Created time.Time
}

// Engine is what managing committed checkpoints needs of an engine
// (runtime/docker implements it, for Podman too).
type Engine interface {
	// Images lists the images that carry the label key, whatever its value.
	Images(ctx context.Context, label string) ([]Image, error)
	// RemoveImage removes an image by reference: ErrNotFound when it is
	// missing, ErrInUse (wrapped) when a container uses it.
	RemoveImage(ctx context.Context, ref string) error
}
