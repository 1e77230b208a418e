// Package tracing turns sandbox-agent's telemetry hooks into OpenTelemetry
// spans: an agent's start (a child span per phase), each turn, each
// command in a sandbox (under the turn that ran it), each download and each request
// through the model proxy (under its turn, with its own start and end).
// FromEnv sets up the OTLP/HTTP exporter from the standard
// OTEL_EXPORTER_OTLP_* variables; without them tracing is off.
package tracing

import (
	"context"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandbox-agent/sandbox-agent/telemetry"
)

// Span names.
const (
	SpanStart        = "sandbox_agent.agent.start"
	SpanTurn         = "sandbox_agent.turn"
	SpanExec         = "sandbox_agent.exec"
	SpanDownload     = "sandbox_agent.download"
	SpanModelRequest = "sandbox_agent.model_request"
)

// Hooks make spans of tracer; tenant, when not "", is an attribute of
// each.
func Hooks(tracer trace.Tracer, tenant string) telemetry.Hooks {
	common := []attribute.KeyValue{}
	if tenant != "" {
		common = append(common, attribute.String("sandbox_agent.tenant", tenant))
	}
	// An error's text can quote what the sandbox printed (or a secret
	// it holds): a span gets the failure, not the words.
	fail := func(span trace.Span, err error) {
		if err != nil {
			span.SetStatus(codes.Error, "failed")
		}
	}
	return telemetry.Hooks{
		SandboxStart: func(ctx context.Context, s telemetry.SandboxStart) (context.Context, func(telemetry.SandboxDone)) {
			t0 := time.Now()
			ctx, span := tracer.Start(ctx, SpanStart, trace.WithAttributes(append(common, attribute.String("sandbox_agent.image", s.Image))...))
			return ctx, func(d telemetry.SandboxDone) {
				at := t0
				for _, p := range d.Phases {
					_, ps := tracer.Start(ctx, SpanStart+"."+p.Name, trace.WithTimestamp(at), trace.WithAttributes(common...))
					at = at.Add(p.Duration)
					ps.End(trace.WithTimestamp(at))
				}
				fail(span, d.Err)
				span.End()
			}
		},
		Turn: func(ctx context.Context, t telemetry.TurnStart) (context.Context, func(telemetry.TurnDone)) {
			ctx, span := tracer.Start(ctx, SpanTurn, trace.WithAttributes(append(common,
				attribute.String("sandbox_agent.driver", t.Driver), attribute.String("sandbox_agent.model", t.Model))...))
			return ctx, func(d telemetry.TurnDone) {
				span.SetAttributes(attribute.String("sandbox_agent.outcome", d.Outcome))
				if d.Err != nil {
					span.SetStatus(codes.Error, d.Outcome)
				}
				if u := d.Usage; u != nil {
					span.SetAttributes(attribute.Int64("sandbox_agent.input_tokens", u.Usage.InputTokens),
						attribute.Int64("sandbox_agent.output_tokens", u.Usage.OutputTokens),
						attribute.Int64("sandbox_agent.model_requests", u.Requests), attribute.Float64("sandbox_agent.cost_usd", u.CostUSD))
				}
				span.End()
			}
		},
		Exec: func(ctx context.Context, _ telemetry.ExecStart) (context.Context, func(telemetry.ExecDone)) {
			ctx, span := tracer.Start(ctx, SpanExec, trace.WithAttributes(common...))
			return ctx, func(d telemetry.ExecDone) {
				span.SetAttributes(attribute.Int("sandbox_agent.exit_code", d.ExitCode), attribute.Float64("sandbox_agent.queue_wait_seconds", d.QueueWait.Seconds()))
				fail(span, d.Err)
				span.End()
			}
		},
		Download: func(ctx context.Context, _ telemetry.DownloadStart) (context.Context, func(telemetry.DownloadDone)) {
			ctx, span := tracer.Start(ctx, SpanDownload, trace.WithAttributes(common...))
			return ctx, func(d telemetry.DownloadDone) {
				span.SetAttributes(attribute.Int("sandbox_agent.files", d.Files), attribute.Int64("sandbox_agent.bytes", d.Bytes))
				fail(span, d.Err)
				span.End()
			}
		},
		ModelRequest: func(ctx context.Context, r telemetry.ModelRequest) {
			attrs := append(common, attribute.String("sandbox_agent.driver", r.Driver), attribute.String("sandbox_agent.model", r.Model),
				attribute.Int("http.response.status_code", r.Status), attribute.Bool("sandbox_agent.budget_refused", r.Refused))
			if u := r.Usage; u != nil {
				attrs = append(attrs, attribute.Int64("sandbox_agent.input_tokens", u.InputTokens), attribute.Int64("sandbox_agent.output_tokens", u.OutputTokens),
					attribute.Int64("sandbox_agent.cache_read_tokens", u.CacheReadTokens), attribute.Int64("sandbox_agent.cache_write_tokens", u.CacheWriteTokens))
			}
			start := r.Started
			if start.IsZero() {
				start = time.Now().Add(-r.Duration)
			}
			_, span := tracer.Start(ctx, SpanModelRequest, trace.WithTimestamp(start), trace.WithAttributes(attrs...))
			if r.Status >= 500 || r.Refused {
				span.SetStatus(codes.Error, "status "+strconv.Itoa(r.Status))
			}
			span.End(trace.WithTimestamp(start.Add(r.Duration)))
		},
	}
}

// FromEnv returns a tracer provider exporting spans over OTLP/HTTP when
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
// set (the exporter reads the other OTEL_EXPORTER_OTLP_* and OTEL_BSP_*
// variables itself), else nil: tracing off. Shut it down to flush.
func FromEnv(ctx context.Context, getenv func(string) string, service, version string) (*sdktrace.TracerProvider, error) {
	// The endpoint from getenv (configuration is read once, by the
	// caller's rules); the exporter reads the rest (headers, timeout).
	url := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") // the whole URL
	if url == "" {
		if base := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); base != "" {
			url = strings.TrimSuffix(base, "/") + "/v1/traces"
		}
	}
	if url == "" {
		return nil, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(url))
	if err != nil {
		return nil, err
	}
	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(service), semconv.ServiceVersion(version))
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// Propagator is W3C trace context: a caller's traceparent continues in
// sandbox-agent's spans.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}
