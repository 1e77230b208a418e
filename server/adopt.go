package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/store"
)

// Adopter re-attaches to the running sandbox of an agent a server stored
// (after a restart, or on another replica): req is its create request as
// stored (env values left out), state its sandboxagent.AgentState as
// JSON. Like a Starter's, stop releases what it made beside the agent.
// A *sandboxagent.SandboxLostError marks the agent lost.
type Adopter func(ctx context.Context, req CreateRequest, state json.RawMessage) (ag *sandboxagent.Agent, stop func(), err error)

// attach returns the agent of a stored record, adopting its sandbox when
// no agent of this server holds it yet. A lost agent comes back without
// a library agent.
func (s *Server) attach(ctx context.Context, rec store.Agent) (*agent, error) {
	s.mu.Lock()
	if a := s.agents[rec.ID]; a != nil {
		s.mu.Unlock()
		return a, nil
	}
	if s.closed {
		s.mu.Unlock()
		return nil, &apiError{status: 503, kind: KindInterrupted, msg: "the server is shutting down", retryAfter: 5}
	}
	l := s.adopting[rec.ID]
	if l == nil {
		l = &sync.Mutex{}
		s.adopting[rec.ID] = l
	}
	s.mu.Unlock()
	// One adoption per agent at a time; the others wait for its outcome.
	l.Lock()
	defer l.Unlock()
	s.mu.Lock()
	a := s.agents[rec.ID]
	s.mu.Unlock()
	if a != nil {
		return a, nil
	}
	a, err := s.adopt(ctx, rec)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.agents[rec.ID] = a
		delete(s.adopting, rec.ID)
	}
	s.mu.Unlock()
	if closed { // shut down meanwhile: left for the next server, as the others
		if a.ag != nil {
			_ = a.detach()
		}
		return nil, &apiError{status: 503, kind: KindInterrupted, msg: "the server is shutting down", retryAfter: 5}
	}
	return a, nil
}

// peek is the agent of rec on a shared store: the one borrowed here now,
// else one without its sandbox (lost, or only its record).
func (s *Server) peek(rec store.Agent) *agent {
	s.mu.Lock()
	a := s.agents[rec.ID]
	s.mu.Unlock()
	if a != nil {
		return a
	}
	var req CreateRequest
	_ = json.Unmarshal(rec.Request, &req)
	a = s.newAgent(rec.ID, rec.Tenant, req, rec.Created, nil, nil, 0)
	if rec.Status == statusLost {
		a.lost = rec.Reason
	}
	return a
}

// borrowed is a sandbox a request of this server borrowed from a shared
// store: the requests using it count, the last one lets it go.
type borrowed struct {
	n       int
	closing bool          // the last user is letting it go
	gone    chan struct{} // closed once it is let go
	ready   chan struct{}
	a       *agent
	err     error
	done    func() // the lease's release
}

