// Package execlimit admits execs to a container engine: a FIFO queue of a
// fixed width that an engine runtime (runtime/docker's and
// runtime/kubernetes' ExecGate option) takes a slot of for the engine's
// work of each exec — create, start, the wait for the process to run, the
// exit-code inspect — never for the command's whole life, so a long
// command does not starve the short ones. Waiters are served in arrival
// order: a sandbox looping on execs cannot overtake one that asked first.
package execlimit

import (
	"container/list"
	"context"
	"sync"
)

// DefaultWidth is New's width when given none: with 50 sandboxes looping
// on execs on the reference machine (2 cores, Docker 20.10;
// BenchmarkExecWidth against a runtime without a gate, Docker's start hold
// 250 ms) widths 4 to 32 all ran within the noise of no queue, 32 the
// fastest of them; the command line's max_concurrent_execs is 0 (no
// queue) unless set.
const DefaultWidth = 32

// Queue admits at most its width of holders at once; the others wait in
// arrival order. The zero Queue is not usable: call New. Safe for
// concurrent use.
type Queue struct {
	mu      sync.Mutex
	width   int
	held    int
	waiters list.List // of chan struct{}, closed when granted a slot
}

// New returns a queue of width n (n <= 0: DefaultWidth).
func New(n int) *Queue {
	if n <= 0 {
		n = DefaultWidth
	}
	return &Queue{width: n}
}

// Width is how many hold a slot at most.
func (q *Queue) Width() int { return q.width }

// Acquire waits for a slot, after every caller that asked before it, or
// for ctx. It returns the func that gives the slot back (once: later calls
// do nothing). A caller whose ctx ends while it waits holds nothing; if
// the slot was granted in that same instant, it is passed on to the next.
func (q *Queue) Acquire(ctx context.Context) (release func(), err error) {
	q.mu.Lock()
	if q.held < q.width && q.waiters.Len() == 0 {
		q.held++
		q.mu.Unlock()
		return sync.OnceFunc(q.release), nil
	}
	ready := make(chan struct{})
	el := q.waiters.PushBack(ready)
	q.mu.Unlock()
	select {
	case <-ready:
		return sync.OnceFunc(q.release), nil
	case <-ctx.Done():
	}
	q.mu.Lock()
	select {
	case <-ready: // granted (under the lock) as ctx ended: hand it on
		q.mu.Unlock()
		q.release()
	default:
		q.waiters.Remove(el)
		q.mu.Unlock()
	}
	return nil, ctx.Err()
}

// release hands the slot to the first waiter, or frees it.
func (q *Queue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if front := q.waiters.Front(); front != nil {
		q.waiters.Remove(front)
		close(front.Value.(chan struct{})) // the slot changes hands: held stays
		return
	}
	q.held--
}

// Stats says how many hold a slot and how many wait.
func (q *Queue) Stats() (held, waiting int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.held, q.waiters.Len()
}
