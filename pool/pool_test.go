package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/seccomp"
	"github.com/sandbox-agent/sandbox-agent/telemetry"
)

// fakeRuntime is an engine in memory: containers with ids of their own
// that report the hardening they were asked for and can be made to
// vanish; its "CLI" answers every turn with the text pong.
type fakeRuntime struct {
	mu        sync.Mutex
	n         int
	specs     map[string]sandboxagent.ContainerSpec
	gone      map[string]bool
	removed   []string
	creates   int
	createErr error
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{specs: map[string]sandboxagent.ContainerSpec{}, gone: map[string]bool{}}
}

func (f *fakeRuntime) Info(context.Context) (sandboxagent.EngineInfo, error) {
	return sandboxagent.EngineInfo{Name: "fake"}, nil
}

func (f *fakeRuntime) Create(_ context.Context, spec sandboxagent.ContainerSpec) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates++
	if f.createErr != nil {
		return "", f.createErr
	}
	f.n++
	id := fmt.Sprintf("c%d", f.n)
	f.specs[id] = spec
	return id, nil
}

func (f *fakeRuntime) Start(context.Context, string) error { return nil }

func (f *fakeRuntime) Inspect(_ context.Context, id string) (sandboxagent.ContainerState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone[id] {
		return sandboxagent.ContainerState{}, fmt.Errorf("inspect %s: %w", id, sandboxagent.ErrContainerNotFound)
	}
	s := f.specs[id]
	return sandboxagent.ContainerState{
		ID: id, Name: s.Name, Running: true, Privileged: s.Privileged, CapDrop: s.CapDrop, CapAdd: s.CapAdd,
		NoNewPrivileges: s.NoNewPrivileges, ReadonlyRootfs: s.ReadonlyRootfs, Init: s.Init, PidsLimit: s.PidsLimit,
		MemoryBytes: s.MemoryBytes, MemorySwap: s.MemorySwap, NanoCPUs: s.NanoCPUs, NetworkMode: s.NetworkMode,
		Labels: s.Labels, Mounts: s.Mounts, Seccomp: seccomp.Digest(s.Seccomp), Runtime: s.Runtime,
	}, nil
}

func (f *fakeRuntime) Exec(_ context.Context, _ string, req sandboxagent.RuntimeExec) (int, error) {
	switch {
	case req.Cmd[0] == "sh" && strings.Contains(req.Cmd[2], "id -u"):
		io.WriteString(req.Stdout, "1000\n1000\n")
	case req.Cmd[0] == "fakecli":
		io.WriteString(req.Stdout, `{"text":"pong"}`+"\n")
	}
	return 0, nil // the kill script and the like
}

func (f *fakeRuntime) CopyTo(context.Context, string, string, io.Reader) error { return nil }

func (f *fakeRuntime) CopyFrom(context.Context, string, string) (io.ReadCloser, error) {
	return nil, sandboxagent.ErrPathNotFound
}

func (f *fakeRuntime) Kill(context.Context, string) error { return nil }

func (f *fakeRuntime) Remove(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gone[id] = true
	f.removed = append(f.removed, id)
	return nil
}

func (f *fakeRuntime) List(context.Context, map[string]string) ([]sandboxagent.ContainerState, error) {
	return nil, nil
}

func (f *fakeRuntime) removedIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.removed)
}

// fakeDriver runs "fakecli" and takes {"text": ...} lines for the reply.
type fakeDriver struct{}

func (fakeDriver) Name() string                                           { return "claude" } // any name versions.json knows
func (fakeDriver) Image() string                                          { return "" }
func (fakeDriver) Traits() sandboxagent.Traits                            { return sandboxagent.Traits{} }
func (fakeDriver) Secrets() []string                                      { return nil }
func (fakeDriver) NewParser(sandboxagent.Turn) sandboxagent.Parser        { return &fakeParser{} }
func (fakeDriver) Setup(context.Context, sandboxagent.ContainerOps) error { return nil }
func (fakeDriver) Command(t sandboxagent.Turn) (sandboxagent.Invocation, error) {
	return sandboxagent.Invocation{Cmd: []string{"fakecli", t.Prompt}}, nil
}

type fakeParser struct{ reply string }

func (p *fakeParser) Parse(line []byte) []sandboxagent.Event {
	var m map[string]string
	if json.Unmarshal(line, &m) != nil || m["text"] == "" {
		return nil
	}
	p.reply = m["text"]
	return []sandboxagent.Event{{Kind: sandboxagent.KindText, Payload: sandboxagent.Payload{Text: p.reply}}}
}

func (p *fakeParser) Finish(int, []byte) (sandboxagent.TurnOutcome, error) {
	return sandboxagent.TurnOutcome{Reply: p.reply}, nil
}

var quiet = sandboxagent.WithLogger(slog.New(slog.DiscardHandler))

// poolEvents counts the events a pool tells its agents' hooks of.
type poolEvents struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *poolEvents) option() sandboxagent.AgentOption {
	e.n = map[string]int{}
	return sandboxagent.WithHooks(telemetry.Hooks{Pool: func(ev telemetry.PoolEvent) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if ev.Driver == "claude" {
			e.n[ev.Kind]++
		}
	}})
}

func (e *poolEvents) counts() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.n)
}

