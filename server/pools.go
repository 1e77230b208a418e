package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/pool"
)

// Pools keeps agents started ahead of the create requests a server sees
// (serve_pool_size): one pool (package pool, its agents' CLIs warm) per
// distinct request — its tenant, driver, model and every other field —
// made once that kind's first (cold) start succeeded, at most max of them
// (past it a new kind closes the least recently used pool of its own
// tenant, or gets none); a pool unused for poolIdle is closed. A request
// with a checkpoint, a repository, a fake-model script, an endpoint of its
// own or a short keepalive is never pooled (Poolable). Hits and misses go
// to the agents' hooks (Prometheus: sandbox_agent_pool_takes_total).
type Pools struct {
	o         StarterOptions
	size, max int
	cold      Starter
	stop      chan struct{} // closed by Close: ends the janitor
	wg        sync.WaitGroup

	mu     sync.Mutex
	pools  map[string]*keyedPool
	closed bool
}

// poolIdle closes a pool no request used for this long (its ready agents
// hold sandboxes and idle CLIs); minPoolKeepalive: a request whose
// sandbox removes itself sooner when idle is not pooled (its ready agents
// would be retired and replaced every keepalive/2).
const (
	poolIdle         = 10 * time.Minute
	minPoolKeepalive = 5 * time.Minute
)

type keyedPool struct {
	p       *pool.Pool // nil while it is being made
	drv     *sharedStop
	used    time.Time
	request CreateRequest // the one it was made for (its tenant, its driver)
}

// DefaultPoolMax is NewPools' max when given none (serve_pool_max).
const DefaultPoolMax = 16

// NewPools returns the pools of size agents each (0: none, every agent
// starts cold; at most max pools, 0: DefaultPoolMax) that serve uses in
// front of NewStarter(o).
func NewPools(o StarterOptions, size, max int) *Pools {
	if max <= 0 {
		max = DefaultPoolMax
	}
	ps := &Pools{o: o, size: size, max: max, cold: NewStarter(o), pools: map[string]*keyedPool{}, stop: make(chan struct{})}
	if size > 0 {
		ps.wg.Add(1)
		go ps.janitor()
	}
	return ps
}

// janitor closes the pools idle past poolIdle.
func (ps *Pools) janitor() {
	defer ps.wg.Done()
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ps.stop:
			return
		case <-t.C:
		}
		ps.mu.Lock()
		var idle []*keyedPool
		for k, kp := range ps.pools {
			if kp.p != nil && time.Since(kp.used) > poolIdle {
				delete(ps.pools, k)
				idle = append(idle, kp)
			}
		}
		ps.mu.Unlock()
		for _, kp := range idle {
			kp.close()
		}
	}
}

// Poolable reports whether req's agent can be made ahead.
func Poolable(req CreateRequest) bool {
	return req.From == nil && req.Checkpoint == "" && req.Repo == nil && req.RepoDir == "" &&
		!req.HasFakeModelScript() && req.Endpoint == nil &&
		(req.Keepalive == 0 || time.Duration(req.Keepalive*float64(time.Second)) >= minPoolKeepalive)
}

// poolKey is what makes two requests' agents interchangeable: all of
// them, the tenant included.
func poolKey(req CreateRequest) (string, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	return req.Tenant + "\x00" + string(b), nil
}

// Start is the Starter: a pooled agent when req's pool has one ready, a
// cold start otherwise; a request not seen before gets a pool for the
// next ones once its own cold start succeeded (a request that fails makes
// none).
func (ps *Pools) Start(ctx context.Context, req CreateRequest) (*sandboxagent.Agent, func(), error) {
	if ps.size <= 0 || !Poolable(req) {
		return ps.cold(ctx, req)
	}
	key, err := poolKey(req)
	if err != nil {
		return ps.cold(ctx, req)
	}
	ps.mu.Lock()
	kp := ps.pools[key]
	var p *pool.Pool
	var drv *sharedStop
	if kp != nil {
		kp.used = time.Now()
		if p, drv = kp.p, kp.drv; p != nil {
			drv.acquire() // before the lock goes: a pool closing now keeps the driver for this agent
		}
	}
	ps.mu.Unlock()
	if p == nil {
		ag, stop, err := ps.cold(ctx, req)
		if err == nil && kp == nil {
			ps.newPool(key, req)
		}
		return ag, stop, err
	}
	ag, err := p.Start(ctx)
	if err != nil {
		drv.release()
		if errors.Is(err, pool.ErrClosed) { // evicted meanwhile
			return ps.cold(ctx, req)
		}
		return nil, nil, err
	}
	var once sync.Once
	return ag, func() { once.Do(drv.release) }, nil
}

