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
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-agent/sandbox-agent/internal/bounded"
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

// cliServer is one running long-lived CLI process.
type cliServer struct {
	session, model string // what it serves ("" session: a new one, until named)
	used           bool   // it ran a turn

	stdin  *io.PipeWriter
	cancel context.CancelFunc
	exited chan struct{} // closed when the exec returned
	res    ExecResult    // valid after exited
	err    error

	mu     sync.Mutex
	active bool // a turn reads lines
	lines  chan serverLine
	queued atomic.Int64   // bytes of the lines in lines (maxQueuedBytes)
	stderr bounded.Buffer // this turn's stderr
}

type serverLine struct {
	raw []byte
	cut bool
}

// startServer starts the long-lived CLI for t.
func (a *Agent) startServer(ll LongLived, t Turn) (*cliServer, error) {
	inv, err := ll.ServeCommand(t)
	if err != nil {
		return nil, fmt.Errorf("%s: build long-lived command: %w", a.drv.Name(), err)
	}
	pr, pw := io.Pipe()
	s := &cliServer{
		session: t.SessionID, model: t.Model, stdin: pw,
		exited: make(chan struct{}), lines: make(chan serverLine, 256),
		stderr: bounded.Buffer{Max: maxStderrBytes},
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	out := &bounded.Lines{Max: maxLineBytes, Fn: s.deliver}
	go func() {
		defer close(s.exited)
		res, err := a.sb.Run(ctx, ExecRequest{
			Cmd: inv.Cmd, Env: inv.Env, WorkDir: inv.WorkDir, Stdin: pr,
			Stdout: out, Stderr: &lockedWriter{mu: &s.mu, w: &s.stderr},
			// It lives as long as the agent; a hung turn is bounded by
			// timeout_ask, not by this exec.
			Timeout: 100 * 365 * 24 * time.Hour, MaxOutputBytes: 64 << 10,
		})
		out.Flush()
		_ = pr.Close()
		s.res, s.err = res, err
	}()
	return s, nil
}

// maxQueuedBytes bounds the stdout lines waiting for the turn to read
// them (each may be up to maxLineBytes): past it the CLI's output waits.
const maxQueuedBytes = 16 << 20

// deliver hands a stdout line to the running turn; lines between turns
// are dropped (the CLI has nothing to say then).
func (s *cliServer) deliver(raw []byte, cut bool) {
	var l serverLine
	for {
		s.mu.Lock()
		active := s.active
		s.mu.Unlock()
		if !active {
			return
		}
		if s.queued.Load()+int64(len(raw)) > maxQueuedBytes && len(s.lines) > 0 {
			time.Sleep(10 * time.Millisecond) // the turn reads, or ends
			continue
		}
		if l.raw == nil {
			l = serverLine{raw: append(make([]byte, 0, len(raw)), raw...), cut: cut}
		}
		s.queued.Add(int64(len(l.raw)))
		select {
		case s.lines <- l:
			return
		case <-time.After(100 * time.Millisecond): // the turn may have ended meanwhile
			s.queued.Add(-int64(len(l.raw)))
		}
	}
}

// next takes a line the turn reads off the queue's byte count.
func (s *cliServer) next(l serverLine) serverLine {
	s.queued.Add(-int64(len(l.raw)))
	return l
}

// drain drops lines an earlier turn left unread: they are not this turn's.
func (s *cliServer) drain() {
	for {
		select {
		case l := <-s.lines:
			s.next(l)
		default:
			return
		}
	}
}

func (s *cliServer) alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// stop ends the process: stdin closed (a CLI that exits on EOF exits),
// then its process tree killed, and waits for the exec to return.
func (s *cliServer) stop() {
	_ = s.stdin.Close()
	s.cancel()
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
	}
}

// closeForRemoval closes stdin only: the sandbox is being removed, which
// ends the exec without a kill of its own.
func (s *cliServer) closeForRemoval() {
	_ = s.stdin.Close()
	go func() {
		select {
		case <-s.exited:
		case <-time.After(time.Minute):
		}
		s.cancel()
	}()
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
	if s != nil && (!s.alive() || s.model != t.spec.Model || (s.session != t.spec.SessionID && (s.used || s.session != ""))) {
		s.stop()
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
	s.used = true
	s.drain()
	s.mu.Lock()
	s.active = true
	s.stderr.Reset()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.active = false
		s.mu.Unlock()
	}()
	written := make(chan error, 1)
	go func() { _, err := s.stdin.Write(input); written <- err }()

	result := func(code int) ExecResult {
		s.mu.Lock()
		defer s.mu.Unlock()
		return ExecResult{ExitCode: code, Stderr: append([]byte(nil), s.stderr.Bytes()...), Duration: time.Since(start)}
	}
	// A turn that ends after an abort was interrupted: the caller's ctx
	// decides the error, as for a killed per-turn CLI.
	var abortBy <-chan time.Time
	ended := func() ExecResult {
		if abortBy == nil {
			return result(0)
		}
		res := result(ExitCodeTimeout)
		res.TimedOut = true
		return res
	}
	// kill cuts the turn by killing the process (the next turn starts
	// another); the caller's ctx or the timeout decides the error.
	kill := func() ExecResult {
		s.stop()
		a.srv.Store(nil)
		res := result(ExitCodeTimeout)
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
		case l := <-s.lines:
			l = s.next(l)
			lines++
			settle = nil
			t.line(l.raw, l.cut)
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
			if err != nil && s.alive() {
				s.stop()
				a.srv.Store(nil)
				return result(-1), reused && lines == 0, fmt.Errorf("%w: writing the turn: %w", ErrCLIExited, err)
			}
		case <-s.exited:
			for drained := false; !drained; { // what it printed before it died
				select {
				case l := <-s.lines:
					l = s.next(l)
					lines++
					t.line(l.raw, l.cut)
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
			res := result(s.res.ExitCode)
			if s.err != nil {
				// The exec failed, not the CLI: the container died, the
				// engine went away, a limit was hit — as for a per-turn
				// CLI's exec.
				return res, false, fmt.Errorf("its long-lived process: %w", s.err)
			}
			return res, reused && lines == 0, fmt.Errorf("%w (exit code %d)", ErrCLIExited, s.res.ExitCode)
		case <-aborting:
			aborting = nil
			if in := ll.AbortInput(); len(in) > 0 {
				go func() { _, _ = s.stdin.Write(in) }()
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

// lockedWriter serialises writes to w under mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
