// Package prom turns sandbox-agent's telemetry hooks into Prometheus
// metrics (github.com/prometheus/client_golang). Every series is named
// sandbox_agent_*, by Prometheus' conventions (_total counters, _seconds
// histograms), with bounded labels only: never an agent's or a sandbox's
// id, and a model name only when it is one of the Models given (else
// "other": the name comes from the upstream's answer).
package prom

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandbox-agent/sandbox-agent/metering"
	"github.com/sandbox-agent/sandbox-agent/telemetry"
)

// Options configure the metrics.
type Options struct {
	// Engine is the engine label of every series ("docker", "podman",
	// "kubernetes").
	Engine string
	// Prices name the models kept as label values: a model the table
	// prices (a dated snapshot as its model's name); others are "other".
	Prices metering.Prices
}

// Metrics are the collectors, registered on the Registerer New was given.
type Metrics struct {
	prices metering.Prices

	sandboxStarts   *prometheus.CounterVec
	sandboxStartSec *prometheus.HistogramVec
	execs           *prometheus.CounterVec
	execSec         prometheus.Histogram
	execQueueSec    prometheus.Histogram
	turns           *prometheus.CounterVec
	turnSec         *prometheus.HistogramVec
	modelRequests   *prometheus.CounterVec
	modelTokens     *prometheus.CounterVec
	modelSec        *prometheus.HistogramVec
	budgetRefusals  *prometheus.CounterVec
	egress          *prometheus.CounterVec
	downloads       *prometheus.CounterVec
	downloadBytes   prometheus.Counter
	poolReady       *prometheus.GaugeVec
	poolTakes       *prometheus.CounterVec
	poolRetired     *prometheus.CounterVec
	poolFailures    *prometheus.CounterVec
}

// Start-up and turn durations span 0.1 s to ~7 min; commands and model
// requests 5 ms to ~5 min.
var (
	slowBuckets = prometheus.ExponentialBuckets(0.1, 2, 13)
	fastBuckets = prometheus.ExponentialBuckets(0.005, 2, 16)
)

// New registers the metrics on reg.
func New(reg prometheus.Registerer, o Options) (*Metrics, error) {
	if o.Engine != "" {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"engine": o.Engine}, reg)
	}
	m := &Metrics{
		prices: o.Prices,
		sandboxStarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_agent_sandbox_starts_total",
			Help: "Agents' sandbox starts, by outcome (ok, error)."}, []string{"outcome"}),
		sandboxStartSec: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sandbox_agent_sandbox_start_seconds",
			Help: "Time to start an agent's sandbox, by phase (sandbox: the engine's part and the proxies; setup: the driver's; total).", Buckets: slowBuckets},
			[]string{"phase"}),
		execs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_agent_execs_total",
			Help: "Commands run in sandboxes, by outcome (ok: exit 0, exit: another code, error: did not run to its end)."}, []string{"outcome"}),
		execSec: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sandbox_agent_exec_seconds",
			Help: "Time a command in a sandbox took, from the call to its end.", Buckets: fastBuckets}),
		execQueueSec: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sandbox_agent_exec_queue_wait_seconds",
			Help: "Part of a command's time spent waiting for the engine's exec admission queue (max_concurrent_execs).", Buckets: fastBuckets}),
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_agent_turns_total",
			Help: "Agent turns, by driver and outcome (ok, timeout, budget_exceeded, canceled, error)."}, []string{"driver", "outcome"}),
		turnSec: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sandbox_agent_turn_seconds",
			Help: "Time an agent turn took, by driver.", Buckets: slowBuckets}, []string{"driver"}),
		modelRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_agent_model_requests_total",
			Help: "Requests through the model proxy, by driver, model, tenant and status class (2xx, 4xx, 5xx; refused: by a budget)."},
			[]string{"driver", "model", "tenant", "status"}),
		modelTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_agent_model_tokens_total",
			Help: "Tokens the model proxy counted, by driver, model, tenant and kind (input, output, cache_read, cache_write; input includes cached)."},
			[]string{"driver", "model", "tenant", "kind"}),
		modelSec: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sandbox_agent_model_request_seconds",
			Help: "Time a request through the model proxy took, to its last byte, by driver.", Buckets: fastBuckets}, []string{"driver"}),
		budgetRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_agent_budget_refusals_total",
			Help: "Model requests the proxy refused because a budget was spent, by driver and tenant."}, []string{"driver", "tenant"}),
		egress: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_agent_egress_decisions_total",
			Help: "Decisions of the egress proxy, by decision (allowed, denied)."}, []string{"decision"}),
		downloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_agent_downloads_total",
			Help: "Copies of a sandbox's files to the host, by outcome (ok, error)."}, []string{"outcome"}),
		downloadBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "sandbox_agent_download_bytes_total",
			Help: "Bytes of regular files the downloads brought to the host."}),
		poolReady: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sandbox_agent_pool_ready",
			Help: "Agents ready in pools, by driver."}, []string{"driver"}),
		poolTakes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_agent_pool_takes_total",
			Help: "Agents asked of pools, by driver and outcome (hit: a ready one; miss: none was ready)."}, []string{"driver", "outcome"}),
		poolRetired: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_agent_pool_retired_total",
			Help: "Ready agents pools closed unused (sandbox gone, idle too long, pool closed), by driver."}, []string{"driver"}),
		poolFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_agent_pool_start_failures_total",
			Help: "Background starts of pools that failed, by driver."}, []string{"driver"}),
	}
	for _, c := range []prometheus.Collector{m.sandboxStarts, m.sandboxStartSec, m.execs, m.execSec, m.execQueueSec, m.turns, m.turnSec,
		m.modelRequests, m.modelTokens, m.modelSec, m.budgetRefusals, m.egress, m.downloads, m.downloadBytes,
		m.poolReady, m.poolTakes, m.poolRetired, m.poolFailures} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Hooks feed the metrics; tenant labels the model requests' series
