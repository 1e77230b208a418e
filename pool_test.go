package sandboxagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// poolRuntime is a fakeRuntime whose containers have ids of their own and
// can be made to vanish.
type poolRuntime struct {
	*fakeRuntime
	mu    sync.Mutex
	n     int
	specs map[string]ContainerSpec
	gone  map[string]bool
}

func newPoolRuntime() *poolRuntime {
	return &poolRuntime{fakeRuntime: cliRuntime(func(string) (string, string, int) { return `{"text":"pong"}` + "\n", "", 0 }),
		specs: map[string]ContainerSpec{}, gone: map[string]bool{}}
}

func (p *poolRuntime) Create(ctx context.Context, spec ContainerSpec) (string, error) {
	if _, err := p.fakeRuntime.Create(ctx, spec); err != nil {
		return "", err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	id := fmt.Sprintf("c%d", p.n)
	p.specs[id] = spec
	return id, nil
}

func (p *poolRuntime) Inspect(_ context.Context, id string) (ContainerState, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone[id] {
		return ContainerState{}, fmt.Errorf("inspect %s: %w", id, ErrContainerNotFound)
	}
	return recorded(p.specs[id]), nil
}

func (p *poolRuntime) Remove(ctx context.Context, id string) error {
	p.mu.Lock()
	p.gone[id] = true
	p.mu.Unlock()
	return p.fakeRuntime.Remove(ctx, id)
}

func (p *poolRuntime) removedIDs() []string {
	p.fakeRuntime.mu.Lock()
	defer p.fakeRuntime.mu.Unlock()
	return slices.Clone(p.fakeRuntime.removed)
}

var quiet = WithLogger(slog.New(slog.DiscardHandler))

func poolConfig(t *testing.T) Config {
	cfg := DefaultConfig()
	cfg.AuditRoot = filepath.Join(t.TempDir(), "audit")
	cfg.Egress = EgressOpen // fakeDriver is not a ModelRouter
	return cfg
}

func waitReady(t *testing.T, p *Pool, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Wait(ctx, n); err != nil {
		t.Fatalf("pool never had %d ready: %v (stats %+v, last error %v)", n, err, p.Stats(), p.Stats().LastErr)
	}
}

func TestPoolHandsOutFreshAgentsAndRefills(t *testing.T) {
	rt := newPoolRuntime()
	p, err := NewPool(rt, &fakeDriver{key: "k"}, 2, WithConfig(poolConfig(t)), quiet)
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, p, 2)
	ctx := context.Background()
	seen := map[string]bool{}
	var out []*Agent
	for range 5 {
		waitReady(t, p, 1)
		a, err := p.Start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if seen[a.sb.id] {
			t.Fatalf("sandbox %s handed out twice", a.sb.id)
		}
		seen[a.sb.id] = true
		out = append(out, a)
	}
	if s := p.Stats(); s.Hits != 5 || s.Misses != 0 {
		t.Errorf("stats %+v: want 5 hits, no miss", s)
	}
	// A handed-out agent works as any other.
	if reply, err := out[0].Ask(ctx, "hi"); err != nil || reply != "pong" {
		t.Errorf("Ask on a pooled agent: %q %v", reply, err)
	}
	waitReady(t, p, 2)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	removed := rt.removedIDs()
	for _, a := range out {
		if slices.Contains(removed, a.sb.id) {
			t.Errorf("Close removed %s, an agent handed out", a.sb.id)
		}
	}
	if len(removed) != 2 {
		t.Errorf("Close removed %v; want the 2 ready ones", removed)
	}
	if _, err := p.Start(ctx); !errors.Is(err, ErrPoolClosed) {
		t.Errorf("Start after Close: %v, want ErrPoolClosed", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for _, a := range out {
		a.Close()
	}
}

func TestPoolRetiresGoneSandboxes(t *testing.T) {
	rt := newPoolRuntime()
	p, err := NewPool(rt, &fakeDriver{key: "k"}, 2, WithConfig(poolConfig(t)), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitReady(t, p, 2)
	p.mu.Lock()
	fresh := p.ready[len(p.ready)-1].a.sb.id
	other := p.ready[0].a.sb.id
	p.mu.Unlock()
	rt.mu.Lock()
	rt.gone[fresh] = true // removed behind the pool's back
	rt.mu.Unlock()
	a, err := p.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// The one still running, or the refill the retirement started if it
	// was ready first (the fake engine is that quick).
	if a.sb.id == fresh {
		t.Errorf("handed out %s (gone: %s, still running: %s)", a.sb.id, fresh, other)
	}
	if s := p.Stats(); s.Retired != 1 || s.Hits != 1 {
		t.Errorf("stats %+v: want one retired, one hit", s)
	}
}

func TestPoolBackgroundFailure(t *testing.T) {
	rt := newPoolRuntime()
	boom := fmt.Errorf("create: %w", ErrImageNotFound)
	var creates int
	rt.createErr = func(ContainerSpec) error { creates++; return boom }
	p, err := NewPool(rt, &fakeDriver{key: "k"}, 3, WithConfig(poolConfig(t)), quiet)
	if err != nil {
		t.Fatal(err)
	}
	// An empty pool starts in the caller: the caller sees the error.
	if _, err := p.Start(context.Background()); !errors.Is(err, ErrImageNotFound) {
		t.Errorf("Start on a failing pool: %v, want ErrImageNotFound", err)
	}
	// The background starts of the 3 slots fail too, and are counted (the
	// deadline only guards against a hang).
	deadline := time.Now().Add(time.Minute)
	for p.Stats().Failed < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	s := p.Stats()
	if s.Misses != 1 || s.Failed < 3 || !errors.Is(p.Stats().LastErr, ErrImageNotFound) {
		t.Errorf("stats %+v, last error %v: want one miss, the failures counted and kept", s, p.Stats().LastErr)
	}
	rt.fakeRuntime.mu.Lock()
	n := creates
	rt.fakeRuntime.mu.Unlock()
	if n < 1+3 {
		t.Errorf("%d creates, want the caller's and a background one per slot", n)
	}
}

// A background start that keeps failing waits longer each time (the
// retry is no loop): nothing after a success, then doubling from 250 ms
// to a cap of 30 s. A property of the schedule, not of a clock.
func TestPoolBackoff(t *testing.T) {
	want := []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second,
		4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second}
	p := &Pool{}
	for failures, w := range want {
		p.failures = failures
		if got := p.backoffLocked(); got != w {
			t.Errorf("backoff after %d failures: %v, want %v", failures, got, w)
		}
	}
	p.failures = 1000
	if got := p.backoffLocked(); got != 30*time.Second {
		t.Errorf("backoff after 1000 failures: %v, want the 30s cap", got)
	}
}

func TestPoolInvalid(t *testing.T) {
	rt := newPoolRuntime()
	for name, tc := range map[string]struct {
		size int
		opts []AgentOption
	}{
		"size 0":     {0, nil},
		"fixed name": {2, []AgentOption{WithSandbox(func(o *SandboxOptions) { o.Name = "mine" })}},
	} {
		if _, err := NewPool(rt, &fakeDriver{}, tc.size, tc.opts...); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := NewPool(nil, &fakeDriver{}, 1); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil runtime: %v", err)
	}
}
