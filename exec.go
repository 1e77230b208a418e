package sandboxagent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/sandbox-agent/sandbox-agent/internal/bounded"
	"github.com/sandbox-agent/sandbox-agent/internal/guest"
	"github.com/sandbox-agent/sandbox-agent/telemetry"
)

// ExecRequest is one command for Sandbox.Run.
type ExecRequest struct {
	Cmd     []string          // argv; required
	Env     map[string]string // added to the sandbox's environment
	WorkDir string            // default: the sandbox's
	User    string            // default: the sandbox's
	Stdin   io.Reader         // nil: the command reads EOF
	// Stdout and Stderr, when set, receive output as it is produced (in
	// addition to the capture in ExecResult).
	Stdout io.Writer
	Stderr io.Writer
	// Timeout; zero uses the exec timeout category (Config.Timeouts.Exec).
	Timeout time.Duration
	// MaxOutputBytes caps each captured stream; zero uses the config.
	MaxOutputBytes int64

	turn bool // an agent CLI's turn: tagged turnTagVar too
}

// ExecResult is what a command did. A non-zero exit code is not an error.
type ExecResult struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
	// TimedOut: the timeout (or the caller's context) ended the command;
	// its whole process tree was killed and ExitCode is 124.
	TimedOut bool
	// Truncated: a stream exceeded MaxOutputBytes; the rest was dropped
	// from the capture (streaming writers still saw it).
	Truncated bool
	Duration  time.Duration
	// QueueWait is the part of Duration the command waited for the
	// engine's exec admission queue (max_concurrent_execs; 0 without
	// one): under overload, latency that is queueing, not the engine.
	QueueWait time.Duration
}

// exitCodeTimeout is the exit code reported for a command that timed out,
// as coreutils timeout does (ExecResult.TimedOut says it for sure).
const exitCodeTimeout = 124

// execTagVar marks every process of one exec (the variable is inherited by
// all descendants), so a timeout can find and kill the whole tree even
// when members left the process group.
const execTagVar = "SANDBOX_AGENT_EXEC_ID"

// turnTagVar marks every process of an agent's CLI turns (its value: the
// sandbox's id), for every host process alike: one adopting the sandbox
// stops with it what the dead one left running of its turns.
const turnTagVar = "SANDBOX_AGENT_TURN"

// killGrace is how long a timed-out command gets between SIGTERM and
// SIGKILL.
const killGrace = time.Second

