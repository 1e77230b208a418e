package sandboxagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/sandbox-agent/sandbox-agent/internal/guest"
	"github.com/sandbox-agent/sandbox-agent/telemetry"
)

// attacher is a Runtime that can run a created container's main process
// with its output attached (runtime/docker's Attach): RunOnce's way. wait
// gives the exit code and whether the OOM killer struck; RecordsOOMKills
// says whether the engine tells that, the one limit RunOnce can report
// once the container (and its cgroup) is gone.
type attacher interface {
	Attach(ctx context.Context, id string, stdout, stderr io.Writer) (wait func() (code int, oomKilled bool, err error), err error)
	RecordsOOMKills(ctx context.Context) bool
}

// ErrLeftBehind: RunOnce's command ran (its result is whole) but its
// sandbox could not be removed; gc removes it.
var ErrLeftBehind = errors.New("sandbox left behind")

// CanRunOnce says whether RunOnce can run a command with opts on rt: the
// runtime attaches to a container's main process and records OOM kills,
// the sandbox needs no host proxy (an allow-list's egress proxy is
// reached through an exec, which a one-shot container has no time for),
// and it has an init (the lifetime's watchdog cannot kill pid 1).
func CanRunOnce(ctx context.Context, rt Runtime, opts SandboxOptions) bool {
	if opts.NoInit {
		return false
	}
	if at, ok := rt.(attacher); !ok || !at.RecordsOOMKills(ctx) {
		return false
	}
	opts = opts.withConfigDefaults(opts.Config)
	return len(opts.AllowHosts) == 0 && len(opts.services) == 0
}