// borrow takes the agent's lease (renewed while held) and adopts its
// sandbox, or joins another request of this server that did; done gives
// it back: the last user detaches the sandbox and releases the lease.
// Another replica holding it is a 409.
func (s *Server) borrow(ctx context.Context, rec store.Agent) (*agent, func(), error) {
	s.mu.Lock()
	b := s.borrows[rec.ID]
	for b != nil && b.closing { // its sockets are still served: wait
		s.mu.Unlock()
		select {
		case <-b.gone:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		s.mu.Lock()
		b = s.borrows[rec.ID]
	}
	if b == nil {
		b = &borrowed{ready: make(chan struct{}), gone: make(chan struct{})}
		s.borrows[rec.ID] = b
	}
	b.n++
	first := b.n == 1
	s.mu.Unlock()
	var once sync.Once
	done := func() { once.Do(func() { s.giveBack(rec.ID, b) }) }
	if first {
		b.done = func() {}
		unlease, err := s.lease(ctx, rec.ID, func() {
			s.mu.Lock()
			a := b.a
			s.mu.Unlock()
			if a != nil {
				a.end() // aborts its running turn
			}
		})
		if errors.Is(err, store.ErrLeaseHeld) {
			err = remoteBusy(rec.ID)
		}
		var a *agent
		if err == nil {
			b.done = unlease
			// The record as it is under the lease: another replica's turn
			// may have ended since it was read.
			var now store.Agent
			if now, err = s.st.GetAgent(ctx, rec.ID); err == nil {
				a, err = s.adopt(ctx, now)
			}
		}
		if err == nil {
			s.mu.Lock()
			b.a = a
			s.agents[rec.ID] = a
			s.mu.Unlock()
		}
		b.err = err
		close(b.ready)
	}
	select {
	case <-b.ready:
	case <-ctx.Done():
		done()
		return nil, nil, ctx.Err()
	}
	if b.err != nil {
		done()
		return nil, nil, b.err
	}
	return b.a, done, nil
}

// reap settles an agent of a shared store whose record says a turn runs
// while no replica holds its lease: the replica driving it died. Under the
// lease it records the turn as interrupted (settleTurns). A live turn (its
// lease held, here or on another replica) is left alone, and not asked
// again for half a lease; so is a failure: the next read tries again. It
// returns the record as it is now.
func (s *Server) reap(ctx context.Context, rec store.Agent) store.Agent {
	if s.opts.Exclusive || rec.Status != statusBusy {
		return rec
	}
	s.mu.Lock()
	_, here := s.borrows[rec.ID]
	held := time.Now().Before(s.leaseHeld[rec.ID])
	if !held {
		delete(s.leaseHeld, rec.ID)
	}
	s.mu.Unlock()
	if here || held {
		return rec
	}
	// A holder name of its own: a borrow here meanwhile gets a 409 rather
	// than sharing (and losing) the lease.
	holder := s.holder + "/reap"
	if _, err := s.st.AcquireLease(ctx, rec.ID, holder, s.opts.LeaseTTL); err != nil {
		if errors.Is(err, store.ErrLeaseHeld) { // a live turn: look again in a while
			s.mu.Lock()
			s.leaseHeld[rec.ID] = time.Now().Add(s.opts.LeaseTTL / 2)
			s.mu.Unlock()
		}
		return rec
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = s.st.ReleaseLease(rctx, rec.ID, holder)
	}()
	now, err := s.st.GetAgent(ctx, rec.ID) // the turn may have ended meanwhile
	if err != nil || now.Status != statusBusy {
		return now
	}
	// The store only: the next borrow's adoption stops the dead
	// replica's CLI in the sandbox.
	settled, err := s.settleTurns(ctx, now)
	if err != nil {
		s.log.Warn("settle a dead replica's turn", "agent", rec.ID, "err", err)
		return now
	}
	return settled
}

func (s *Server) giveBack(id string, b *borrowed) {
	s.mu.Lock()
	b.n--
	last := b.n == 0
	if last {
		b.closing = true
		if s.agents[id] == b.a {
			delete(s.agents, id)
		}
	}
	s.mu.Unlock()
	if !last {
		return
	}
	<-b.ready
	// Detached before the lease goes: no replica adopts a sandbox whose
	// sockets this one still serves.
	if b.a != nil && b.a.ag != nil {
		if err := b.a.detach(); err != nil {
			s.log.Warn("detach agent", "id", id, "err", err)
		}
	}
	b.done()
	s.mu.Lock()
	delete(s.borrows, id)
	s.mu.Unlock()
	close(b.gone)
}

// adopt makes the agent of rec: its sandbox adopted, or lost with the
// reason. No other server drives it meanwhile: the store is exclusive
// (attach), or the caller holds the agent's lease (borrow).
func (s *Server) adopt(ctx context.Context, rec store.Agent) (*agent, error) {
	var req CreateRequest
	if err := json.Unmarshal(rec.Request, &req); err != nil {
		return nil, fmt.Errorf("agent %s: stored request: %w", rec.ID, err)
	}
	req.Tenant = rec.Tenant
	lastSeq, err := s.st.LastSeq(ctx, rec.ID)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", rec.ID, err)
	}
	if rec.Status == statusLost {
		s.forgetRequest(rec.ID)
		a := s.newAgent(rec.ID, rec.Tenant, req, rec.Created, nil, nil, lastSeq)
		a.lost = rec.Reason
		return a, nil
	}
	if rec, err = s.settleTurns(ctx, rec); err != nil {
		return nil, err
	}
	if lastSeq, err = s.st.LastSeq(ctx, rec.ID); err != nil {
		return nil, fmt.Errorf("agent %s: %w", rec.ID, err)
	}
	var ag *sandboxagent.Agent
	var stop func()
	keyLost := false
	if ep := req.Endpoint; ep != nil && ep.KeyDropped {
		// The key, never stored, is known only to the process that
		// started the agent.
		s.mu.Lock()
		full, ok := s.requests[rec.ID]
		s.mu.Unlock()
		if ok && full.Endpoint != nil {
			req.Endpoint = full.Endpoint
		} else {
			keyLost = true
		}
	}
	switch {
	case s.opts.Adopt == nil:
		err = &sandboxagent.SandboxLostError{ID: rec.SandboxID, Name: rec.SandboxName, Reason: "this server cannot adopt sandboxes (no Adopter)"}
	case keyLost:
		err = &sandboxagent.SandboxLostError{ID: rec.SandboxID, Name: rec.SandboxName, Reason: keyNotKept}
	default:
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), adoptTimeout)
		ag, stop, err = s.opts.Adopt(actx, req, rec.Adopt)
		cancel()
	}
	if err != nil {
		var lostErr *sandboxagent.SandboxLostError
		if !errors.As(err, &lostErr) {
			// The engine may be down for a moment: not lost, try later.
			return nil, fmt.Errorf("adopt agent %s: %w", rec.ID, err)
		}
		s.log.Warn("agent lost", "id", rec.ID, "err", err)
		s.forgetRequest(rec.ID) // no fork of it: its env goes
		a := s.newAgent(rec.ID, rec.Tenant, req, rec.Created, nil, nil, lastSeq)
		a.lost = err.Error()
		if err := s.save(ctx, a, statusLost); err != nil {
			return nil, err
		}
		return a, nil
	}
	a := s.newAgent(rec.ID, rec.Tenant, req, rec.Created, ag, stop, lastSeq)
	if err := s.save(ctx, a, statusIdle); err != nil {
		_ = a.detach()
		return nil, err
	}
	s.log.Info("agent adopted", "id", a.id, "container", ag.Container().Name())
	return a, nil
}

