// Package startlimit bounds how many sandboxes start at once: a Runtime
// wrapper that queues container creates and starts beyond a width, so many
// sandboxes starting together wait their turn instead of stampeding the
// engine.
package startlimit

import (
	"context"
	"errors"
	"fmt"
	"io"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
)

// DefaultWidth is Wrap's width when given none (the command line's
// max_concurrent_starts default).
const DefaultWidth = 8

// Wrap returns rt with at most n container creates and starts running at
// once; the others wait their turn (or their context). Share the returned
// Runtime between the sandboxes to be bounded together.
func Wrap(rt sandboxagent.Runtime, n int) sandboxagent.Runtime {
	if n <= 0 {
		n = DefaultWidth
	}
	return &limited{Runtime: rt, slots: make(chan struct{}, n)}
}

type limited struct {
	sandboxagent.Runtime
	slots chan struct{}
}

func (l *limited) acquire(ctx context.Context) error {
	select {
	case l.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *limited) Create(ctx context.Context, spec sandboxagent.ContainerSpec) (string, error) {
	if err := l.acquire(ctx); err != nil {
		return "", err
	}
	defer func() { <-l.slots }()
	return l.Runtime.Create(ctx, spec)
}

func (l *limited) Start(ctx context.Context, id string) error {
	if err := l.acquire(ctx); err != nil {
		return err
	}
	defer func() { <-l.slots }()
	return l.Runtime.Start(ctx, id)
}

// Features passes the wrapped runtime's on (the Sandbox adapts to them).
func (l *limited) Features() sandboxagent.RuntimeFeatures { return sandboxagent.FeaturesOf(l.Runtime) }

// Attach and RecordsOOMKills pass the wrapped runtime's on
// (sandboxagent.RunOnce: the container's start takes its slot as any), or
// say there are none.
func (l *limited) Attach(ctx context.Context, id string, stdout, stderr io.Writer) (func() (int, bool, error), error) {
	if a, ok := l.Runtime.(attacher); ok {
		return a.Attach(ctx, id, stdout, stderr)
	}
	return nil, fmt.Errorf("attach: %w", sandboxagent.ErrUnsupportedByRuntime)
}

func (l *limited) RecordsOOMKills(ctx context.Context) bool {
	a, ok := l.Runtime.(attacher)
	return ok && a.RecordsOOMKills(ctx)
}

// attacher is what RunOnce needs of a runtime beyond sandboxagent.Runtime.
type attacher interface {
	Attach(ctx context.Context, id string, stdout, stderr io.Writer) (func() (int, bool, error), error)
	RecordsOOMKills(ctx context.Context) bool
}

// DiskQuotas, DiskQuotasOf and DiskUsage pass the wrapped runtime's on (the disk limit's
// default and its measure), or say there are none.
func (l *limited) DiskQuotas(ctx context.Context) error {
	if d, ok := l.Runtime.(interface{ DiskQuotas(context.Context) error }); ok {
		return d.DiskQuotas(ctx)
	}
	return errors.New("the engine enforces no disk limit")
}

func (l *limited) DiskQuotasOf(ctx context.Context, image string) error {
	if d, ok := l.Runtime.(interface {
		DiskQuotasOf(context.Context, string) error
	}); ok {
		return d.DiskQuotasOf(ctx, image)
	}
	return l.DiskQuotas(ctx)
}

func (l *limited) DiskUsage(ctx context.Context, id string) (int64, error) {
	if d, ok := l.Runtime.(interface {
		DiskUsage(context.Context, string) (int64, error)
	}); ok {
		return d.DiskUsage(ctx, id)
	}
	return 0, errors.New("the engine cannot measure a container's disk")
}

// Commit, Images, RemoveImage and ImageExists pass the wrapped runtime's
// checkpoint images on (Agent.Checkpoint, checkpoint.Engine), or say there
// are none. A commit takes no start slot: it starts nothing.
func (l *limited) Commit(ctx context.Context, id, ref string, labels func(int64) map[string]string, maxBytes int64) (int64, error) {
	if c, ok := l.Runtime.(interface {
		Commit(context.Context, string, string, func(int64) map[string]string, int64) (int64, error)
	}); ok {
		return c.Commit(ctx, id, ref, labels, maxBytes)
	}
	return 0, fmt.Errorf("%w: the engine cannot commit a container", sandboxagent.ErrUnsupportedByRuntime)
}

func (l *limited) Images(ctx context.Context, label string) ([]checkpoint.Image, error) {
	if e, ok := l.Runtime.(checkpoint.Engine); ok {
		return e.Images(ctx, label)
	}
	return nil, nil
}

func (l *limited) RemoveImage(ctx context.Context, ref string) error {
	if e, ok := l.Runtime.(checkpoint.Engine); ok {
		return e.RemoveImage(ctx, ref)
	}
	return fmt.Errorf("remove image %s: %w", ref, checkpoint.ErrNotFound)
}

func (l *limited) ImageExists(ctx context.Context, ref string) (bool, error) {
	if e, ok := l.Runtime.(interface {
		ImageExists(context.Context, string) (bool, error)
	}); ok {
		return e.ImageExists(ctx, ref)
	}
	return false, nil
}
