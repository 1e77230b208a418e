package startlimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
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
