package startlimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
)

// slowRuntime records the most creates in flight at once (the rest of the
// Runtime is never called).
type slowRuntime struct {
	sandboxagent.Runtime
	inFlight, peak atomic.Int32
}

func (s *slowRuntime) Create(ctx context.Context, spec sandboxagent.ContainerSpec) (string, error) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			break
		}
	}
	time.Sleep(20 * time.Millisecond)
	return "id", nil
}

func TestWrap(t *testing.T) {
	slow := &slowRuntime{}
	rt := Wrap(slow, 3)
	var wg sync.WaitGroup
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := rt.Create(context.Background(), sandboxagent.ContainerSpec{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if p := slow.peak.Load(); p != 3 {
		t.Errorf("peak concurrent creates %d, want 3", p)
	}
	// A caller whose context ends while queued gives up.
	full := Wrap(&slowRuntime{}, 1).(*limited)
	full.slots <- struct{}{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := full.Create(ctx, sandboxagent.ContainerSpec{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued create: %v", err)
	}
}

// lacking reports no features (a Kubernetes-like runtime).
type lacking struct{ sandboxagent.Runtime }

func (lacking) Features() sandboxagent.RuntimeFeatures { return sandboxagent.RuntimeFeatures{} }

// The wrapper reports what the wrapped runtime lacks: without it a
// Kubernetes runtime behind the limit was asked for bind mounts.
func TestWrapKeepsFeatures(t *testing.T) {
	if got := sandboxagent.FeaturesOf(Wrap(lacking{}, 2)); got != (sandboxagent.RuntimeFeatures{}) {
		t.Errorf("features through Wrap: %+v, want none", got)
	}
	if got := sandboxagent.FeaturesOf(Wrap(&slowRuntime{}, 2)); !got.BindMounts || !got.ExecUser {
		t.Errorf("features of a full runtime through Wrap: %+v", got)
	}
}

// committer has checkpoint images (as runtime/docker does).
type committer struct {
	sandboxagent.Runtime
	commits int
}

func (c *committer) Commit(context.Context, string, string, func(int64) map[string]string, int64) (int64, error) {
	c.commits++
	return 42, nil
}

func (*committer) Images(context.Context, string) ([]checkpoint.Image, error) {
	return []checkpoint.Image{{Ref: "cp:x"}}, nil
}

func (*committer) RemoveImage(context.Context, string) error { return checkpoint.ErrInUse }

func (*committer) ImageExists(context.Context, string) (bool, error) { return true, nil }

// The wrapper passes checkpoint images on, and says what a runtime
// without them lacks.
func TestWrapPassesCheckpointImagesOn(t *testing.T) {
	ctx := context.Background()
	type engine interface {
		checkpoint.Engine
		Commit(context.Context, string, string, func(int64) map[string]string, int64) (int64, error)
		ImageExists(context.Context, string) (bool, error)
	}

	c := &committer{}
	full := Wrap(c, 1).(engine)
	// A commit takes no start slot: it goes through with every slot taken.
	full.(*limited).slots <- struct{}{}
	if n, err := full.Commit(ctx, "id", "cp:x", nil, 0); err != nil || n != 42 || c.commits != 1 {
		t.Errorf("Commit = %d, %v (commits %d)", n, err, c.commits)
	}
	if imgs, err := full.Images(ctx, "l"); err != nil || len(imgs) != 1 {
		t.Errorf("Images = %v, %v", imgs, err)
	}
	if err := full.RemoveImage(ctx, "cp:x"); !errors.Is(err, checkpoint.ErrInUse) {
		t.Errorf("RemoveImage = %v", err)
	}
	if ok, err := full.ImageExists(ctx, "cp:x"); !ok || err != nil {
		t.Errorf("ImageExists = %v, %v", ok, err)
	}

	none := Wrap(lacking{}, 1).(engine)
	if _, err := none.Commit(ctx, "id", "cp:x", nil, 0); !errors.Is(err, sandboxagent.ErrUnsupportedByRuntime) {
		t.Errorf("Commit without the method: %v, want ErrUnsupportedByRuntime", err)
	}
	if imgs, err := none.Images(ctx, "l"); imgs != nil || err != nil {
		t.Errorf("Images without the method = %v, %v", imgs, err)
	}
	if err := none.RemoveImage(ctx, "cp:x"); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("RemoveImage without the method: %v, want checkpoint.ErrNotFound", err)
	}
	if ok, err := none.ImageExists(ctx, "cp:x"); ok || err != nil {
		t.Errorf("ImageExists without the method = %v, %v", ok, err)
	}
}
