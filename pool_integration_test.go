//go:build integration

package sandboxagent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/pool"
)

// doneDriver is driver name against a fake model of its own whose empty
// script answers every turn with the text DONE in one model call (so one
// server answers any number of CLIs alike), closed at cleanup.
func doneDriver(tb testing.TB, name string) sandboxagent.Driver {
	tb.Helper()
	return scriptDriver(tb, name, fakemodel.Script{})
}

// scriptDriver is the driver name against a fake model of its own serving
// script, under a key of its own.
func scriptDriver(tb testing.TB, name string, script fakemodel.Script) sandboxagent.Driver {
	tb.Helper()
	drv, _ := fakeDriver(tb, name, script)
	return drv
}

// fakeDriver is scriptDriver with its fake model, whose requests a test
// reads.
func fakeDriver(tb testing.TB, name string, script fakemodel.Script) (sandboxagent.Driver, *fakemodel.Server) {
	tb.Helper()
	script.ExpectKey = "sk-bench-" + randHex(8)
	srv, err := fakemodel.New(script, fakemodel.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { srv.Close() })
	drv, err := drivers.New(name, drivers.Endpoint{BaseURL: srv.URL() + "/v1", APIKey: script.ExpectKey, Provider: "sandbox"})
	if err != nil {
		tb.Fatal(err)
	}
	return drv, srv
}

// poolAgent is what the pool tests and benchmarks start: a real CLI
// (codex: the least CPU per turn) through the model proxy to a fake model,
// and the label its sandboxes carry.
func poolAgent(tb testing.TB) (sandboxagent.Driver, []sandboxagent.AgentOption, map[string]string) {
	tb.Helper()
	drv := doneDriver(tb, "codex")
	cfg := testenv.Config()
	cfg.AuditRoot = filepath.Join(tb.TempDir(), "audit")
	label := map[string]string{poolLabel: randHex(6)} // this test's sandboxes, none else
	return drv, []sandboxagent.AgentOption{sandboxagent.WithConfig(cfg),
		sandboxagent.WithSandbox(func(o *sandboxagent.SandboxOptions) { o.Labels = label })}, label
}

const poolLabel = "sandbox-agent.test-pool"

