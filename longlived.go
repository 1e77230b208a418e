package sandboxagent

// Long-lived mode: one CLI process serves many turns of a session over its
// stdin and stdout, so a turn no longer pays the CLI's start-up. The
// process is one exec that stays open; its stdout lines go through the
// same parser, events and audit trail as a per-turn CLI's.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/cliproc"
)

// LongLived is a Driver whose CLI can serve many turns of one session from
// one process (its persistent mode), reading requests on stdin and
// printing JSON lines on stdout. The Parser NewParser returns for it must
// implement TurnEnder.
type LongLived interface {
	// ServeCommand is the process serving the session of t (a new session
	// when t.SessionID is empty) with t's model. The agent starts it before
	// the session's first turn and again after it exited or when the turn
	// wants another session or model.
	ServeCommand(t Turn) (Invocation, error)
	// TurnInput is what the agent writes to the process's stdin to run t.
	TurnInput(t Turn) ([]byte, error)
	// AbortInput interrupts the running turn; the process answers with the
	// turn's end and lives on.
	AbortInput() []byte
}

// TurnEnder is the Parser of a long-lived CLI: a process that lives on
// cannot say by exiting that a turn is over.
type TurnEnder interface {
	// Ended reports whether the lines parsed so far end the turn: at once,
	// or, with settle > 0, unless another line arrives within settle (a
	// CLI that may retry after an error says so only a moment later).
	Ended() (ended bool, settle time.Duration)
}

// ErrCLIExited: the CLI's long-lived process exited during a turn. The
// next turn starts it again on the same session (from the CLI's files).
var ErrCLIExited = errors.New("the agent CLI's long-lived process exited")

// abortGrace is how long an interrupted turn may take to end through the
// CLI's protocol before its process is killed.
var abortGrace = 5 * time.Second

// startServer starts the long-lived CLI for t.
func (a *Agent) startServer(ll LongLived, t Turn) (*cliproc.Proc, error) {
	inv, err := ll.ServeCommand(t)
	if err != nil {
		return nil, fmt.Errorf("%s: build long-lived command: %w", a.drv.Name(), err)
	}
	return cliproc.Start(t.SessionID, t.Model, maxLineBytes, maxStderrBytes, func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
		res, err := a.sb.Run(ctx, ExecRequest{
			Cmd: inv.Cmd, Env: inv.Env, WorkDir: inv.WorkDir, Stdin: stdin, Stdout: stdout, Stderr: stderr,
			// It lives as long as the agent; a hung turn is bounded by
			// timeout_ask, not by this exec.
			Timeout: 100 * 365 * 24 * time.Hour, MaxOutputBytes: 64 << 10, turn: true,
		})
		return res.ExitCode, err
	}), nil
}

// serveTurn runs turn t on the agent's long-lived CLI process, starting it
// when there is none for t's session and model. Its result reads as a
// per-turn exec's: ExitCode 0 when the turn ended, TimedOut when it was
// cut (timeout or ctx), an error wrapping ErrCLIExited when the process
// died.
func (a *Agent) serveTurn(ctx context.Context, ll LongLived, t *turn) (ExecResult, error) {
	res, stale, err := a.serveTurnOnce(ctx, ll, t)
	if stale {
		// The process it kept from an earlier turn had died (or was
		// dying) before it printed a line of this one: start another
		// and run the turn there, once.
		res, _, err = a.serveTurnOnce(ctx, ll, t)
	}
	return res, err
}