// newPool registers key's pool and makes it in the background. Past the
// maximum it evicts the least recently used pool of the same tenant: a
// tenant cannot close another's pools; one with none to evict gets none.
func (ps *Pools) newPool(key string, req CreateRequest) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed || ps.pools[key] != nil {
		return
	}
	if len(ps.pools) >= ps.max {
		var oldKey string
		var old *keyedPool
		for k, kp := range ps.pools {
			if kp.request.Tenant == req.Tenant && kp.p != nil && (old == nil || kp.used.Before(old.used)) {
				oldKey, old = k, kp
			}
		}
		if old == nil {
			return
		}
		delete(ps.pools, oldKey)
		ps.wg.Add(1)
		go func() { // not on the request's time: closing removes sandboxes
			defer ps.wg.Done()
			old.close()
		}()
	}
	kp := &keyedPool{request: req, used: time.Now()}
	ps.pools[key] = kp
	ps.wg.Add(1)
	go func() {
		defer ps.wg.Done()
		ps.makePool(key, kp, req)
	}()
}

// makePool makes kp's pool: the driver once for all its agents (the
// last of them, or the pool's close, releases it).
func (ps *Pools) makePool(key string, kp *keyedPool, req CreateRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Not made (the cold start beside says why): the key's next request
	// tries again.
	drop := func() {
		ps.mu.Lock()
		if ps.pools[key] == kp {
			delete(ps.pools, key)
		}
		ps.mu.Unlock()
	}
	drv, stop, err := ps.o.Driver(ctx, req)
	if err != nil {
		drop()
		return
	}
	shared := &sharedStop{n: 1, stop: stop}
	// Options per agent: each its own meter.
	p, err := pool.NewFunc(ps.o.Runtime, drv, ps.size, func() ([]sandboxagent.AgentOption, error) {
		opts, err := ps.o.agentOptions(req)
		return append(opts, ps.o.Options...), err
	})
	if err != nil {
		shared.release()
		drop()
		return
	}
	ps.mu.Lock()
	if ps.closed || ps.pools[key] != kp {
		ps.mu.Unlock()
		(&keyedPool{p: p, drv: shared}).close()
		return
	}
	kp.p, kp.drv = p, shared
	ps.mu.Unlock()
}

func (kp *keyedPool) close() {
	_ = kp.p.Close()
	kp.drv.release()
}

// Close closes every pool (their ready agents are removed; agents handed
// out are the server's). Later requests start cold.
func (ps *Pools) Close() error {
	ps.mu.Lock()
	if ps.closed {
		ps.mu.Unlock()
		return nil
	}
	ps.closed = true
	close(ps.stop)
	pools := ps.pools
	ps.pools = map[string]*keyedPool{}
	ps.mu.Unlock()
	ps.wg.Wait() // the pools being made (they see closed) and evicted
	var errs []error
	for _, kp := range pools {
		if kp.p != nil {
			if err := kp.p.Close(); err != nil {
				errs = append(errs, fmt.Errorf("pool of %s: %w", kp.request.Driver, err))
			}
			kp.drv.release()
		}
	}
	return errors.Join(errs...)
}

// sharedStop releases a driver (its fake model, say) shared by a pool
// and the agents it handed out, after the last of them.
type sharedStop struct {
	mu   sync.Mutex
	n    int
	stop func()
}

func (s *sharedStop) acquire() {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
}

func (s *sharedStop) release() {
	s.mu.Lock()
	s.n--
	last := s.n == 0
	s.mu.Unlock()
	if last {
		s.stop()
	}
}