func poolConfig(t *testing.T) sandboxagent.Config {
	cfg := sandboxagent.DefaultConfig()
	cfg.AuditRoot = filepath.Join(t.TempDir(), "audit")
	cfg.Egress = sandboxagent.EgressOpen // fakeDriver is not a ModelRouter
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
	rt := newFakeRuntime()
	var ev poolEvents
	p, err := New(rt, fakeDriver{}, 2, sandboxagent.WithConfig(poolConfig(t)), quiet, ev.option())
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, p, 2)
	ctx := context.Background()
	seen := map[string]bool{}
	var out []*sandboxagent.Agent
	for range 5 {
		waitReady(t, p, 1)
		a, err := p.Start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if seen[a.Container().ID()] {
			t.Fatalf("sandbox %s handed out twice", a.Container().ID())
		}
		seen[a.Container().ID()] = true
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
		if slices.Contains(removed, a.Container().ID()) {
			t.Errorf("Close removed %s, an agent handed out", a.Container().ID())
		}
	}
	if len(removed) != 2 {
		t.Errorf("Close removed %v; want the 2 ready ones", removed)
	}
	// The hooks' tally: 7 agents were ready, 5 handed out, 2 closed with
	// the pool; so none is ready, as a gauge fed by the events says.
	if got, want := ev.counts(), map[string]int{"ready": 7, "hit": 5, "retired": 2}; !maps.Equal(got, want) {
		t.Errorf("pool events %v, want %v", got, want)
	}
	if _, err := p.Start(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close: %v, want ErrClosed", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for _, a := range out {
		a.Close()
	}
}

func TestPoolRetiresGoneSandboxes(t *testing.T) {
	rt := newFakeRuntime()
	var ev poolEvents
	p, err := New(rt, fakeDriver{}, 2, sandboxagent.WithConfig(poolConfig(t)), quiet, ev.option())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitReady(t, p, 2)
	p.mu.Lock()
	fresh := p.ready[len(p.ready)-1].a.Container().ID()
	other := p.ready[0].a.Container().ID()
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
	if a.Container().ID() == fresh {
		t.Errorf("handed out %s (gone: %s, still running: %s)", a.Container().ID(), fresh, other)
	}
	if s := p.Stats(); s.Retired != 1 || s.Hits != 1 {
		t.Errorf("stats %+v: want one retired, one hit", s)
	}
	if got := ev.counts(); got["retired"] != 1 || got["hit"] != 1 || got["miss"] != 0 {
		t.Errorf("pool events %v: want one retired, one hit", got)
	}
}

func TestPoolBackgroundFailure(t *testing.T) {
	rt := newFakeRuntime()
	boom := fmt.Errorf("create: %w", sandboxagent.ErrImageNotFound)
	rt.createErr = boom
	var ev poolEvents
	p, err := New(rt, fakeDriver{}, 3, sandboxagent.WithConfig(poolConfig(t)), quiet, ev.option())
	if err != nil {
		t.Fatal(err)
	}
	// An empty pool starts in the caller: the caller sees the error.
	if _, err := p.Start(context.Background()); !errors.Is(err, sandboxagent.ErrImageNotFound) {
		t.Errorf("Start on a failing pool: %v, want sandboxagent.ErrImageNotFound", err)
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
	if s.Misses != 1 || s.Failed < 3 || !errors.Is(p.Stats().LastErr, sandboxagent.ErrImageNotFound) {
		t.Errorf("stats %+v, last error %v: want one miss, the failures counted and kept", s, p.Stats().LastErr)
	}
	if got := ev.counts(); got["miss"] != 1 || got["failed"] != s.Failed || got["ready"] != 0 {
		t.Errorf("pool events %v: want one miss and %d failed", got, s.Failed)
	}
	rt.mu.Lock()
	n := rt.creates
	rt.mu.Unlock()
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
	rt := newFakeRuntime()
	for name, tc := range map[string]struct {
		size int
		opts []sandboxagent.AgentOption
	}{
		"size 0":     {0, nil},
		"fixed name": {2, []sandboxagent.AgentOption{sandboxagent.WithSandbox(func(o *sandboxagent.SandboxOptions) { o.Name = "mine" })}},
	} {
		if _, err := New(rt, fakeDriver{}, tc.size, tc.opts...); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("%s: %v, want sandboxagent.ErrInvalidArgument", name, err)
		}
	}
	if _, err := New(nil, fakeDriver{}, 1); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("nil runtime: %v", err)
	}
}

// A pool retires ready agents before their sandboxes' keepalive could
// remove them, whatever configuration WithSandbox put in (its zero
// keepalive is the default one, as NewSandbox reads it).
func TestPoolRetiresBeforeKeepalive(t *testing.T) {
	for name, tc := range map[string]struct {
		opts []sandboxagent.AgentOption
		want time.Duration
	}{
		"default":         {nil, sandboxagent.DefaultConfig().Keepalive / 2},
		"config":          {[]sandboxagent.AgentOption{sandboxagent.WithConfig(sandboxagent.Config{Keepalive: time.Hour})}, 30 * time.Minute},
		"sandbox's own":   {[]sandboxagent.AgentOption{sandboxagent.WithSandbox(func(o *sandboxagent.SandboxOptions) { o.Keepalive = 10 * time.Minute })}, 5 * time.Minute},
		"config replaced": {[]sandboxagent.AgentOption{sandboxagent.WithSandbox(func(o *sandboxagent.SandboxOptions) { o.Config = sandboxagent.Config{} })}, sandboxagent.DefaultConfig().Keepalive / 2},
	} {
		rt := newFakeRuntime()
		rt.createErr = errors.New("no start needed")
		p, err := New(rt, fakeDriver{}, 1, append(tc.opts, quiet)...)
		if err != nil {
			t.Fatal(err)
		}
		if p.maxIdle != tc.want {
			t.Errorf("%s: ready agents retired after %v, want %v", name, p.maxIdle, tc.want)
		}
		p.Close()
	}
}