// The pool hands out started agents that answer, never the same sandbox
// twice, and Close removes the ready ones from the engine but not those
// handed out.
func TestIntegrationPool(t *testing.T) {
	rt := testenv.Runtime(t)
	drv, opts, mine := poolAgent(t)
	p, err := pool.New(rt, drv, 2, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := p.Wait(ctx, 2); err != nil {
		if errors.Is(p.Stats().LastErr, sandboxagent.ErrImageNotFound) {
			prereq.Missing(t, "codex image missing (bash .ci/setup): %v", p.Stats().LastErr)
		}
		t.Fatalf("pool not ready: %v (last start: %v)", err, p.Stats().LastErr)
	}
	a, err := p.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := p.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.Container().ID() == b.Container().ID() {
		t.Fatalf("one sandbox handed out twice: %s", a.Container().ID())
	}
	for _, ag := range []*sandboxagent.Agent{a, b} {
		if reply, err := ag.Ask(ctx, "reply DONE"); err != nil || reply != fakemodel.DoneText {
			t.Errorf("pooled agent %s: %q %v", ag.Container().Name(), reply, err)
		}
	}
	if err := p.Wait(ctx, 2); err != nil {
		t.Fatalf("not refilled: %v (last start: %v)", err, p.Stats().LastErr)
	}
	if s := p.Stats(); s.Hits != 2 || s.Misses != 0 || s.Ready != 2 {
		t.Errorf("stats %+v: want 2 hits, 2 ready", s)
	}
	before, err := rt.List(ctx, mine)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := rt.List(ctx, mine)
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 4 || len(after) != 2 {
		t.Errorf("the pool's sandboxes: %d before Close, %d after; want 4 (2 handed out, 2 ready), then the 2 handed out", len(before), len(after))
	}
	for _, ag := range []*sandboxagent.Agent{a, b} {
		if st, err := ag.Container().Inspect(ctx); err != nil || !st.Running {
			t.Errorf("handed-out sandbox %s after the pool closed: %+v %v", ag.Container().Name(), st, err)
		}
	}
}

// A pooled agent's long-lived CLI is started and warmed ahead (for pi and
// opencode with a warm-up turn): nothing of that reaches the model (its
// requests are answered by the agent), is audited, or is left in the
// first turn's context — the pooled agent's first model request carries
// the same conversation as a cold agent's — and the first turn starts a
// session the next one continues. SANDBOX_AGENT_TEST_DRIVERS (a comma
// list) narrows the drivers; default every driver with a long-lived mode.
func TestIntegrationPoolWarm(t *testing.T) {
	rt := testenv.Runtime(t)
	var names []string
	for _, name := range drivers.Names() {
		if v := os.Getenv("SANDBOX_AGENT_TEST_DRIVERS"); v != "" && !slices.Contains(strings.Split(v, ","), name) {
			continue
		}
		if _, ok := doneDriver(t, name).(sandboxagent.LongLived); ok {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		t.Fatal("no driver with a long-lived mode")
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			drv, srv := fakeDriver(t, name, fakemodel.Script{})
			cfg := testenv.Config()
			cfg.AuditRoot = filepath.Join(t.TempDir(), "audit")
			p, err := pool.New(rt, drv, 1, sandboxagent.WithConfig(cfg))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if err := p.Wait(ctx, 1); err != nil {
				t.Fatalf("pool not ready: %v (last start: %v)", err, p.Stats().LastErr)
			}
			a, err := p.Start(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if err := p.Close(); err != nil { // no refill beside the turns
				t.Fatal(err)
			}
			if got := completions(srv.Requests()); len(got) != 0 {
				t.Fatalf("the warm-up reached the model: %d requests, first %s", len(got), got[0].Body)
			}
			if name == "claude" {
				// claude's warm-up asks the model nothing, not even a
				// token count (get_context_usage "summary" counts
				// locally); a HEAD probe of the endpoint may come.
				for _, r := range srv.Requests() {
					if r.Method != http.MethodHead {
						t.Fatalf("claude's warm-up reached the model: %s %s", r.Method, r.Path)
					}
				}
			}
			if b, _ := os.ReadFile(filepath.Join(a.NetworkAuditDir(), "model.jsonl")); len(b) != 0 {
				t.Fatalf("the warm-up is in the model audit: %s", b)
			}
			const prompt = "turn 1: reply DONE"
			res, err := a.Stream(ctx, prompt, nil)
			// The CLI's own session id, not one made up for want of it.
			if err != nil || res.Reply != fakemodel.DoneText || res.SessionID == "" || strings.HasPrefix(res.SessionID, "unknown-") || a.SessionID() != res.SessionID {
				t.Fatalf("pooled turn 1: %+v %v (agent's session %q)", res, err, a.SessionID())
			}
			pooled := completions(srv.Requests())
			if len(pooled) == 0 {
				t.Fatal("pooled turn 1 made no model request")
			}
			if bytes.Contains(pooled[0].Body, []byte("warm-up")) {
				t.Errorf("the warm-up prompt is in turn 1's context: %.2000s", pooled[0].Body)
			}
			res2, err := a.Stream(ctx, "turn 2: reply DONE", nil)
			if err != nil || res2.SessionID != res.SessionID {
				t.Errorf("turn 2: session %q (turn 1 %q) %v", res2.SessionID, res.SessionID, err)
			}

			// The same first turn on a cold agent: the same conversation.
			n := len(srv.Requests())
			c, err := sandboxagent.Start(ctx, rt, drv, sandboxagent.WithConfig(cfg))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if reply, err := c.Ask(ctx, prompt); err != nil || reply != fakemodel.DoneText {
				t.Fatalf("cold turn 1: %q %v", reply, err)
			}
			cold := completions(srv.Requests()[n:])
			if len(cold) == 0 {
				t.Fatal("cold turn 1 made no model request")
			}
			if pm, cm := conversation(t, pooled[0]), conversation(t, cold[0]); pm != cm || !strings.Contains(pm, prompt) {
				t.Errorf("turn 1's conversation, pooled:\n%s\ncold:\n%s", pm, cm)
			}
		})
	}
}

// completions are the model calls among reqs (not the probes some CLIs
// make).
func completions(reqs []fakemodel.Request) []fakemodel.Request {
	var out []fakemodel.Request
	for _, r := range reqs {
		if r.API != "" {
			out = append(out, r)
		}
	}
	return out
}

// conversation is a request's turns without the system prompt (which
// names dates, folders and sessions): the role and text of each message
// or input item.
func conversation(t *testing.T, r fakemodel.Request) string {
	t.Helper()
	var body struct {
		Messages []json.RawMessage `json:"messages"`
		Input    json.RawMessage   `json:"input"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatalf("request body: %v", err)
	}
	items := body.Messages
	if len(body.Input) > 0 && body.Input[0] == '[' {
		if err := json.Unmarshal(body.Input, &items); err != nil {
			t.Fatalf("request input: %v", err)
		}
	}
	var out []string
	for _, m := range items {
		var msg struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(m, &msg) != nil || msg.Role == "system" || msg.Role == "developer" {
			continue
		}
		out = append(out, msg.Role+": "+string(msg.Content))
	}
	return strings.Join(out, "\n")
}

// Agent start, cold (sandboxagent.Start: create, verify, start, the CLI's
// setup) against from a warm pool (Pool.Start with an agent ready: one
// engine round trip). The wait for the refill and the Close are outside
// the timer. Run with
//
//	go test -tags integration -run '^$' -bench '^BenchmarkAgentStart$' -benchtime 20x .
func BenchmarkAgentStart(b *testing.B) {
	rt := testenv.Runtime(b)
	drv, opts, _ := poolAgent(b)
	ctx := context.Background()
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			a, err := sandboxagent.Start(ctx, rt, drv, opts...)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			a.Close()
			b.StartTimer()
		}
	})
	b.Run("pool", func(b *testing.B) {
		p, err := pool.New(rt, drv, 1, opts...)
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		for b.Loop() {
			b.StopTimer()
			if err := p.Wait(ctx, 1); err != nil {
				b.Fatal(err, p.Stats().LastErr)
			}
			b.StartTimer()
			a, err := p.Start(ctx)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			a.Close()
			b.StartTimer()
		}
		if s := p.Stats(); s.Misses != 0 {
			b.Errorf("%d starts missed the pool", s.Misses)
		}
	})
}