// serveTurnOnce is one try of serveTurn; stale reports that the turn
// found a process of an earlier turn that exited before it printed
// anything for this one.
func (a *Agent) serveTurnOnce(ctx context.Context, ll LongLived, t *turn) (_ ExecResult, stale bool, _ error) {
	start := time.Now()
	s := a.srv.Load()
	// A process serves the session it was started on (or named in a
	// turn): a warmed one, on a new session, does not serve another.
	warmStale := a.takeWarm(s)
	if s != nil && (warmStale || !s.Alive() || s.Model != t.spec.Model || s.Session != t.spec.SessionID) {
		s.Stop()
		s = nil
		a.srv.Store(nil)
	}
	reused := s != nil
	if s == nil {
		var err error
		if s, err = a.startServer(ll, t.spec); err != nil {
			return ExecResult{}, false, err
		}
		a.srv.Store(s)
	}
	input, err := ll.TurnInput(t.spec)
	if err != nil {
		return ExecResult{}, false, fmt.Errorf("%s: build turn input: %w", a.drv.Name(), err)
	}
	ender, _ := t.parser.(TurnEnder)
	if ender == nil {
		return ExecResult{}, false, fmt.Errorf("%s: %w: its long-lived parser cannot tell a turn's end", a.drv.Name(), ErrInvalidArgument)
	}
	s.Begin()
	defer s.End()
	written := make(chan error, 1)
	go func() { written <- s.Write(input) }()

	result := func(code int) ExecResult {
		return ExecResult{ExitCode: code, Stderr: s.Stderr(), Duration: time.Since(start)}
	}
	// A turn that ends after an abort was interrupted: the caller's ctx
	// decides the error, as for a killed per-turn CLI.
	var abortBy <-chan time.Time
	ended := func() ExecResult {
		if abortBy == nil {
			return result(0)
		}
		res := result(exitCodeTimeout)
		res.TimedOut = true
		return res
	}
	// kill cuts the turn by killing the process (the next turn starts
	// another); the caller's ctx or the timeout decides the error.
	kill := func() ExecResult {
		s.Stop()
		a.srv.Store(nil)
		res := result(exitCodeTimeout)
		res.TimedOut = true
		return res
	}
	timeout := time.NewTimer(a.cfg.Timeouts.Ask)
	defer timeout.Stop()
	var settle <-chan time.Time
	// An end line the model's record did not back: the turn goes on
	// until a backed end, or quiet (see unbackedQuiet).
	var quiet <-chan time.Time
	unbacked := false
	aborting := ctx.Done()
	lines := 0 // of this turn
	for {
		select {
		case l := <-s.Lines():
			l = s.Next(l)
			lines++
			settle = nil
			t.line(l.Raw, l.Cut)
			done, wait := ender.Ended()
			switch {
			case !done:
			case abortBy == nil && !t.endBacked():
				// Not the model's end (a forged line, say): read on.
				unbacked = true
				quiet = time.After(t.unbackedQuiet())
			case unbacked && abortBy == nil:
				// After a forged end, a backed one ends the turn once the
				// CLI was quiet as long (a loaded CLI may print its own
				// lines of the answer seconds apart): they belong here.
				settle = time.After(t.unbackedQuiet())
			case wait <= 0 || abortBy != nil:
				return ended(), false, nil
			default:
				settle = time.After(wait)
			}
		case <-settle:
			return ended(), false, nil
		case <-quiet:
			switch {
			case t.endBacked():
				return ended(), false, nil
			case t.rec.InFlight(), t.rec.PendingCalls() > 0:
				// A request is under way, or a tool the model asked for
				// has not answered yet: the CLI is still at work.
				quiet = time.After(t.unbackedQuiet())
			default:
				t.unbackedEnd = true
				return ended(), false, nil
			}
		case err := <-written:
			written = nil
			if err != nil && s.Alive() {
				s.Stop()
				a.srv.Store(nil)
				return result(-1), reused && lines == 0, fmt.Errorf("%w: writing the turn: %w", ErrCLIExited, err)
			}
		case <-s.Exited():
			for drained := false; !drained; { // what it printed before it died
				select {
				case l := <-s.Lines():
					l = s.Next(l)
					lines++
					t.line(l.Raw, l.Cut)
				default:
					drained = true
				}
			}
			a.srv.Store(nil)
			if done, _ := ender.Ended(); done {
				// It ended the turn, then exited (a CLI that restarts
				// itself between turns).
				return ended(), false, nil
			}
			code, xerr := s.Result()
			res := result(code)
			if xerr != nil {
				// The exec failed, not the CLI: the container died, the
				// engine went away, a limit was hit — as for a per-turn
				// CLI's exec.
				return res, false, fmt.Errorf("its long-lived process: %w", xerr)
			}
			return res, reused && lines == 0, fmt.Errorf("%w (exit code %d)", ErrCLIExited, code)
		case <-aborting:
			aborting = nil
			if in := ll.AbortInput(); len(in) > 0 {
				go func() { _ = s.Write(in) }()
				abortBy = time.After(abortGrace)
				continue
			}
			return kill(), false, nil
		case <-abortBy:
			return kill(), false, nil
		case <-timeout.C:
			return kill(), false, nil
		}
	}
}

