package prom

import (
	"context"
	"errors"
	dto "github.com/prometheus/client_model/go"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sandbox-agent/sandbox-agent/metering"
	"github.com/sandbox-agent/sandbox-agent/telemetry"
)

// The hooks feed the series they are named for, with bounded labels: an
// unknown model is "other", a refusal counts as a request and a refusal,
// tokens by kind.
func TestHooksFeedTheSeries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := New(reg, Options{Engine: "docker", Prices: metering.Prices{"gpt-5.5": {Input: 5, Output: 30}}})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Hooks("acme")
	ctx := context.Background()

	_, done := h.SandboxStart(ctx, telemetry.SandboxStart{Image: "img"})
	done(telemetry.SandboxDone{Phases: []telemetry.Phase{{Name: "sandbox", Duration: time.Second}, {Name: "setup", Duration: 2 * time.Second}}})
	_, done = h.SandboxStart(ctx, telemetry.SandboxStart{Image: "img"})
	done(telemetry.SandboxDone{Err: errors.New("no engine")})
	for _, d := range []telemetry.ExecDone{{QueueWait: 250 * time.Millisecond}, {ExitCode: 3}, {Err: errors.New("gone"), QueueWait: 500 * time.Millisecond}} {
		_, end := h.Exec(ctx, telemetry.ExecStart{})
		end(d)
	}
	_, end := h.Turn(ctx, telemetry.TurnStart{Driver: "codex"})
	end(telemetry.TurnDone{Outcome: "ok"})
	_, end = h.Turn(ctx, telemetry.TurnStart{Driver: "codex"})
	end(telemetry.TurnDone{Outcome: "budget_exceeded"})
	h.ModelRequest(ctx, telemetry.ModelRequest{Driver: "codex", Model: "gpt-5.5-2026-04-23", Status: 200, Usage: &metering.Usage{InputTokens: 100, OutputTokens: 7, CacheReadTokens: 40}, Duration: time.Second})
	h.ModelRequest(ctx, telemetry.ModelRequest{Driver: "codex", Model: "made-up-by-the-upstream", Status: 200, Usage: &metering.Usage{InputTokens: 5}})
	h.ModelRequest(ctx, telemetry.ModelRequest{Driver: "codex", Status: 402, Refused: true})
	h.Egress(telemetry.EgressDecision{Allowed: true})
	h.Egress(telemetry.EgressDecision{})
	for _, d := range []telemetry.DownloadDone{{Files: 2, Bytes: 300}, {Files: 1, Bytes: 5}, {Err: errors.New("too big")}} {
		_, end := h.Download(ctx, telemetry.DownloadStart{})
		end(d)
	}
	// Two pools of claude: 3 agents were ready, one was handed out, one
	// retired, so one is ready; one Start found its pool empty.
	for _, k := range []string{"ready", "ready", "hit", "ready", "retired", "miss", "failed"} {
		h.Pool(telemetry.PoolEvent{Driver: "claude", Kind: k})
	}

	want := `
# HELP sandbox_agent_budget_refusals_total Model requests the proxy refused because a budget was spent, by driver and tenant.
# TYPE sandbox_agent_budget_refusals_total counter
sandbox_agent_budget_refusals_total{driver="codex",engine="docker",tenant="acme"} 1
# HELP sandbox_agent_download_bytes_total Bytes of regular files the downloads brought to the host.
# TYPE sandbox_agent_download_bytes_total counter
sandbox_agent_download_bytes_total{engine="docker"} 305
# HELP sandbox_agent_downloads_total Copies of a sandbox's files to the host, by outcome (ok, error).
# TYPE sandbox_agent_downloads_total counter
sandbox_agent_downloads_total{engine="docker",outcome="error"} 1
sandbox_agent_downloads_total{engine="docker",outcome="ok"} 2
# HELP sandbox_agent_egress_decisions_total Decisions of the egress proxy, by decision (allowed, denied).
# TYPE sandbox_agent_egress_decisions_total counter
sandbox_agent_egress_decisions_total{decision="allowed",engine="docker"} 1
sandbox_agent_egress_decisions_total{decision="denied",engine="docker"} 1
# HELP sandbox_agent_execs_total Commands run in sandboxes, by outcome (ok: exit 0, exit: another code, error: did not run to its end).
# TYPE sandbox_agent_execs_total counter
sandbox_agent_execs_total{engine="docker",outcome="error"} 1
sandbox_agent_execs_total{engine="docker",outcome="exit"} 1
sandbox_agent_execs_total{engine="docker",outcome="ok"} 1
# HELP sandbox_agent_model_requests_total Requests through the model proxy, by driver, model, tenant and status class (2xx, 4xx, 5xx; refused: by a budget).
# TYPE sandbox_agent_model_requests_total counter
sandbox_agent_model_requests_total{driver="codex",engine="docker",model="gpt-5.5",status="2xx",tenant="acme"} 1
sandbox_agent_model_requests_total{driver="codex",engine="docker",model="other",status="2xx",tenant="acme"} 1
sandbox_agent_model_requests_total{driver="codex",engine="docker",model="other",status="refused",tenant="acme"} 1
# HELP sandbox_agent_model_tokens_total Tokens the model proxy counted, by driver, model, tenant and kind (input, output, cache_read, cache_write; input includes cached).
# TYPE sandbox_agent_model_tokens_total counter
sandbox_agent_model_tokens_total{driver="codex",engine="docker",kind="cache_read",model="gpt-5.5",tenant="acme"} 40
sandbox_agent_model_tokens_total{driver="codex",engine="docker",kind="input",model="gpt-5.5",tenant="acme"} 100
sandbox_agent_model_tokens_total{driver="codex",engine="docker",kind="input",model="other",tenant="acme"} 5
sandbox_agent_model_tokens_total{driver="codex",engine="docker",kind="output",model="gpt-5.5",tenant="acme"} 7
# HELP sandbox_agent_pool_ready Agents ready in pools, by driver.
# TYPE sandbox_agent_pool_ready gauge
sandbox_agent_pool_ready{driver="claude",engine="docker"} 1
# HELP sandbox_agent_pool_retired_total Ready agents pools closed unused (sandbox gone, idle too long, pool closed), by driver.
# TYPE sandbox_agent_pool_retired_total counter
sandbox_agent_pool_retired_total{driver="claude",engine="docker"} 1
# HELP sandbox_agent_pool_start_failures_total Background starts of pools that failed, by driver.
# TYPE sandbox_agent_pool_start_failures_total counter
sandbox_agent_pool_start_failures_total{driver="claude",engine="docker"} 1
# HELP sandbox_agent_pool_takes_total Agents asked of pools, by driver and outcome (hit: a ready one; miss: none was ready).
# TYPE sandbox_agent_pool_takes_total counter
sandbox_agent_pool_takes_total{driver="claude",engine="docker",outcome="hit"} 1
sandbox_agent_pool_takes_total{driver="claude",engine="docker",outcome="miss"} 1
# HELP sandbox_agent_sandbox_starts_total Agents' sandbox starts, by outcome (ok, error).
# TYPE sandbox_agent_sandbox_starts_total counter
sandbox_agent_sandbox_starts_total{engine="docker",outcome="error"} 1
sandbox_agent_sandbox_starts_total{engine="docker",outcome="ok"} 1
# HELP sandbox_agent_turns_total Agent turns, by driver and outcome (ok, timeout, budget_exceeded, canceled, error).
# TYPE sandbox_agent_turns_total counter
sandbox_agent_turns_total{driver="codex",engine="docker",outcome="budget_exceeded"} 1
sandbox_agent_turns_total{driver="codex",engine="docker",outcome="ok"} 1
`
	names := []string{"sandbox_agent_budget_refusals_total", "sandbox_agent_download_bytes_total", "sandbox_agent_downloads_total",
		"sandbox_agent_egress_decisions_total", "sandbox_agent_execs_total", "sandbox_agent_pool_ready", "sandbox_agent_pool_retired_total",
		"sandbox_agent_pool_start_failures_total", "sandbox_agent_pool_takes_total",
		"sandbox_agent_model_requests_total", "sandbox_agent_model_tokens_total", "sandbox_agent_sandbox_starts_total", "sandbox_agent_turns_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	// The start's phases and its total; a failed start has none.
	if n := testutil.CollectAndCount(m.sandboxStartSec); n != 3 {
		t.Errorf("%d start-time series, want sandbox, setup, total", n)
	}
	// Each exec's queue wait, apart from its time.
	if got := histogram(t, reg, "sandbox_agent_exec_queue_wait_seconds"); got.GetSampleCount() != 3 || got.GetSampleSum() != 0.75 {
		t.Errorf("exec queue wait: %d samples summing %gs, want 3 summing 0.75s", got.GetSampleCount(), got.GetSampleSum())
	}
	// Every series is one the exposition lints clean.
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// histogram is the one series of a histogram reg gathers.
func histogram(t *testing.T, reg prometheus.Gatherer, name string) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram()
		}
	}
	t.Fatalf("no single series %s", name)
	return nil
}
