// Package telemetry is how sandbox-agent reports what it measures: Hooks,
// a struct of optional funcs in the manner of net/http/httptrace, given
// to an agent (sandboxagent.WithHooks) or a sandbox (SandboxOptions.Hooks).
// Package telemetry/prom turns them into Prometheus metrics; a Go user
// may export them to anything else. A hook runs on the path it measures:
// it must be quick and safe for concurrent use.
package telemetry

import (
	"context"
	"time"

	"github.com/sandbox-agent/sandbox-agent/metering"
)

// Hooks are called as agents' sandboxes start, commands run, turns
// run, and the model and egress proxies decide. Nil funcs are skipped. A
// Start-style hook returns the context the measured work runs under (for
// a trace's spans) and a func called once when it ends (nil: none).
type Hooks struct {
	SandboxStart func(ctx context.Context, s SandboxStart) (context.Context, func(SandboxDone))
	Exec         func(ctx context.Context, e ExecStart) (context.Context, func(ExecDone))
	Turn         func(ctx context.Context, t TurnStart) (context.Context, func(TurnDone))
	// Download is called around a copy of a sandbox's files to the host.
	Download func(ctx context.Context, d DownloadStart) (context.Context, func(DownloadDone))
	// ModelRequest is called when a request through the model proxy
	// ended; ctx is the turn's when one was running.
	ModelRequest func(ctx context.Context, r ModelRequest)
	// Egress is called for each decision of the egress proxy.
	Egress func(e EgressDecision)
	// Pool is called as a pool (package pool) of agents with these
	// hooks changes: see PoolEvent.
	Pool func(e PoolEvent)
}

// SandboxStart: an agent's sandbox is being made from Image.
type SandboxStart struct {
	Image string
}

// SandboxDone: the agent's sandbox is up (Err nil) or could not start.
// Phases are the parts of the start that were timed ("sandbox": the
// engine made and started it and it was checked, its proxies up;
// "setup": the driver's setup).
type SandboxDone struct {
	Phases []Phase
	Err    error
}

// Phase is a timed part of a start.
type Phase struct {
	Name     string
	Duration time.Duration
}

// ExecStart: a command is about to run in a sandbox.
type ExecStart struct{}

// ExecDone: the command ended (ExitCode) or could not run (Err).
// QueueWait is the part of its time it waited for the engine's exec
// admission queue (runtime/execlimit; 0 without one).
type ExecDone struct {
	ExitCode  int
	Err       error
	QueueWait time.Duration
}

// DownloadStart: a sandbox's files are being copied to the host.
type DownloadStart struct{}

// DownloadDone: the copy ended; Files and Bytes are what it extracted
// (on the host only when Err is nil: a failed download leaves nothing).
type DownloadDone struct {
	Files int
	Bytes int64
	Err   error
}

// PoolEvent is one change of a pool of agents of Driver. Kind is
// "ready" (an agent started in the background is ready), "hit" (a ready
// one was handed out), "miss" (Start found none ready and starts one
// itself), "retired" (a ready one was closed unused: its sandbox gone,
// idle too long, or the pool closed) or "failed" (a background start
// failed). The ready count is the ready events less the hits and
// retirements.
type PoolEvent struct {
	Driver string
	Kind   string
}

// TurnStart: an agent of Driver runs a turn.
type TurnStart struct {
	Driver string
	Model  string
}

// TurnDone: the turn ended. Outcome is "ok", or the kind of failure:
// "timeout", "budget_exceeded", "canceled" (the caller's context: an
// abort), "error".
type TurnDone struct {
	Outcome string
	Usage   *metering.Spent
	Err     error
}

// ModelRequest is one request through the model proxy.
type ModelRequest struct {
	Driver string
	Model  string // the response's model ("" when it said none)
	// Tenant is whose agent it is, when the embedder says (serve does).
	Tenant   string
	Status   int
	Usage    *metering.Usage
	Refused  bool // by a budget, never forwarded
	Started  time.Time
	Duration time.Duration
}

// EgressDecision is one decision of the egress proxy.
type EgressDecision struct {
	Allowed bool
}

// Join returns Hooks that call each of hooks' in turn (a Start-style
// hook's context passes from one to the next, and every end func runs).
func Join(hooks ...Hooks) Hooks {
	var out Hooks
	for _, h := range hooks {
		out.SandboxStart = joinStart(out.SandboxStart, h.SandboxStart)
		out.Exec = joinStart(out.Exec, h.Exec)
		out.Turn = joinStart(out.Turn, h.Turn)
		out.Download = joinStart(out.Download, h.Download)
		out.Egress = join1(out.Egress, h.Egress)
		out.Pool = join1(out.Pool, h.Pool)
		switch a, b := out.ModelRequest, h.ModelRequest; {
		case a == nil:
			out.ModelRequest = b
		case b != nil:
			out.ModelRequest = func(ctx context.Context, r ModelRequest) { a(ctx, r); b(ctx, r) }
		}
	}
	return out
}

func joinStart[S, D any](a, b func(context.Context, S) (context.Context, func(D))) func(context.Context, S) (context.Context, func(D)) {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(ctx context.Context, s S) (context.Context, func(D)) {
		ctx, endA := a(ctx, s)
		ctx, endB := b(ctx, s)
		return ctx, func(d D) {
			if endB != nil {
				endB(d)
			}
			if endA != nil {
				endA(d)
			}
		}
	}
}

func join1[T any](a, b func(T)) func(T) {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(v T) { a(v); b(v) }
}

// StartSandbox calls h.SandboxStart when set; end is never nil.
func (h Hooks) StartSandbox(ctx context.Context, s SandboxStart) (context.Context, func(SandboxDone)) {
	return start(ctx, h.SandboxStart, s)
}

// StartTurn calls h.Turn when set; end is never nil.
func (h Hooks) StartTurn(ctx context.Context, t TurnStart) (context.Context, func(TurnDone)) {
	return start(ctx, h.Turn, t)
}

// StartDownload calls h.Download when set; end is never nil.
func (h Hooks) StartDownload(ctx context.Context) (context.Context, func(DownloadDone)) {
	return start(ctx, h.Download, DownloadStart{})
}

// StartExec calls h.Exec when set; end is never nil.
func (h Hooks) StartExec(ctx context.Context) (context.Context, func(ExecDone)) {
	return start(ctx, h.Exec, ExecStart{})
}

func start[S, D any](ctx context.Context, hook func(context.Context, S) (context.Context, func(D)), s S) (context.Context, func(D)) {
	var end func(D)
	if hook != nil {
		ctx, end = hook(ctx, s)
	}
	if end == nil {
		end = func(D) {}
	}
	return ctx, end
}
