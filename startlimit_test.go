package sandboxagent

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slowRuntime records the most creates in flight at once.
type slowRuntime struct {
	fakeRuntime
	inFlight, peak atomic.Int32
}

func (s *slowRuntime) Create(ctx context.Context, spec ContainerSpec) (string, error) {
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

func TestLimitStarts(t *testing.T) {
	slow := &slowRuntime{}
	rt := LimitStarts(slow, 3)
	var wg sync.WaitGroup
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := rt.Create(context.Background(), ContainerSpec{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if p := slow.peak.Load(); p != 3 {
		t.Errorf("peak concurrent creates %d, want 3", p)
	}
	// A caller whose context ends while queued gives up.
	full := LimitStarts(&slowRuntime{}, 1).(*limitedRuntime)
	full.slots <- struct{}{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := full.Create(ctx, ContainerSpec{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued create: %v", err)
	}
}

// The wrapper reports what the wrapped runtime lacks: without it a
// Kubernetes runtime behind LimitStarts was asked for bind mounts.
func TestLimitStartsKeepsFeatures(t *testing.T) {
	if got := FeaturesOf(LimitStarts(tunnelRuntime{&fakeRuntime{}}, 2)); got != (RuntimeFeatures{}) {
		t.Errorf("features through LimitStarts: %+v, want none", got)
	}
	if got := FeaturesOf(LimitStarts(&fakeRuntime{}, 2)); !got.BindMounts || !got.ExecUser {
		t.Errorf("features of a full runtime through LimitStarts: %+v", got)
	}
}