func newTag() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Run runs a command; it is the primitive drivers use. On timeout (or when ctx is done) the command's whole
// process tree is killed and the result has ExitCode 124, TimedOut and the
// output produced so far; the sandbox stays usable. A timeout returns a nil
// error; a cancelled ctx returns the result and ctx.Err().
//
// A command that was killed by a signal, timed out or reported a failed
// fork has the sandbox's cgroup counters read (one more exec): if the OOM
// killer struck or the pids limit refused forks meanwhile, the error is a
// *ResourceError (errors.Is ErrOutOfMemory / ErrPidsLimit) and, for the
// pids limit, the exec owning the most processes (the bomb) is killed. A
// command whose container died under it returns an error wrapping
// ErrContainerNotFound.
func (s *Sandbox) Run(ctx context.Context, req ExecRequest) (res ExecResult, err error) {
	if s.isClosed() {
		return ExecResult{}, ErrClosed
	}
	if len(req.Cmd) == 0 {
		return ExecResult{}, fmt.Errorf("%w: empty command", ErrInvalidArgument)
	}
	ctx, hookDone := s.hooks.StartExec(ctx)
	ctx, queueWait := WithExecQueueWait(ctx)
	defer func() {
		res.QueueWait = queueWait()
		hookDone(telemetry.ExecDone{ExitCode: res.ExitCode, Err: err, QueueWait: res.QueueWait})
	}()
	if err := checkEnvNames(req.Env); err != nil {
		return ExecResult{}, err
	}
	timeout := req.timeout(s.cfg)
	tag := newTag()
	env := make([]string, 0, len(req.Env)+len(s.env)+1)
	for k, v := range s.env {
		if _, ok := req.Env[k]; !ok {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	env = append(env, execTagVar+"="+tag)
	if req.turn {
		env = append(env, turnTagVar+"="+s.id)
	}
	user := req.User
	if user == "" {
		user = s.user
	}
	out := newOutput(req, s.cfg)

	// The exec itself runs detached from ctx: on timeout we must kill the
	// tree first and then collect what it printed, not just hang up.
	execCtx, detach := context.WithCancel(context.WithoutCancel(ctx))
	defer detach()
	type outcome struct {
		code int
		err  error
	}
	done := make(chan outcome, 1)
	out.start = time.Now()
	go func() {
		code, err := s.rt.Exec(execCtx, s.id, RuntimeExec{
			Cmd: req.Cmd, Env: env, User: user, WorkDir: req.WorkDir, Stdin: req.Stdin,
			Stdout: out.stdoutTee(), Stderr: out.stderrTee(),
		})
		done <- outcome{code, err}
	}()
	result := out.result

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var cause error
	select {
	case o := <-done:
		if o.err != nil {
			return result(-1), fmt.Errorf("exec %q: %w", req.Cmd[0], o.err)
		}
		res := result(o.code)
		if suspectLimits(res) {
			if err := s.checkLimits(req.Cmd[0], user, true); err != nil {
				return res, err // an OOM kill explains the words "no space" too
			}
		}
		return res, s.checkDisk(ctx, req.Cmd[0], res)
	case <-timer.C:
	case <-ctx.Done():
		cause = ctx.Err()
	}

	killErr := s.killTree(tag, user, false)
	bombTried := false // killBomb ran and failed: checkLimits need not try again
	if killErr != nil {
		// The script itself needs forks; a tree that exhausted the pids
		// limit leaves it none. Kill the bomb, then the rest of the tree.
		// killBomb leaves a tree that no longer holds the limit (the
		// script's first rounds may have thinned it): then there are
		// pids to fork with again, and the script gets its second try
		// all the same.
		if _, err := s.killBomb(user); err == nil {
			killErr = s.killTree(tag, user, true)
		} else {
			bombTried = true
		}
	}
	awaitKilled(done, detach)
	res = result(exitCodeTimeout)
	res.TimedOut = true
	if killErr != nil {
		killErr = fmt.Errorf("exec %q timed out and its processes could not all be killed: %w", req.Cmd[0], killErr)
		if cause != nil {
			killErr = fmt.Errorf("%w; %w", cause, killErr)
		}
		// Survivors that exhaust the pids limit are why the kill failed:
		// report the limit too, so callers branching on it see it.
		if rerr := s.checkLimits(req.Cmd[0], user, !bombTried); rerr != nil {
			return res, fmt.Errorf("%w; %w", rerr, killErr)
		}
		return res, killErr
	}
	if rerr := s.checkLimits(req.Cmd[0], user, true); rerr != nil {
		if cause != nil {
			return res, fmt.Errorf("%w; %w", cause, rerr)
		}
		return res, rerr
	}
	return res, cause
}

// killTree kills every process of one exec, as the same user (reading
// another user's /proc/PID/environ needs privileges the sandbox lacks).
// patient tries again, for up to 30 s, while the engine cannot start the
// script at all (exit 126: runc found no pid for its setns child) or the
// script cannot fork to list the processes (exit 2): after a fork bomb is
// killed, its processes hold the limit until reaped.
func (s *Sandbox) killTree(tag, user string, patient bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		var out bytes.Buffer
		code, err := s.rt.Exec(ctx, s.id, RuntimeExec{
			Cmd:    []string{"/bin/sh", "-c", guest.ExecKill, "sandbox-agent-kill", tag, killGraceTicks(), execTagVar},
			User:   user,
			Stdout: &out, Stderr: &out,
		})
		switch {
		case err != nil:
			return err
		case code == 0:
			return nil
		case (code != 126 && code != killNoFork) || !patient:
			return fmt.Errorf("kill script exited %d: %s", code, bytes.TrimSpace(out.Bytes()))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kill script failed until the end (exit %d: %s): %w", code, bytes.TrimSpace(out.Bytes()), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// killNoFork is ExecKill's exit code when it cannot fork to list the
// processes.
const killNoFork = 2

// killGraceTicks is ExecKill's grace argument: killGrace in 10 ms ticks.
func killGraceTicks() string { return strconv.Itoa(int(killGrace / (10 * time.Millisecond))) }

// Exec runs argv with the defaults of Run (exec timeout category, output
// captured).
func (s *Sandbox) Exec(ctx context.Context, argv []string) (ExecResult, error) {
	return s.Run(ctx, ExecRequest{Cmd: argv})
}

// checkEnvNames refuses names a command's environment cannot take, and
// the tags of ours a command must not set.
func checkEnvNames(env map[string]string) error {
	for k := range env {
		if k == "" || k == execTagVar || k == turnTagVar || bytes.ContainsAny([]byte(k), "=\x00") {
			return fmt.Errorf("%w: environment variable name %q", ErrInvalidArgument, k)
		}
	}
	return nil
}

// timeout is the request's, else the exec timeout category's.
func (req ExecRequest) timeout(cfg Config) time.Duration {
	if req.Timeout > 0 {
		return req.Timeout
	}
	return cfg.Timeouts.Exec
}

// output is one command's captured stdout and stderr, each bounded
// (MaxOutputBytes), beside the request's live writers, and its result.
type output struct {
	req            ExecRequest
	stdout, stderr bounded.Buffer
	start          time.Time
}

func newOutput(req ExecRequest, cfg Config) *output {
	limit := req.MaxOutputBytes
	if limit <= 0 {
		limit = cfg.MaxOutputBytes
	}
	return &output{req: req, stdout: bounded.Buffer{Max: limit}, stderr: bounded.Buffer{Max: limit}}
}

func (o *output) stdoutTee() io.Writer { return &bounded.Tee{Capture: &o.stdout, Live: o.req.Stdout} }
func (o *output) stderrTee() io.Writer { return &bounded.Tee{Capture: &o.stderr, Live: o.req.Stderr} }

// result is the command's result with exit code, as captured so far.
func (o *output) result(code int) ExecResult {
	return ExecResult{
		ExitCode: code, Stdout: o.stdout.Bytes(), Stderr: o.stderr.Bytes(),
		Truncated: o.stdout.Truncated() || o.stderr.Truncated(), Duration: time.Since(o.start),
	}
}

// awaitKilled waits for a killed command's end (done): its stream ends
// once every holder of its pipes is dead; it gets a moment to deliver the
// last output, then detach hangs up regardless.
func awaitKilled[T any](done <-chan T, detach func()) {
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		detach()
		<-done
	}
}
