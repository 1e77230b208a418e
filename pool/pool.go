// Package pool keeps agents started ahead of need: a turn's caller gets a
// sandbox that is created, hardened, checked and has its CLI set up in
// about an engine round trip.
package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/telemetry"
)

// ErrClosed is returned by Pool.Start after Pool.Close.
var ErrClosed = errors.New("pool closed")

// Pool keeps agents started ahead of need for one driver and one set of
// options: sandbox created, hardened, checked, the CLI set up and, in a
// long-lived mode, started on a new session (Agent.Warm), no turn run. Start hands one out in about an engine round trip and a new one
// starts in the background to take its place. An agent handed out is the
// caller's (Close it as any agent); it never returns to the pool, so no
// sandbox is handed out twice.
//
// Every agent of a pool gets the same options, so a sandbox name set
// through WithSandbox makes no sense here (the second start would collide);
// leave it empty and each agent gets its own.
type Pool struct {
	rt   sandboxagent.Runtime
	drv  sandboxagent.Driver
	opts func() ([]sandboxagent.AgentOption, error)
	size int
	// event tells the agents' hooks (telemetry.Hooks.Pool) of a change.
	event func(kind string)
	// maxIdle retires a ready agent before its sandbox's keepalive could
	// remove it: an idle sandbox removes itself after Keepalive.
	maxIdle time.Duration

	ctx    context.Context // the background starts'; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	ready    []pooled // oldest first
	starting int
	closed   bool
	lastErr  error // of the latest background start, nil after a success
	failures int   // background starts failed in a row (backoff)
	stats    Stats
	wake     chan struct{} // signalled when a start ends
}

type pooled struct {
	a     *sandboxagent.Agent
	since time.Time
}

// Stats counts what a pool did.
type Stats struct {
	Ready    int // agents waiting to be handed out
	Starting int // background starts under way
	Hits     int // Start calls served from the pool
	Misses   int // Start calls that found the pool empty and started one themselves
	Retired  int // ready agents closed unused (sandbox gone or idle too long)
	Failed   int // background starts that failed
	// WarmFailed counts agents made ready without a warm CLI
	// (Agent.Warm failed: LastWarmErr); their first turn starts it.
	WarmFailed  int
	LastWarmErr error
	// LastErr is the error of the latest background start when it failed
	// (the pool keeps retrying), nil once one succeeded.
	LastErr error
}

// New starts size agents in the background (at most size at once;
// share a startlimit.Wrap runtime to bound them with other starts) and keeps
// size ready until Close. It fails at once only on invalid arguments; a
// start that fails in the background is retried with backoff, and its
// error is what Start returns when the pool is empty.
func New(rt sandboxagent.Runtime, drv sandboxagent.Driver, size int, opts ...sandboxagent.AgentOption) (*Pool, error) {
	return NewFunc(rt, drv, size, func() ([]sandboxagent.AgentOption, error) { return opts, nil })
}

// NewFunc is New with every agent's options from opts, called once per
// start: for options that must not be shared between agents (a meter of
// each agent's own, say). Its first answer is checked as New checks its
// options.
func NewFunc(rt sandboxagent.Runtime, drv sandboxagent.Driver, size int, options func() ([]sandboxagent.AgentOption, error)) (*Pool, error) {
	if options == nil {
		return nil, fmt.Errorf("%w: pool: nil options", sandboxagent.ErrInvalidArgument)
	}
	opts, err := options()
	if err != nil {
		return nil, err
	}
	if rt == nil || drv == nil {
		return nil, fmt.Errorf("%w: pool: nil Runtime or Driver", sandboxagent.ErrInvalidArgument)
	}
	if size < 1 {
		return nil, fmt.Errorf("%w: pool size %d (want 1 or more)", sandboxagent.ErrInvalidArgument, size)
	}
	probe := sandboxagent.SandboxOptionsOf(opts...)
	if probe.Name != "" {
		return nil, fmt.Errorf("%w: pool: every agent needs its own sandbox name; leave SandboxOptions.Name empty", sandboxagent.ErrInvalidArgument)
	}
	ka := probe.Config.Keepalive
	if probe.Keepalive > 0 {
		ka = probe.Keepalive
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{
		rt: rt, drv: drv, opts: options, size: size, maxIdle: ka / 2,
		ctx: ctx, cancel: cancel, wake: make(chan struct{}), event: func(string) {},
	}
	if h := probe.Hooks.Pool; h != nil {
		name := drv.Name()
		p.event = func(kind string) { h(telemetry.PoolEvent{Driver: name, Kind: kind}) }
	}
	p.mu.Lock()
	p.fillLocked()
	p.mu.Unlock()
	p.wg.Add(1)
	go p.retireLoop()
	return p, nil
}

// Start hands out a ready agent, or, when none is ready, starts one
// itself (as sandboxagent.Start would). A ready agent whose sandbox
// is gone (removed by hand, the engine restarted) is closed and the next
// one tried.
func (p *Pool) Start(ctx context.Context) (*sandboxagent.Agent, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		if len(p.ready) == 0 {
			p.stats.Misses++
			p.fillLocked()
			p.mu.Unlock()
			p.event("miss")
			opts, err := p.opts()
			if err != nil {
				return nil, err
			}
			return sandboxagent.Start(ctx, p.rt, p.drv, opts...)
		}
		it := p.ready[len(p.ready)-1] // the freshest: furthest from retirement
		p.ready = p.ready[:len(p.ready)-1]
		p.mu.Unlock()
		st, err := it.a.Container().Inspect(ctx)
		switch {
		case err == nil && st.Running:
			p.mu.Lock()
			p.stats.Hits++
			p.fillLocked()
			p.mu.Unlock()
			p.event("hit")
			return it.a, nil
		case ctx.Err() != nil:
			// The caller gave up, not the sandbox: it stays ready.
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				_ = it.a.Close()
				p.event("retired")
			} else {
				p.ready = append(p.ready, it)
				p.mu.Unlock()
			}
			return nil, ctx.Err()
		}
		p.retire(it.a)
	}
}