// ("" for an embedder without tenants).
func (m *Metrics) Hooks(tenant string) telemetry.Hooks {
	return telemetry.Hooks{
		SandboxStart: func(ctx context.Context, _ telemetry.SandboxStart) (context.Context, func(telemetry.SandboxDone)) {
			t0 := time.Now()
			return ctx, func(d telemetry.SandboxDone) {
				outcome := "ok"
				if d.Err != nil {
					outcome = "error"
				}
				m.sandboxStarts.WithLabelValues(outcome).Inc()
				if d.Err == nil {
					for _, p := range d.Phases {
						m.sandboxStartSec.WithLabelValues(p.Name).Observe(p.Duration.Seconds())
					}
					m.sandboxStartSec.WithLabelValues("total").Observe(time.Since(t0).Seconds())
				}
			}
		},
		Exec: func(ctx context.Context, _ telemetry.ExecStart) (context.Context, func(telemetry.ExecDone)) {
			t0 := time.Now()
			return ctx, func(d telemetry.ExecDone) {
				outcome := "ok"
				switch {
				case d.Err != nil:
					outcome = "error"
				case d.ExitCode != 0:
					outcome = "exit"
				}
				m.execs.WithLabelValues(outcome).Inc()
				m.execSec.Observe(time.Since(t0).Seconds())
				m.execQueueSec.Observe(d.QueueWait.Seconds())
			}
		},
		Turn: func(ctx context.Context, t telemetry.TurnStart) (context.Context, func(telemetry.TurnDone)) {
			t0 := time.Now()
			return ctx, func(d telemetry.TurnDone) {
				m.turns.WithLabelValues(t.Driver, d.Outcome).Inc()
				m.turnSec.WithLabelValues(t.Driver).Observe(time.Since(t0).Seconds())
			}
		},
		ModelRequest: func(_ context.Context, r telemetry.ModelRequest) {
			model := m.prices.Name(r.Model)
			if model == "" {
				model = "other"
			}
			status := "none" // no answer (the client left, the upstream failed)
			if r.Status >= 100 && r.Status < 600 {
				status = strconv.Itoa(r.Status/100) + "xx"
			}
			if r.Refused {
				status = "refused"
				m.budgetRefusals.WithLabelValues(r.Driver, tenant).Inc()
			}
			m.modelRequests.WithLabelValues(r.Driver, model, tenant, status).Inc()
			m.modelSec.WithLabelValues(r.Driver).Observe(r.Duration.Seconds())
			if u := r.Usage; u != nil {
				for _, k := range [...]struct {
					kind string
					n    int64
				}{{"input", u.InputTokens}, {"output", u.OutputTokens}, {"cache_read", u.CacheReadTokens}, {"cache_write", u.CacheWriteTokens}} {
					if k.n > 0 {
						m.modelTokens.WithLabelValues(r.Driver, model, tenant, k.kind).Add(float64(k.n))
					}
				}
			}
		},
		Download: func(ctx context.Context, _ telemetry.DownloadStart) (context.Context, func(telemetry.DownloadDone)) {
			return ctx, func(d telemetry.DownloadDone) {
				if d.Err != nil {
					m.downloads.WithLabelValues("error").Inc()
					return
				}
				m.downloads.WithLabelValues("ok").Inc()
				m.downloadBytes.Add(float64(d.Bytes))
			}
		},
		Pool: func(e telemetry.PoolEvent) {
			switch e.Kind {
			case "ready":
				m.poolReady.WithLabelValues(e.Driver).Inc()
			case "hit":
				m.poolReady.WithLabelValues(e.Driver).Dec()
				m.poolTakes.WithLabelValues(e.Driver, "hit").Inc()
			case "miss":
				m.poolTakes.WithLabelValues(e.Driver, "miss").Inc()
			case "retired":
				m.poolReady.WithLabelValues(e.Driver).Dec()
				m.poolRetired.WithLabelValues(e.Driver).Inc()
			case "failed":
				m.poolFailures.WithLabelValues(e.Driver).Inc()
			}
		},
		Egress: func(e telemetry.EgressDecision) {
			d := "denied"
			if e.Allowed {
				d = "allowed"
			}
			m.egress.WithLabelValues(d).Inc()
		},
	}
}