// RunOnce runs one command in a throw-away sandbox of its own, as the
// container's main process (under its init, bounded by the sandbox's
// lifetime even if the host dies), and removes the sandbox: one
// engine round trip fewer than NewSandbox then Run, what `sandbox-agent
// exec` does when it copies nothing in or out. The sandbox is made and
// checked as NewSandbox's (hardening, limits, labels for gc); the result
// is Run's (the timeout, or ctx, kills the command: its whole container,
// at once, with no SIGTERM first), and so are the errors, except that
// only an OOM kill is told apart (a *ResourceError from the engine's
// event): the pids counters and the disk's size go with the container,
// which the engine removes as the command exits (nothing is left behind
// by a host that dies). A command that is not found exits 127, as in a
// shell. req.Stdin must be nil. A runtime or options RunOnce cannot serve
// (CanRunOnce false) give ErrUnsupportedByRuntime before anything is
// made; a sandbox that could not be removed after the command ran, an
// error wrapping ErrLeftBehind beside the whole result.
func RunOnce(ctx context.Context, rt Runtime, opts SandboxOptions, req ExecRequest) (res ExecResult, err error) {
	if rt == nil {
		return ExecResult{}, fmt.Errorf("%w: nil Runtime", ErrInvalidArgument)
	}
	if opts.Image == "" {
		return ExecResult{}, fmt.Errorf("%w: no image given", ErrInvalidArgument)
	}
	if len(req.Cmd) == 0 {
		return ExecResult{}, fmt.Errorf("%w: empty command", ErrInvalidArgument)
	}
	if req.Stdin != nil {
		return ExecResult{}, fmt.Errorf("%w: a one-shot command has no stdin", ErrInvalidArgument)
	}
	at, ok := rt.(attacher)
	if !ok || !CanRunOnce(ctx, rt, opts) {
		return ExecResult{}, fmt.Errorf("run once: %w: the runtime cannot attach to a container or tell an OOM kill, or the sandbox needs a host proxy", ErrUnsupportedByRuntime)
	}
	if err := checkEnvNames(req.Env); err != nil {
		return ExecResult{}, err
	}
	cfg := opts.Config.withDefaults()
	opts = opts.withConfigDefaults(cfg)
	if _, err := ParseEgress(string(opts.Egress)); err != nil {
		return ExecResult{}, err
	}
	ctx, hookDone := opts.Hooks.StartExec(ctx)
	defer func() { hookDone(telemetry.ExecDone{ExitCode: res.ExitCode, Err: err}) }()

	startCtx, cancel := context.WithTimeout(ctx, cfg.Timeouts.Start)
	defer cancel()
	spec, err := sandboxSpec(startCtx, rt, opts, cfg)
	if err != nil {
		return ExecResult{}, err
	}
	// The command is the container's (under the lifetime's watchdog):
	// its user, folder and environment.
	life, _ := strconv.ParseInt(spec.Labels[LabelMaxLifetime], 10, 64)
	spec.Cmd = guest.OnceCmd(life, req.Cmd)
	if req.User != "" {
		spec.User = req.User
	}
	if req.WorkDir != "" {
		spec.WorkDir = req.WorkDir
	}
	for k, v := range req.Env {
		spec.Env = append(spec.Env, k+"="+v)
	}
	id, startCtx, cancelRetry, err := createContainer(startCtx, ctx, rt, spec, opts.Images, cfg.Timeouts.Start)
	defer cancelRetry()
	if err != nil {
		return ExecResult{}, err
	}
	s := newSandbox(rt, id, spec, opts, cfg, nil)
	defer func() {
		if cerr := s.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("%w: %w", ErrLeftBehind, cerr)
		}
	}()
	out := newOutput(req, cfg)
	// As in Run, the wait is detached from ctx: on timeout the command
	// is killed first and its last output collected after.
	waitCtx, detach := context.WithCancel(context.WithoutCancel(ctx))
	defer detach()
	// The attach starts nothing: it goes beside the hardening check,
	// which must pass before the start.
	type attached struct {
		wait func() (int, bool, error)
		err  error
	}
	attachC := make(chan attached, 1)
	go func() {
		wait, err := at.Attach(waitCtx, id, out.stdoutTee(), out.stderrTee())
		attachC <- attached{wait, err}
	}()
	st, err := rt.Inspect(startCtx, id)
	var a attached
	select {
	case a = <-attachC:
	case <-startCtx.Done(): // an engine that never answers the attach
		a.err = fmt.Errorf("attach container: %w", startCtx.Err())
	}
	if err != nil {
		return ExecResult{}, startErr(startCtx, err)
	}
	if err := errors.Join(checkHardening(spec, st), checkLogs(st)); err != nil {
		return ExecResult{}, err
	}
	if a.err != nil {
		return ExecResult{}, startErr(startCtx, a.err)
	}
	wait := a.wait
	type outcome struct {
		code int
		oom  bool
		err  error
	}
	done := make(chan outcome, 1)
	go func() {
		code, oom, err := wait()
		done <- outcome{code, oom, err}
	}()
	if err := ctx.Err(); err != nil {
		return ExecResult{}, err // nothing ran
	}
	// The start is not cut by ctx: the command may print (and ctx be
	// cancelled on it) before the engine answers the start; a cancel
	// from here on kills the running command, as below.
	runCtx, cancelRun := context.WithTimeout(context.WithoutCancel(ctx), cfg.Timeouts.Start)
	defer cancelRun()
	out.start = time.Now()
	if err := rt.Start(runCtx, id); err != nil {
		return ExecResult{}, startErr(runCtx, err)
	}
	result := out.result

	timer := time.NewTimer(req.timeout(cfg))
	defer timer.Stop()
	var cause error
	select {
	case o := <-done:
		if o.err != nil {
			return result(-1), fmt.Errorf("exec %q: %w", req.Cmd[0], o.err)
		}
		res := result(o.code)
		if o.oom {
			return res, &ResourceError{Resource: resourceMemory, Limit: spec.MemoryBytes, Events: 1, Cmd: req.Cmd[0]}
		}
		return res, nil
	case <-timer.C:
	case <-ctx.Done():
		cause = ctx.Err()
	}
	// The container is the command's whole tree: killing its init ends
	// every process in it.
	kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer kcancel()
	killErr := rt.Kill(kctx, id)
	awaitKilled(done, detach)
	res = result(exitCodeTimeout)
	res.TimedOut = true
	if killErr != nil {
		killErr = fmt.Errorf("exec %q timed out and its container could not be killed: %w", req.Cmd[0], killErr)
		if cause != nil {
			killErr = fmt.Errorf("%w; %w", cause, killErr)
		}
		return res, killErr
	}
	return res, cause
}
