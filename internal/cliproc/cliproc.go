// Package cliproc is one long-lived agent CLI process, held through one
// exec that stays open: its stdin, its stdout lines queued for the turn
// that reads them (dropped between turns), its stderr, its end. The
// turn loop that reads it (the end of a turn, the forgery rules) is the
// root package's.
package cliproc

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-agent/sandbox-agent/internal/bounded"
)

// Run is the exec: it runs the process wired to stdin, stdout (split
// into lines by the caller's writer) and stderr until it exits or ctx
// ends, and returns its exit code or why the exec failed.
type Run func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (int, error)

// Line is one stdout line; Cut: it was longer than the bound and cut.
type Line struct {
	Raw []byte
	Cut bool
}

// maxQueuedBytes bounds the stdout lines waiting for the turn to read
// them (each may be up to the line bound): past it the CLI's output waits.
const maxQueuedBytes = 16 << 20

// Proc is one running process.
type Proc struct {
	Session, Model string // what it serves ("" session: a new one, until named)

	stdin  *io.PipeWriter
	cancel context.CancelFunc
	exited chan struct{} // closed when the exec returned
	code   int           // valid after exited
	err    error

	mu     sync.Mutex
	active bool // a turn reads lines
	lines  chan Line
	queued atomic.Int64   // bytes of the lines in lines (maxQueuedBytes)
	stderr bounded.Buffer // this turn's stderr
}

// Start starts the process serving session and model with run; stdout
// lines are cut at maxLine bytes, stderr kept up to maxStderr per turn.
func Start(session, model string, maxLine int, maxStderr int64, run Run) *Proc {
	pr, pw := io.Pipe()
	p := &Proc{
		Session: session, Model: model, stdin: pw,
		exited: make(chan struct{}), lines: make(chan Line, 256),
		stderr: bounded.Buffer{Max: maxStderr},
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	out := &bounded.Lines{Max: maxLine, Fn: p.deliver}
	go func() {
		defer close(p.exited)
		code, err := run(ctx, pr, out, &lockedWriter{mu: &p.mu, w: &p.stderr})
		out.Flush()
		_ = pr.Close()
		p.code, p.err = code, err
	}()
	return p
}

// deliver hands a stdout line to the running turn; lines between turns
// are dropped (the CLI has nothing to say then).
func (p *Proc) deliver(raw []byte, cut bool) {
	var l Line
	for {
		p.mu.Lock()
		active := p.active
		p.mu.Unlock()
		if !active {
			return
		}
		if p.queued.Load()+int64(len(raw)) > maxQueuedBytes && len(p.lines) > 0 {
			time.Sleep(10 * time.Millisecond) // the turn reads, or ends
			continue
		}
		if l.Raw == nil {
			l = Line{Raw: append(make([]byte, 0, len(raw)), raw...), Cut: cut}
		}
		p.queued.Add(int64(len(l.Raw)))
		select {
		case p.lines <- l:
			return
		case <-time.After(100 * time.Millisecond): // the turn may have ended meanwhile
			p.queued.Add(-int64(len(l.Raw)))
		}
	}
}

// Lines are the stdout lines of the running turn; pass each to Next.
func (p *Proc) Lines() <-chan Line { return p.lines }

// Next takes a line the turn reads off the queue's byte count.
func (p *Proc) Next(l Line) Line {
	p.queued.Add(-int64(len(l.Raw)))
	return l
}

// Begin starts a turn: lines an earlier turn left unread are dropped,
// stderr starts afresh, and lines are queued until End.
func (p *Proc) Begin() {
	for drained := false; !drained; {
		select {
		case l := <-p.lines:
			p.Next(l)
		default:
			drained = true
		}
	}
	p.mu.Lock()
	p.active = true
	p.stderr.Reset()
	p.mu.Unlock()
}

// End ends the turn: later lines are dropped.
func (p *Proc) End() {
	p.mu.Lock()
	p.active = false
	p.mu.Unlock()
}

// Stderr is a copy of the turn's stderr so far.
func (p *Proc) Stderr() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]byte(nil), p.stderr.Bytes()...)
}

// Write writes to the process's stdin (it may block until read).
func (p *Proc) Write(b []byte) error {
	_, err := p.stdin.Write(b)
	return err
}

// Exited is closed when the exec returned; Result is then valid.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Result is the exit code, or why the exec failed (the container died,
// the engine went away, a limit was hit), once Exited is closed.
func (p *Proc) Result() (int, error) { return p.code, p.err }

// Alive reports whether the exec still runs.
func (p *Proc) Alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Stop ends the process: stdin closed (a CLI that exits on EOF exits),
// then its exec's context cancelled (its process tree killed), and waits
// for the exec to return (30 s at most).
func (p *Proc) Stop() {
	_ = p.stdin.Close()
	p.cancel()
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
	}
}

// CloseForRemoval closes stdin only: the sandbox is being removed, which
// ends the exec without a kill of its own (cancelled after a minute).
func (p *Proc) CloseForRemoval() {
	_ = p.stdin.Close()
	go func() {
		select {
		case <-p.exited:
		case <-time.After(time.Minute):
		}
		p.cancel()
	}()
}

// lockedWriter serialises writes to w under mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
