//go:build integration

package conformance_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

const abortPrompt = "ABORT-PROMPT-4b8 run the long command"

// TestConformanceAbort: cancelling a turn's context while the CLI runs a
// long tool call ends the turn at once with the context's error and the
// events so far; the next turn continues the same session (its request
// carries the aborted turn's prompt) and answers.
func TestConformanceAbort(t *testing.T) {
	type mode struct {
		driver  string
		perTurn bool
	}
	var modes []mode
	for _, name := range drivers.Names() {
		modes = append(modes, mode{name, false})
		drv := drivers.All()[name](drivers.Endpoint{BaseURL: "http://x/v1", APIKey: "k", Provider: "sandbox"})
		if _, ok := drv.(sandboxagent.LongLived); ok {
			modes = append(modes, mode{name, true}) // its per-turn mode too
		}
	}
	var subs []subtest
	for _, m := range modes {
		name, label := m.driver, m.driver
		if m.perTurn {
			label += "/per_turn"
		}
		subs = append(subs, subtest{label, func(t *testing.T) {
			srv := drivertest.FakeModel(t, fakemodel.Script{Responses: []fakemodel.Step{
				{Tool: "shell", Command: drivertest.EndlessCommand},
				{Text: "AFTER-ABORT"},
			}})
			drv := drivers.All()[name](drivers.Endpoint{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key, Provider: "sandbox"})
			cfg := testenv.Config()
			cfg.AuditRoot = drivertest.AuditRoot(t)
			cfg.Timeouts.Ask = 5 * time.Minute
			cfg.PerTurn = m.perTurn
			a := testenv.StartAgent(t, drv, cfg.AuditRoot, sandboxagent.WithConfig(cfg))
			_, longLived := drv.(sandboxagent.LongLived)
			if want := sandboxagent.AbortKill; longLived && drv.Traits().Abort != sandboxagent.AbortInterrupt || !longLived && drv.Traits().Abort != want {
				t.Errorf("Traits.Abort = %q (long-lived mode %v)", drv.Traits().Abort, longLived)
			}

			running := func() string { return drivertest.EndlessRunning(context.Background(), a) }
			// Cancel while the CLI runs the tool (seen in the sandbox:
			// also the proof that the scan below sees it).
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var cancelled time.Time
			var seen string
			go func() {
				deadline := time.Now().Add(3 * time.Minute)
				for seen = running(); seen != "1" && time.Now().Before(deadline); seen = running() {
					time.Sleep(200 * time.Millisecond)
				}
				cancelled = time.Now()
				cancel()
			}()
			r1, err := a.Stream(ctx, abortPrompt, nil)
			took := time.Since(cancelled)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("aborted turn: %v, want context.Canceled (reply %q)", err, r1.Reply)
			}
			if seen != "1" {
				t.Fatalf("the tool never ran in the sandbox (scan: %q)", seen)
			}
			t.Logf("abort latency (cancel → Stream returned): %v", took.Round(time.Millisecond))
			if len(r1.Events) == 0 || r1.Events[len(r1.Events)-1].Kind != sandboxagent.KindDone {
				t.Errorf("aborted turn's events %+v: want those so far and a done", r1.Events)
			}
			if n := running(); n != "0" {
				t.Errorf("after the abort, processes of the tool: %q; want 0", n)
			}

			n := len(srv.Requests())
			ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel2()
			r2, err := a.Stream(ctx2, "CONTINUE-PROMPT go on", nil)
			if err != nil || r2.Reply != "AFTER-ABORT" {
				t.Fatalf("turn after the abort: %q, %v", r2.Reply, err)
			}
			if r1.SessionID != "" && !strings.HasPrefix(r1.SessionID, "unknown-") && r2.SessionID != r1.SessionID {
				t.Errorf("sessions %q then %q: the aborted session was not continued", r1.SessionID, r2.SessionID)
			}
			if body := drivertest.RequestText(t, srv, n); !strings.Contains(body, "ABORT-PROMPT-4b8") {
				t.Errorf("the request after the abort lacks the aborted turn's prompt: the session was not continued")
			}
		}})
	}
	runConcurrently(t, subs)
}
