package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"
)

// PullProgress is the state of one pull, reported as it changes.
type PullProgress struct {
	Ref        string
	Layers     int   // layers seen so far
	LayersDone int   // layers downloaded (or already present)
	Current    int64 // bytes downloaded of the layers whose size is known
	Total      int64 // their total size
	Done       bool  // the pull finished
}

// ErrNotInRegistry: the registry answered that it has no such image.
var ErrNotInRegistry = errors.New("not in the registry")

// ErrPullStalled: a pull sent nothing for pullStall.
var ErrPullStalled = errors.New("pull stalled")

// pullStall is how long a pull may go without a message from the engine
// (layers report progress every few hundred milliseconds).
const pullStall = 2 * time.Minute

// Pull pulls ref through the engine, with credentials from the Docker
// config (auths or credential helpers), reporting progress to fn (may be
// nil). A registry without the image is an error wrapping
// ErrNotInRegistry; an unreachable registry or refused credentials is
// another error.
func (e *ClientEngine) Pull(ctx context.Context, ref string, fn func(PullProgress)) error {
	auth, host, err := e.registryAuth(ref)
	if err != nil {
		return err
	}
	// A registry (or proxy) that accepts and then stalls must not hang a
	// start forever: no message for pullStall ends the pull.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := time.AfterFunc(pullStall, func() { cancel(fmt.Errorf("%w: no progress for %v", ErrPullStalled, pullStall)) })
	defer stall.Stop()
	resp, err := e.c.ImagePull(ctx, ref, client.ImagePullOptions{RegistryAuth: auth})
	if err != nil {
		return pullErr(authHint(err, host, auth))
	}
	defer resp.Close()
	t := newPullTracker(ref, fn)
	for msg, err := range resp.JSONMessages(ctx) {
		if err != nil {
			if c := context.Cause(ctx); c != nil && errors.Is(c, ErrPullStalled) {
				return c
			}
			return pullErr(authHint(err, host, auth))
		}
		stall.Reset(pullStall)
		if msg.Error != nil {
			return pullErr(authHint(errors.New(msg.Error.Message), host, auth))
		}
		t.update(msg.ID, msg.Status, msg.Progress)
	}
	t.finish()
	return nil
}

// pullErr classifies a registry's "no such image" answers (they differ
// between registries and engines).
func pullErr(err error) error {
	msg := strings.ToLower(err.Error())
	if cerrdefs.IsNotFound(err) || strings.Contains(msg, "manifest unknown") || strings.Contains(msg, "not found") ||
		strings.Contains(msg, "name unknown") || strings.Contains(msg, "does not exist") {
		return fmt.Errorf("%w: %w", ErrNotInRegistry, err)
	}
	return err
}

// pullTracker turns the engine's per-layer messages into PullProgress.
type pullTracker struct {
	ref    string
	fn     func(PullProgress)
	layers map[string]*layerState
}

type layerState struct {
	current, total int64
	done           bool
}

func newPullTracker(ref string, fn func(PullProgress)) *pullTracker {
	return &pullTracker{ref: ref, fn: fn, layers: map[string]*layerState{}}
}

// update takes one message: layer ids come with "Pulling fs layer",
// "Downloading" (with byte counts), "Download complete", "Already exists",
// "Pull complete" and the like; other messages carry no layer.
func (t *pullTracker) update(id, status string, p *jsonstream.Progress) {
	if id == "" || strings.HasPrefix(status, "Pulling from") || strings.HasPrefix(status, "Digest:") || strings.HasPrefix(status, "Status:") {
		return
	}
	l := t.layers[id]
	if l == nil {
		switch status {
		case "Pulling fs layer", "Waiting", "Downloading", "Already exists", "Copying blob":
		default:
			return // Podman ends with "Download complete" for the image id: not a layer
		}
		l = &layerState{}
		t.layers[id] = l
	}
	switch {
	case status == "Downloading" && p != nil:
		l.current = p.Current
		if p.Total > 0 {
			l.total = p.Total
		}
	case status == "Download complete" || status == "Pull complete" || status == "Already exists":
		l.done = true
		if l.total > 0 {
			l.current = l.total
		}
	}
	t.report(false)
}

func (t *pullTracker) report(done bool) {
	if t.fn == nil {
		return
	}
	pp := PullProgress{Ref: t.ref, Layers: len(t.layers), Done: done}
	for _, l := range t.layers {
		if l.done {
			pp.LayersDone++
		}
		pp.Current += l.current
		pp.Total += l.total
	}
	t.fn(pp)
}

func (t *pullTracker) finish() { t.report(true) }

// ProgressWriter renders PullProgress for a person: on a terminal one
// line redrawn in place with a bar; otherwise a line when a layer
// completes, at most every few seconds, and one at the end.
type ProgressWriter struct {
	w    io.Writer
	tty  bool
	mu   sync.Mutex
	last time.Time
	ref  string
}

// NewProgressWriter writes to w; tty is whether w is a terminal.
func NewProgressWriter(w io.Writer, tty bool) *ProgressWriter {
	return &ProgressWriter{w: w, tty: tty}
}

// IsTerminal reports whether f is a character device (a terminal).
func IsTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Pull renders one progress report.
func (p *ProgressWriter) Pull(pp PullProgress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	line := fmt.Sprintf("pulling %s: %d/%d layers, %s/%s", pp.Ref, pp.LayersDone, pp.Layers, mb(pp.Current), mb(pp.Total))
	switch {
	case pp.Done:
		if p.tty {
			fmt.Fprintf(p.w, "\r\x1b[K")
		}
		if pp.Layers == 0 {
			fmt.Fprintf(p.w, "pulled %s (every layer was already here)\n", pp.Ref)
		} else {
			fmt.Fprintf(p.w, "pulled %s: %d layers, %s\n", pp.Ref, pp.Layers, mb(pp.Total))
		}
	case p.tty:
		fmt.Fprintf(p.w, "\r\x1b[K%s %s", line, bar(pp.Current, pp.Total, 24))
	case pp.Ref != p.ref || now.Sub(p.last) >= 2*time.Second:
		fmt.Fprintln(p.w, line)
		p.last = now
	}
	p.ref = pp.Ref
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

func bar(cur, total int64, width int) string {
	filled := 0
	if total > 0 {
		filled = int(int64(width) * min(cur, total) / total)
	}
	return "[" + strings.Repeat("#", filled) + strings.Repeat("-", width-filled) + "]"
}