// Stats reports the pool's counters and its latest start failure.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Ready, s.Starting, s.LastErr = len(p.ready), p.starting, p.lastErr
	return s
}

// Wait blocks until n agents are ready (at most the pool's size), the
// context ends or the pool is closed.
func (p *Pool) Wait(ctx context.Context, n int) error {
	n = min(n, p.size)
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return ErrClosed
		}
		if len(p.ready) >= n {
			p.mu.Unlock()
			return nil
		}
		wake := p.wake
		p.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops refilling, waits for the starts under way and closes every
// agent not handed out. Agents handed out are not touched. It is
// idempotent.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.wake)
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	var errs []error
	for _, it := range ready {
		errs = append(errs, it.a.Close())
		p.event("retired")
	}
	return errors.Join(errs...)
}

// fillLocked starts as many agents as the pool lacks. p.mu is held.
func (p *Pool) fillLocked() {
	for !p.closed && len(p.ready)+p.starting < p.size {
		p.starting++
		p.wg.Add(1)
		go p.startOne(p.backoffLocked())
	}
}

// backoffLocked is how long a background start waits first: nothing after
// a success, then doubling from 250 ms to 30 s while starts keep failing
// (a missing image must not turn into a loop hammering the engine).
func (p *Pool) backoffLocked() time.Duration {
	if p.failures == 0 {
		return 0
	}
	return min(250*time.Millisecond<<min(p.failures-1, 7), 30*time.Second)
}

func (p *Pool) startOne(delay time.Duration) {
	defer p.wg.Done()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-p.ctx.Done():
		}
	}
	var a *sandboxagent.Agent
	err := p.ctx.Err()
	if err == nil {
		var opts []sandboxagent.AgentOption
		if opts, err = p.opts(); err == nil {
			a, err = sandboxagent.Start(p.ctx, p.rt, p.drv, opts...)
		}
	}
	var warmErr error
	if err == nil {
		// Its long-lived CLI up and its session open: the first turn
		// costs what a follow-up does. A CLI that would not warm leaves
		// a ready agent still (its first turn starts the CLI).
		warmErr = a.Warm(p.ctx)
	}
	kind := "" // told after the lock is released
	defer func() {
		if kind != "" {
			p.event(kind)
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starting--
	switch {
	case err == nil:
		p.ready = append(p.ready, pooled{a: a, since: time.Now()}) // after Close, Close takes it
		p.failures, p.lastErr = 0, nil
		if warmErr != nil && p.ctx.Err() == nil {
			p.stats.WarmFailed++
			p.stats.LastWarmErr = warmErr
		}
		kind = "ready"
	case p.closed:
	default:
		p.stats.Failed++
		p.failures++
		p.lastErr = err
		kind = "failed"
	}
	if !p.closed {
		close(p.wake)
		p.wake = make(chan struct{})
		p.fillLocked()
	}
}

// retireLoop closes ready agents idle past maxIdle, so that none is handed
// out moments before its keepalive removes it.
func (p *Pool) retireLoop() {
	defer p.wg.Done()
	every := min(max(p.maxIdle/4, time.Second), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		var old []*sandboxagent.Agent
		keep := p.ready[:0]
		for _, it := range p.ready {
			if time.Since(it.since) > p.maxIdle {
				old = append(old, it.a)
			} else {
				keep = append(keep, it)
			}
		}
		p.ready = keep
		p.fillLocked()
		p.mu.Unlock()
		for _, a := range old {
			p.retire(a)
		}
	}
}

func (p *Pool) retire(a *sandboxagent.Agent) {
	_ = a.Close()
	p.event("retired")
	p.mu.Lock()
	p.stats.Retired++
	p.fillLocked()
	p.mu.Unlock()
}
