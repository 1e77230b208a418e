//go:build integration

package conformance_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/metering"
)

// budgetDrivers: one per wire API (claude: Anthropic Messages, codex:
// OpenAI Responses, pi: OpenAI Chat Completions as the suite configures
// it). opencode and dsh speak the same APIs.
var budgetDrivers = []string{"claude", "codex", "pi"}

// TestConformanceBudget: the model proxy counts what the fake model
// reported, request by request, the same for every wire API; a spent
// budget stops the next turn before the model gets a request, with
// metering.ErrBudgetExceeded; raised, the next turn continues the session.
func TestConformanceBudget(t *testing.T) {
	var subs []subtest
	for _, name := range budgetDrivers {
		subs = append(subs, subtest{name, func(t *testing.T) {
			srv := drivertest.FakeModel(t, fakemodel.Script{Responses: []fakemodel.Step{
				{Text: "ONE", Usage: &fakemodel.Usage{InputTokens: 1234, OutputTokens: 56}},
				{Text: "TWO", Usage: &fakemodel.Usage{InputTokens: 2345, OutputTokens: 67}},
			}})
			drv := drivers.All()[name](drivers.Endpoint{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key, Provider: "sandbox"})
			meter, err := metering.NewMeter(metering.MeterOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cfg := testenv.Config()
			cfg.AuditRoot = drivertest.AuditRoot(t)
			cfg.Timeouts.Ask = 5 * time.Minute
			a := testenv.StartAgent(t, drv, cfg.AuditRoot, sandboxagent.WithConfig(cfg), sandboxagent.WithMeter(meter))
			ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
			defer cancel()

			r1, err := a.Stream(ctx, "BUDGET-ONE say one", nil)
			if err != nil || r1.Reply != "ONE" {
				t.Fatalf("turn 1: %q, %v", r1.Reply, err)
			}
			// What the fake model reported, request by request (the CLI's
			// side requests too), is what the proxy counted.
			var served metering.Usage
			var n int64
			for _, r := range srv.Requests() {
				if r.Usage != nil {
					served = served.Add(metering.Usage{InputTokens: int64(r.Usage.InputTokens), OutputTokens: int64(r.Usage.OutputTokens)})
					n++
				}
			}
			// A side request of the CLI may end after the turn's result: the
			// turn counts at most what was served, the meter all of it (once
			// the proxy has logged it).
			if r1.Usage == nil || r1.Usage.Requests == 0 || r1.Usage.Requests > n || r1.Usage.Usage.Tokens() > served.Tokens() {
				t.Fatalf("turn 1 usage %+v, the fake model served %+v in %d requests", r1.Usage, served, n)
			}
			deadline := time.Now().Add(10 * time.Second)
			for meter.Spent().Usage != served && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if s := meter.Spent(); s.Usage != served || s.Requests != n {
				t.Errorf("meter %+v, the fake model served %+v in %d requests", s, served, n)
			}
			t.Logf("turn 1: %d requests, %+v", n, served)
			// The CLI's own report is kept beside the proxy's count.
			if v := r1.Verification; v == nil {
				t.Error("turn 1 has no verification")
			} else if v.CLIUsage != nil {
				t.Logf("the CLI reported %+v (cumulative %v); differs from the proxy's: %v", *v.CLIUsage, v.CLIUsageCumulative, v.UsageDiffers)
			}

			// Spent: the next turn's first request is refused by the proxy.
			if err := meter.SetBudget(metering.Budget{Tokens: served.Tokens()}); err != nil {
				t.Fatal(err)
			}
			// Requests that cost: completions (listing models and counting
			// tokens are never refused).
			completions := func() (n int) {
				for _, r := range srv.Requests() {
					if r.Method == "POST" && r.API != "" {
						n++
					}
				}
				return n
			}
			before := completions()
			r2, err := a.Stream(ctx, "BUDGET-TWO say two", nil)
			if !errors.Is(err, metering.ErrBudgetExceeded) {
				t.Fatalf("turn past the budget: %q, %v; want ErrBudgetExceeded", r2.Reply, err)
			}
			if got := completions(); got != before {
				t.Errorf("the fake model got %d completion requests past the budget", got-before)
			}
			t.Logf("refused: %v", err)

			// Raised: the session goes on.
			if err := meter.SetBudget(metering.Budget{}); err != nil {
				t.Fatal(err)
			}
			r3, err := a.Stream(ctx, "BUDGET-THREE say two", nil)
			if err != nil || r3.Reply != "TWO" || r3.SessionID != r1.SessionID {
				t.Fatalf("after raising the budget: %q, session %q (turn 1 %q), %v", r3.Reply, r3.SessionID, r1.SessionID, err)
			}
		}})
	}
	runConcurrently(t, subs)
}