// settleTurns records the agent's turns that were running when their
// server died as interrupted (interruptTurns) and brings its stored
// sandbox state up to them (patchState): store writes only, no sandbox.
// It returns the record as stored now.
func (s *Server) settleTurns(ctx context.Context, rec store.Agent) (store.Agent, error) {
	// Not cut short by the request that asked: a turn_end appended
	// without its turn's row would be appended again next time.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	lastSeq, err := s.st.LastSeq(ctx, rec.ID)
	if err != nil {
		return rec, fmt.Errorf("agent %s: %w", rec.ID, err)
	}
	session, last, err := s.interruptTurns(ctx, rec, lastSeq)
	if err != nil {
		return rec, err
	}
	// The state is saved after a turn, the turn's row as it ends: a
	// server that died between the two left the state a turn behind.
	turns := max(rec.Turns, last)
	patched := patchState(rec.Adopt, turns, session)
	if last == 0 && rec.Status != statusBusy && bytes.Equal(patched, rec.Adopt) {
		return rec, nil
	}
	rec.Turns, rec.Adopt = turns, patched
	if rec.SessionID == "" {
		rec.SessionID = session
	}
	if rec.Status == statusBusy {
		rec.Status = statusIdle
	}
	rec.Updated = time.Now().UTC()
	if err := s.st.UpdateAgent(ctx, rec); err != nil {
		return rec, fmt.Errorf("agent %s: %w", rec.ID, err)
	}
	return rec, nil
}

// patchState brings the saved state up to what the store saw after it
// was saved: a turn that started later (and was interrupted) keeps its
// number and the next takes the one after; an interrupted first turn's
// session, named in its events, is continued.
func patchState(state json.RawMessage, turns int, session string) json.RawMessage {
	var st sandboxagent.AgentState
	if json.Unmarshal(state, &st) != nil || st.Turns >= turns && (st.Session != "" || session == "") {
		return state
	}
	st.Turns = max(st.Turns, turns)
	if st.Session == "" {
		st.Session = session
	}
	out, err := json.Marshal(st)
	if err != nil {
		return state
	}
	return out
}

// settleTimeout bounds the store writes that settle a dead server's turns.
const settleTimeout = 30 * time.Second

// adoptTimeout bounds one adoption (an inspect, the proxies, a tunnel).
const adoptTimeout = 2 * time.Minute

