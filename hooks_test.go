package sandboxagent

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/metering"
	"github.com/sandbox-agent/sandbox-agent/modelproxy"
	"github.com/sandbox-agent/sandbox-agent/telemetry"
)

// WithHooks: the agent's start reports its phases, each turn its driver
// and outcome under the turn's context, and commands run through the
// sandbox report their exit codes.
func TestAgentHooks(t *testing.T) {
	type key struct{}
	var mu sync.Mutex
	var got []string
	note := func(s string) { mu.Lock(); got = append(got, s); mu.Unlock() }
	hooks := telemetry.Hooks{
		SandboxStart: func(ctx context.Context, s telemetry.SandboxStart) (context.Context, func(telemetry.SandboxDone)) {
			note("start " + s.Image)
			return ctx, func(d telemetry.SandboxDone) {
				var names []string
				for _, p := range d.Phases {
					names = append(names, p.Name)
				}
				note("started " + filepath.Join(names...))
			}
		},
		Turn: func(ctx context.Context, s telemetry.TurnStart) (context.Context, func(telemetry.TurnDone)) {
			note("turn " + s.Driver + " " + s.Model)
			return context.WithValue(ctx, key{}, "turn-ctx"), func(d telemetry.TurnDone) { note("turn done " + d.Outcome) }
		},
		Exec: func(ctx context.Context, _ telemetry.ExecStart) (context.Context, func(telemetry.ExecDone)) {
			if ctx.Value(key{}) == "turn-ctx" {
				note("exec in the turn")
			}
			return ctx, func(d telemetry.ExecDone) {
				if d.ExitCode == 7 {
					note("exec exit 7")
				}
			}
		},
	}
	rt := cliRuntime(func(prompt string) (string, string, int) {
		if prompt == "seven" {
			return "", "", 7
		}
		return `{"text":"hi"}` + "\n", "", 0
	})
	cfg := DefaultConfig()
	cfg.AuditRoot = filepath.Join(t.TempDir(), "audit")
	cfg.Egress = EgressOpen
	a, err := Start(context.Background(), rt, &fakeDriver{key: "k-123456"}, WithConfig(cfg), WithModel("m1"), WithHooks(hooks))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Ask(context.Background(), "one"); err != nil {
		t.Fatal(err)
	}
	_, _ = a.Ask(context.Background(), "seven")
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"start " + a.State().Image, "started sandbox/setup", "turn claude m1", "turn done ok", "exec in the turn", "turn done error", "exec exit 7"} {
		if !slices.Contains(got, want) {
			t.Errorf("no %q among the hooks' calls %q", want, got)
		}
	}
}

// Join calls every hook, contexts passing from one to the next and every
// end func run.
func TestJoinHooks(t *testing.T) {
	type key struct{}
	var ends []string
	mk := func(name string) telemetry.Hooks {
		return telemetry.Hooks{Turn: func(ctx context.Context, _ telemetry.TurnStart) (context.Context, func(telemetry.TurnDone)) {
			return context.WithValue(ctx, key{}, name), func(telemetry.TurnDone) { ends = append(ends, name) }
		}}
	}
	h := telemetry.Join(mk("a"), telemetry.Hooks{}, mk("b"))
	ctx, end := h.Turn(context.Background(), telemetry.TurnStart{})
	if ctx.Value(key{}) != "b" {
		t.Errorf("context %v, want the last hook's", ctx.Value(key{}))
	}
	end(telemetry.TurnDone{})
	if !slices.Equal(ends, []string{"b", "a"}) {
		t.Errorf("ends %v", ends)
	}
	if h := telemetry.Join(); h.Turn != nil || h.Exec != nil {
		t.Error("Join of nothing has hooks")
	}
}

// Every request through the model proxy reaches the ModelRequest hook
// with its driver, model, status and usage, in a turn or not.
func TestModelRequestHook(t *testing.T) {
	var got []telemetry.ModelRequest
	a := &Agent{drv: &fakeDriver{}, hooks: telemetry.Hooks{ModelRequest: func(_ context.Context, r telemetry.ModelRequest) { got = append(got, r) }}}
	a.turnCtx.Store(new(context.Background())) // as newAgent does
	u := metering.Usage{InputTokens: 3, OutputTokens: 1}
	a.modelRecord(modelproxy.Record{Model: "gpt-5.5", Status: 200, Usage: &u, DurationMS: 5})
	a.modelRecord(modelproxy.Record{Status: 402, Budget: true})
	if len(got) != 2 {
		t.Fatalf("%d calls, want 2", len(got))
	}
	if r := got[0]; r.Driver != "claude" || r.Model != "gpt-5.5" || r.Status != 200 || r.Usage == nil || *r.Usage != u || r.Duration != 5*time.Millisecond {
		t.Errorf("first request %+v", r)
	}
	if r := got[1]; r.Status != 402 || !r.Refused {
		t.Errorf("refused request %+v", r)
	}
}
