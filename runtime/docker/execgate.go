package docker

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// ExecGate admits the engine's work of an exec (runtime/execlimit's Queue
// is one): Acquire waits for a slot and returns the func giving it back.
type ExecGate interface {
	Acquire(ctx context.Context) (release func(), err error)
}

// DefaultExecStartHold is Options.ExecStartHold's default: the longest an
// exec keeps its slot after the engine answered the attach, waiting for a
// sign that the process runs (its first output, its stream's end). With
// 50 sandboxes looping on `true` (BenchmarkExecWidth, two sweeps), holds
// of 250 ms and 1 s gave the throughput of no gate at all (0.98-1.27x),
// a hold to the stream's end (10 s) 0.86x at width 16.
const DefaultExecStartHold = 250 * time.Millisecond

// admit takes an exec slot, its wait reported to ctx's queue-wait total.
// Without a gate it returns a no-op.
func (r *Runtime) admit(ctx context.Context) (func(), error) {
	if r.execGate == nil {
		return func() {}, nil
	}
	t0 := time.Now()
	release, err := r.execGate.Acquire(ctx)
	sandboxagent.AddExecQueueWait(ctx, time.Since(t0))
	if err != nil {
		return nil, fmt.Errorf("exec: waiting for the engine's exec queue: %w", err)
	}
	return sync.OnceFunc(release), nil
}

// holdUntilStarted keeps the slot (release, idempotent) while the engine
// starts the exec's process, which it does after answering the attach:
// the slot goes back at the stream's first byte (the process runs), when
// the caller sees the stream end (it ran), or after r.startHold. Nothing is
// asked of the engine to know: an ExecInspect poll for the pid is engine
// work itself, and dockerd's exec_start event comes before the process
// starts (it is logged as the start request arrives), so it says no more
// than the attach answer. It returns the stream to read and the func that
// stops the timer.
func (r *Runtime) holdUntilStarted(src io.Reader, release func()) (io.Reader, func()) {
	if r.execGate == nil {
		return src, func() {}
	}
	if r.startHold < 0 {
		release()
		return src, func() {}
	}
	t := time.AfterFunc(r.startHold, release)
	return &firstByte{r: src, fn: release}, func() { t.Stop() }
}

// firstByte calls fn once the first byte was read from r.
type firstByte struct {
	r    io.Reader
	fn   func()
	done bool
}

func (f *firstByte) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if n > 0 && !f.done {
		f.done = true
		f.fn()
	}
	return n, err
}