// interruptTurns records the agent's turns that were running when their
// server died as interrupted, with the events stored so far and a
// turn_end message. It returns the session those events named, if any,
// and the number of the latest turn it interrupted (0: none).
func (s *Server) interruptTurns(ctx context.Context, rec store.Agent, lastSeq int64) (session string, last int, err error) {
	turns, err := s.st.ListTurns(ctx, rec.ID)
	if err != nil {
		return "", 0, fmt.Errorf("agent %s: turns: %w", rec.ID, err)
	}
	for _, t := range turns {
		if t.Status != turnRunning {
			continue
		}
		var res turnResult
		if len(t.Result) > 0 {
			_ = json.Unmarshal(t.Result, &res)
		}
		res.Turn, res.Prompt, res.Started, res.Running = t.N, t.Prompt, t.Started, false
		res.Error, res.Kind = "the server stopped while the turn ran", KindInterrupted
		evs, err := s.st.Events(ctx, rec.ID, t.N, 0, journalTurnEvents+2)
		if err != nil {
			return "", 0, fmt.Errorf("agent %s: events: %w", rec.ID, err)
		}
		res.EventCount = 0
		for _, e := range evs {
			if e.Kind != "event" {
				continue
			}
			res.EventCount++
			var ev struct {
				SessionID string `json:"session_id"`
			}
			if json.Unmarshal(e.Data, &ev) == nil && ev.SessionID != "" && !strings.HasPrefix(ev.SessionID, "unknown-") {
				session = ev.SessionID
			}
		}
		if res.SessionID == "" {
			res.SessionID = session
		}
		data, err := json.Marshal(res)
		if err != nil {
			return "", 0, err
		}
		lastSeq++
		if err := s.st.AppendEvents(ctx, []store.Event{{AgentID: rec.ID, Seq: lastSeq, Turn: t.N, Kind: "turn_end", Data: data, Time: time.Now().UTC()}}); err != nil {
			return "", 0, fmt.Errorf("agent %s: interrupt turn %d: %w", rec.ID, t.N, err)
		}
		t.Status, t.Result, t.Ended = turnInterrupted, data, time.Now().UTC()
		if err := s.st.PutTurn(ctx, t); err != nil {
			return "", 0, fmt.Errorf("agent %s: interrupt turn %d: %w", rec.ID, t.N, err)
		}
		s.log.Warn("turn interrupted by a server stop", "agent", rec.ID, "turn", t.N)
		last = max(last, t.N)
	}
	return session, last, nil
}

// startBackground starts the housekeeping once, unless the server is
// closed.
func (s *Server) startBackground() {
	s.bgOnce.Do(func() {
		s.mu.Lock()
		closed := s.closed
		if !closed {
			s.bg.Add(1)
		}
		s.mu.Unlock()
		if closed {
			return
		}
		go func() {
			defer s.bg.Done()
			s.housekeep(s.bgCtx)
		}()
	})
}

// forgetRequest drops the create request kept for the agent's forks.
func (s *Server) forgetRequest(id string) {
	s.mu.Lock()
	delete(s.requests, id)
	s.mu.Unlock()
}

// recoverWidth bounds the adoptions Recover runs at once: each is an
// exec in its sandbox; on 2 cores 32 at once was slower than 8 (the
// engine is the bottleneck: BenchmarkServeReadopt).
const recoverWidth = 8

// Recovery is how Recover's adoptions went.
type Recovery struct {
	Adopted, Lost int
	// Err joins the adoptions that failed for another reason (the engine
	// down): each agent is tried again when a request needs it.
	Err  error
	Took time.Duration
}

// Recover takes over the agents an earlier server left in an exclusive
// store. First, before it returns, it records their turns that were
// running as interrupted (the store only). Then it adopts their sandboxes
// in the background, recoverWidth at a time, and sends how that went on
// the channel it returned: meanwhile reads of an agent not yet adopted
// answer from the store, and a request that needs its sandbox adopts it
// at once (or waits for the adoption under way). On a shared store it
// adopts nothing: agents are borrowed when a request needs one.
//
// On either store it also starts the server's housekeeping, now and then
// hourly until Close or Shutdown: the checkpoints of its Instance that
// lost their record are removed (reconcileCheckpoints), and the create
// requests kept for forks of agents deleted elsewhere are forgotten.
func (s *Server) Recover(ctx context.Context) (<-chan Recovery, error) {
	s.startBackground()
	done := make(chan Recovery, 1)
	if !s.opts.Exclusive {
		done <- Recovery{}
		return done, nil
	}
	t0 := time.Now()
	recs, err := s.st.ListAgents(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	for i, rec := range recs {
		if rec.Status == statusLost {
			continue
		}
		if recs[i], err = s.settleTurns(ctx, rec); err != nil {
			// Settled again when it is adopted.
			s.log.Warn("recover: settle the turns", "agent", rec.ID, "err", err)
		}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("recover: %w", sandboxagent.ErrClosed)
	}
	s.recovery.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.recovery.Done()
		var r Recovery
		var mu sync.Mutex
		var errs []error
		sem := make(chan struct{}, recoverWidth)
		var wg sync.WaitGroup
		for _, rec := range recs {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				a, err := s.attach(ctx, rec)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case a.ag == nil:
					r.Lost++
				default:
					r.Adopted++
				}
			})
		}
		wg.Wait()
		r.Err, r.Took = errors.Join(errs...), time.Since(t0)
		done <- r
	}()
	return done, nil
}
