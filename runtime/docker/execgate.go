package docker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/moby/moby/client"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// ExecGate admits the engine's work of an exec (runtime/execlimit's Queue
// is one): Acquire waits for a slot and returns the func giving it back.
type ExecGate interface {
	Acquire(ctx context.Context) (release func(), err error)
}

// Bounds of the wait for an exec's process to run, slot held. The engine
// answers the attach before it starts the process (containerd, runc), so
// the slot must outlive the attach to cover that work. Polls are engine
// work too: the first comes late enough that a short command's stream
// usually ends before it (no extra call), the later ones sparse (a
// saturated engine takes seconds to start a `true`); execStartHold bounds
// an engine that never reports a pid.
const (
	execStartPoll    = 100 * time.Millisecond
	execStartPollMax = 400 * time.Millisecond
	execStartHold    = 10 * time.Second
)

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

// holdUntilStarted gives the slot back (release) once the engine reports
// the exec's process running (a pid; Docker and Podman keep it after the
// exit), an inspect fails, or execStartHold passed. stop ends the watch
// and says whether it gave the slot back: a command whose stream ended
// first still holds it, for its exit-code inspect.
func (r *Runtime) holdUntilStarted(ctx context.Context, execID string, release func()) (stop func() (released bool)) {
	if r.execGate == nil {
		return func() bool { return false }
	}
	done := make(chan struct{})
	result := make(chan bool, 1)
	go func() {
		deadline := time.Now().Add(execStartHold)
		delay := execStartPoll
		for {
			select {
			case <-done:
				result <- false
				return
			case <-time.After(delay):
			}
			ins, err := r.cli.ExecInspect(ctx, execID, client.ExecInspectOptions{})
			if err != nil || ins.PID != 0 || time.Now().After(deadline) {
				release()
				result <- true
				return
			}
			delay = min(delay*2, execStartPollMax)
		}
	}()
	return func() bool {
		close(done)
		return <-result
	}
}