// Warmer is a LongLived driver whose CLI can be made ready before its
// first turn (Agent.Warm): loaded, its session open and, with a warm-up
// turn, past the lazy loading a CLI does at its first prompt.
type Warmer interface {
	// WarmSteps are written one after the other to a process freshly
	// started for t (no prompt: the session and model of the next turn),
	// each once the previous one is done.
	WarmSteps(t Turn) []WarmStep
}

// WarmStep is one thing Warm writes to the CLI and the stdout line by
// which the CLI says it is done.
type WarmStep struct {
	Input []byte
	// Done recognises the line that ends the step; an error: the CLI
	// refused it (Warm fails).
	Done func(line []byte) (bool, error)
	// Turn marks the steps of the warm-up turn: a prompt whose model
	// requests the agent answers itself (a fake model answering DONE;
	// nothing reaches the model, nothing is metered or audited), and the
	// steps that leave the CLI on a new session with nothing of it in its
	// context. They run only when the agent routes the CLI through its
	// model proxy; otherwise they are left out.
	Turn bool
}

// maxWarmLines bounds what a CLI may print during one warm step.
const maxWarmLines = 10000

// Warm starts the agent's long-lived CLI ahead of its next turn, on the
// session that turn will continue (a new one before the first) and the
// agent's model, and, for a Warmer, runs its steps: the next turn then
// costs about what a follow-up turn costs. The price is the CLI's idle
// memory (BENCHMARKS.md), until the agent is closed. A no-op for a
// per-turn CLI and when a process already serves that session. It waits
// for a running turn. A CLI that exits is an error matching ErrCLIExited
// (its exec failing, the exec's error), one that does not answer within
// the start timeout ErrTimeout; it is stopped and the next turn starts
// another. Files written into the sandbox after Warm (rules, skills,
// uploads) make the first turn start the CLI afresh, so that it reads
// them.
func (a *Agent) Warm(ctx context.Context) error {
	ll, ok := a.longLived()
	if !ok {
		return nil
	}
	unlock, err := a.lockTurn(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	a.mu.Lock()
	spec := Turn{Model: a.model, SessionID: a.session, WorkDir: a.sb.workdir}
	a.mu.Unlock()
	if s := a.srv.Load(); s != nil {
		if s.Alive() && s.Model == spec.Model && s.Session == spec.SessionID {
			return nil
		}
		s.Stop()
		a.srv.Store(nil)
	}
	s, err := a.startServer(ll, spec)
	if err != nil {
		return err
	}
	a.srv.Store(s)
	w, ok := a.drv.(Warmer)
	if !ok {
		return nil
	}
	steps := w.WarmSteps(spec)
	// A warm-up turn only where the agent can answer its model requests:
	// a new session's (a session to continue needs no warm-up prompt in
	// it) through the model proxy.
	local := a.modelSvc != nil && spec.SessionID == ""
	var lm *localModel
	if local && slices.ContainsFunc(steps, func(st WarmStep) bool { return st.Turn }) {
		fm, err := fakemodel.New(fakemodel.Script{ExpectKey: a.token}, fakemodel.Options{})
		if err != nil {
			return err
		}
		lm = &localModel{h: fm}
		a.modelSvc.local.Store(lm)
	}
	s.Begin()
	defer s.End()
	timeout := time.NewTimer(a.cfg.Timeouts.Start)
	defer timeout.Stop()
	for i, st := range steps {
		if st.Turn && !local {
			continue
		}
		if err := a.warmStep(ctx, s, st, timeout.C); err != nil {
			if lm != nil {
				a.modelSvc.local.CompareAndSwap(lm, nil)
			}
			s.Stop()
			a.srv.CompareAndSwap(s, nil)
			return fmt.Errorf("%s: warm the CLI (step %d): %w", a.drv.Name(), i+1, err)
		}
	}
	if lm != nil {
		// A request the warm-up turn left behind (a title, a retry)
		// must not reach the model either: the fake answers until the
		// first turn starts, or for a grace period.
		time.AfterFunc(warmGrace, func() { a.modelSvc.local.CompareAndSwap(lm, nil) })
	}
	a.warmed.Store(&warmMark{proc: s, writes: a.sb.writes.Load()})
	return nil
}

// warmGrace is how long after a warm-up turn its model requests are
// still answered by the agent, unless a turn starts first.
const warmGrace = 5 * time.Second

type warmMark struct {
	proc   *cliproc.Proc
	writes uint64
}

// takeWarm ends the warm-up's hold before a turn: the model proxy
// answers again, and a warmed process that has not seen files written
// since (rules, skills, uploads a CLI reads at its start) is reported
// stale.
func (a *Agent) takeWarm(s *cliproc.Proc) (stale bool) {
	if a.modelSvc != nil {
		a.modelSvc.local.Store(nil)
	}
	m := a.warmed.Swap(nil)
	return m != nil && m.proc == s && a.sb.writes.Load() != m.writes
}

// warmStep writes st to s and reads its lines until st is done.
func (a *Agent) warmStep(ctx context.Context, s *cliproc.Proc, st WarmStep, timeout <-chan time.Time) error {
	written := make(chan error, 1)
	go func() { written <- s.Write(st.Input) }()
	for lines := 0; ; {
		select {
		case l := <-s.Lines():
			l = s.Next(l)
			if !l.Cut {
				if done, err := st.Done(l.Raw); err != nil {
					return err
				} else if done {
					return nil
				}
			}
			if lines++; lines > maxWarmLines {
				return fmt.Errorf("%w: %d lines and no answer", ErrCLIExited, lines)
			}
		case err := <-written:
			written = nil
			if err != nil {
				return fmt.Errorf("%w: writing: %w", ErrCLIExited, err)
			}
		case <-s.Exited():
			code, xerr := s.Result()
			if xerr != nil {
				return fmt.Errorf("its long-lived process: %w", xerr)
			}
			// Quoted: the CLI's stderr is the sandbox's words.
			return fmt.Errorf("%w (exit code %d): %.300q", ErrCLIExited, code, a.redact(string(s.Stderr())))
		case <-timeout:
			return fmt.Errorf("%w: no answer within %v", ErrTimeout, a.cfg.Timeouts.Start)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// modelSwitch is the sandbox's model service: the model proxy, or while
// Warm runs a warm-up turn, a fake model of the agent's own.
type modelSwitch struct {
	proxy http.Handler
	local atomic.Pointer[localModel]
}

// localModel is the warm-up's fake model. It keeps what it is sent, so
// what a sandbox may send it is bounded: a warm-up makes a few requests
// of some hundred KiB.
type localModel struct {
	h        http.Handler
	requests atomic.Int64
}

const (
	maxLocalRequests = 32
	maxLocalBody     = 2 << 20
)

func (m *modelSwitch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if l := m.local.Load(); l != nil {
		l.serve(w, r)
		return
	}
	m.proxy.ServeHTTP(w, r)
}

func (l *localModel) serve(w http.ResponseWriter, r *http.Request) {
	if l.requests.Add(1) > maxLocalRequests {
		http.Error(w, "sandbox-agent: too many requests during the warm-up", http.StatusTooManyRequests)
		return
	}
	if r.ContentLength > maxLocalBody {
		http.Error(w, "sandbox-agent: request too large during the warm-up", http.StatusRequestEntityTooLarge)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLocalBody)
	l.h.ServeHTTP(w, r)
}
