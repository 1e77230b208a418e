package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/metering"
	"github.com/sandbox-agent/sandbox-agent/store"
	"github.com/sandbox-agent/sandbox-agent/trajectory"
)

// turnResult is the JSON of one turn. Field names are a public interface.
type turnResult struct {
	Turn       int                  `json:"turn"`
	Prompt     string               `json:"prompt"`
	Reply      string               `json:"reply"`
	SessionID  string               `json:"session_id,omitempty"`
	ExitCode   int                  `json:"exit_code"`
	Started    time.Time            `json:"started"`
	DurationMS int64                `json:"duration_ms"`
	AuditDir   string               `json:"audit_dir,omitempty"`
	Running    bool                 `json:"running,omitempty"`
	Error      string               `json:"error,omitempty"`
	Kind       string               `json:"kind,omitempty"`
	EventCount int                  `json:"event_count"`
	Dropped    int                  `json:"events_dropped,omitempty"` // beyond what the server keeps in memory
	Events     []sandboxagent.Event `json:"events,omitempty"`
	// Verification: the turn's events checked against the model proxy's
	// record (the library's TurnResult.Verification).
	Verification *trajectory.Verification `json:"verification,omitempty"`
	// Usage: what the turn's model requests used and cost, as the model
	// proxy counted them (the library's TurnResult.Usage).
	Usage *metering.Spent `json:"usage,omitempty"`
}

// turnJSON is the JSON of a turn record, with or without its events.
func turnJSON(t sandboxagent.TurnRecord, events bool) turnResult {
	r := turnResult{
		Turn: t.Turn, Prompt: t.Prompt, Reply: t.Reply, SessionID: t.SessionID, ExitCode: t.ExitCode,
		Started: t.Started, DurationMS: t.Duration.Milliseconds(), AuditDir: t.AuditDir, Running: t.Running,
		EventCount: t.EventCount, Dropped: t.EventCount - len(t.Events), Verification: t.Verification,
		Usage: t.Usage,
	}
	if t.Running {
		r.Reply, r.SessionID, r.ExitCode, r.DurationMS, r.AuditDir, r.Verification, r.Usage = "", "", 0, 0, "", nil, nil
	}
	if t.Err != nil {
		_, body := classify(turnError(t.Err))
		r.Error, r.Kind = body.Error, body.Kind
	}
	if events {
		r.Events = t.Events
	}
	return r
}

// turnError names a turn ended by its request's timeout (a deadline: the
// server's own contexts are only ever cancelled) as a timeout.
func turnError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, sandboxagent.ErrTimeout) {
		return fmt.Errorf("%w: the turn's timeout passed: %w", sandboxagent.ErrTimeout, err)
	}
	return err
}

type turnRequest struct {
	Prompt string `json:"prompt"`
	// Timeout, in seconds, bounds the turn (on top of timeout_ask).
	Timeout float64 `json:"timeout,omitempty"`
}

// watchMsg is one message queued for a turn's stream.
type watchMsg struct {
	id    int64
	event string
	data  any
}

// Turn statuses in the store.
const (
	turnRunning     = "running"
	turnDone        = "done"
	turnFailed      = "failed"
	turnInterrupted = "interrupted"
)

func wantsSSE(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

func (s *Server) postTurn(w http.ResponseWriter, r *http.Request, a *agent, rec store.Agent) {
	var req turnRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if strings.TrimSpace(req.Prompt) == "" {
		writeError(w, badRequest("prompt: required"))
		return
	}
	timeout, err := seconds("timeout", req.Timeout)
	if err != nil {
		writeError(w, err)
		return
	}
	p := who(r)
	key, err := idempotencyKey(r)
	if err != nil {
		writeError(w, err)
		return
	}
	started := false
	if key != "" {
		k, mine, err := s.claim(r.Context(), p.tenant, key, "turn:"+a.id)
		if err != nil {
			writeError(w, err)
			return
		}
		if !mine {
			n, err := strconv.Atoi(k.Ref)
			if err != nil {
				writeError(w, inProgress(key))
				return
			}
			w.Header().Set("Idempotent-Replayed", "true")
			s.followTurn(w, r, a, n)
			return
		}
		defer func() {
			if !started {
				s.unclaim(p.tenant, key)
			}
		}()
	}
	// The sandbox, after the key: a retry reaching a replica other than
	// the one running its turn follows that turn from the store.
	a, done, err := s.need(r.Context(), a, rec)
	if err != nil {
		writeError(w, err)
		return
	}
	defer done()
	// A running turn answers 409 at once; a session call holding the
	// agent is waited for (sessionCallWait), unless a turn starts
	// meanwhile (another request's): then 409 too.
	wctx, stopWait := context.WithCancelCause(r.Context())
	defer stopWait(nil)
	running, unobserve := a.ag.Observe(func(rec sandboxagent.TurnRecord, ev *sandboxagent.Event) {
		if ev == nil && rec.Running {
			stopWait(errTurnStarted)
		}
	})
	if running.Turn != 0 { // a turn runs already
		unobserve()
		writeError(w, busy(a))
		return
	}
	held, release, err := a.ag.Hold(wctx, sessionCallWait)
	unobserve() // held: no other turn starts until release
	if err == nil && context.Cause(wctx) != nil {
		release() // a turn came and went while this one waited
		err = context.Cause(wctx)
	}
	if err != nil {
		writeError(w, busy(a))
		return
	}
	defer func() { release() }()
	if err := s.takeTurnSlot(p.tenant); err != nil {
		writeError(w, err)
		return
	}
	slot := true
	defer func() {
		if slot {
			s.freeTurnSlot(p.tenant)
		}
	}()
	// The agent is free again as soon as its turn is recorded, before the
	// answer is written: a client that sends the next turn the moment it
	// reads the result must not get 409.
	freed := false
	free := func() {
		if !freed {
			freed = true
			a.j.sync() // the turn's messages and its row are stored
			s.freeTurnSlot(p.tenant)
			slot = false
			release()
		}
	}
	defer free()

	// The request's context (held): a client that goes away aborts the
	// turn (the session is kept); DELETE of the agent cancels it too.
	ctx, cancel := context.WithCancel(held)
	defer cancel()
	defer context.AfterFunc(a.gone, cancel)()
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if a.gone.Err() != nil {
		writeError(w, notFound("agent %q was deleted", a.id))
		return
	}

	// The turn's number, once it starts: the idempotency key points at it.
	turnNo := make(chan int, 1)
	var startedNo atomic.Int64
	_, unobserveStart := a.ag.Observe(func(rec sandboxagent.TurnRecord, ev *sandboxagent.Event) {
		if ev == nil && rec.Running {
			startedNo.Store(int64(rec.Turn))
			select {
			case turnNo <- rec.Turn:
			default:
			}
		}
	})
	var out *sseStream
	var forwarded chan int64
	unsub := func() {}
	if wantsSSE(r) {
		// A client that stops reading is a client gone: its turn is
		// aborted like a disconnected one's. Its events come from the
		// journal, as they are stored, with their ids.
		out = newSSEStream(w, cancel)
		var ch chan []message
		ch, _, unsub = a.j.subscribe()
		forwarded = make(chan int64, 1)
		go func() { forwarded <- forwardTurn(ch, out) }()
	}
	go func() {
		select {
		case n := <-turnNo:
			if key != "" {
				if err := s.st.SetIdempotencyRef(context.Background(), p.tenant, key, turnRef(n)); err != nil {
					s.log.Warn("idempotency key", "agent", a.id, "err", err)
				}
			}
		case <-ctx.Done():
		}
	}()
	if !s.opts.Exclusive { // the other replicas read the status from the store
		_ = s.save(ctx, a, statusBusy)
	}
	res, turnErr := a.ag.Stream(ctx, req.Prompt, nil)
	unobserveStart()
	last, _ := a.lastTurn() // this turn's: the agent is still held
	started = startedNo.Load() != 0
	if err := s.save(ctx, a, statusIdle); err != nil && turnErr == nil {
		turnErr = err
	}
	free()
	unsub() // after free's sync: the turn's messages are in the channel

	// The answer carries every event of the turn (the library holds them
	// anyway); the record keeps what its budget allows.
	final := turnJSON(last, false)
	final.Events, final.Dropped = res.Events, 0
	switch {
	case out != nil:
		out.pushID(<-forwarded, "result", final)
		out.close()
	case turnErr != nil:
		status, body := classify(turnError(turnErr))
		body.Turn = &final
		writeJSON(w, status, body)
	default:
		writeJSON(w, http.StatusOK, final)
	}
}

// forwardTurn sends the events of the turn that starts next from a
// journal subscription to a turn's stream, with their ids, and returns
// the id of its turn_end (0 when the subscription ended first: the
// client resumes with Last-Event-ID).
func forwardTurn(ch <-chan []message, out *sseStream) int64 {
	turn := 0
	for batch := range ch {
		for _, m := range batch {
			switch {
			case m.event == "turn_start" && turn == 0:
				turn = m.turn
			case m.turn != turn:
			case m.event == "event":
				out.pushID(m.seq, "event", m.data)
			case m.event == "turn_end":
				return m.seq
			}
		}
	}
	return 0
}

// takeTurnSlot counts a turn against serve_max_concurrent_turns and the
// tenant's limit, or answers 429.
func (s *Server) takeTurnSlot(tenant string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tenant != AdminTenant && s.opts.TenantMaxTurns > 0 && s.turnsBy[tenant] >= s.opts.TenantMaxTurns {
		return limited("serve_tenant_max_turns (%d) reached for tenant %s: try again when a turn ends", s.opts.TenantMaxTurns, tenant)
	}
	select {
	case s.turns <- struct{}{}:
	default:
		return limited("serve_max_concurrent_turns reached: try again when a turn ends")
	}
	s.turnsBy[tenant]++
	return nil
}

func (s *Server) freeTurnSlot(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	<-s.turns
	if s.turnsBy[tenant]--; s.turnsBy[tenant] <= 0 {
		delete(s.turnsBy, tenant)
	}
}

// defaultLeaseTTL is how long a turn's lease outlives a replica that died
// holding it.
const defaultLeaseTTL = 30 * time.Second

// remoteBusy is the answer for an agent whose turn another replica runs.
func remoteBusy(id string) error {
	return &apiError{status: http.StatusConflict, kind: KindBusy, msg: "a turn is running on agent " + id + " through another server", retryAfter: 1}
}

// lease takes the agent's lease and renews it until the returned release
// (idempotent) runs; another replica's live lease is store.ErrLeaseHeld.
// A renewal that finds the lease taken (this server stalled past its TTL
// and another adopted the sandbox) calls lost: the holder must stop.
func (s *Server) lease(ctx context.Context, id string, lost func()) (func(), error) {
	ttl := s.opts.LeaseTTL
	if _, err := s.st.AcquireLease(ctx, id, s.holder, ttl); err != nil {
		if errors.Is(err, store.ErrLeaseHeld) {
			return nil, err
		}
		return nil, fmt.Errorf("agent %s: lease: %w", id, err)
	}
	release := func() {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.st.ReleaseLease(rctx, id, s.holder); err != nil {
			s.log.Warn("release lease", "agent", id, "err", err)
		}
	}
	done := make(chan struct{})
	var once sync.Once
	go func() {
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				rctx, cancel := context.WithTimeout(context.Background(), ttl/3)
				_, err := s.st.AcquireLease(rctx, id, s.holder, ttl)
				if errors.Is(err, store.ErrLeaseHeld) {
					s.log.Warn("lease lost to another server: stopping", "agent", id)
					lost()
					cancel()
					return
				}
				if err != nil {
					s.log.Warn("renew lease", "agent", id, "err", err)
				}
				cancel()
			}
		}
	}()
	return func() {
		once.Do(func() {
			close(done)
			release()
		})
	}, nil
}

func (s *Server) listTurns(w http.ResponseWriter, r *http.Request, a *agent, _ store.Agent) {
	turns, err := s.st.ListTurns(r.Context(), a.id)
	if err != nil {
		writeError(w, fmt.Errorf("list turns: %w", err))
		return
	}
	out := make([]json.RawMessage, 0, len(turns))
	for _, t := range turns {
		out = append(out, storedTurn(t))
	}
	writeJSON(w, http.StatusOK, map[string]any{"turns": out})
}

// storedTurn is the JSON of a stored turn (without its events).
func storedTurn(t store.Turn) json.RawMessage {
	if len(t.Result) > 0 {
		return t.Result
	}
	b, _ := json.Marshal(turnResult{Turn: t.N, Prompt: t.Prompt, Started: t.Started, Running: t.Status == turnRunning})
	return b
}

func (s *Server) getTurn(w http.ResponseWriter, r *http.Request, a *agent, _ store.Agent) {
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 {
		writeError(w, badRequest("turn %q: want a turn number from 1", r.PathValue("n")))
		return
	}
	if _, err := s.st.GetTurn(r.Context(), a.id, n); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			writeError(w, notFound("agent %s has no turn %d", a.id, n))
			return
		}
		writeError(w, err)
		return
	}
	if wantsSSE(r) {
		s.followTurn(w, r, a, n)
		return
	}
	res, err := s.turnWithEvents(r.Context(), a.id, n)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// turnWithEvents is a stored turn with its stored events.
func (s *Server) turnWithEvents(ctx context.Context, agentID string, n int) (map[string]any, error) {
	t, err := s.st.GetTurn(ctx, agentID, n)
	if err != nil {
		return nil, err
	}
	var res map[string]any
	if err := json.Unmarshal(storedTurn(t), &res); err != nil {
		return nil, err
	}
	events := []json.RawMessage{}
	var after int64
	for {
		evs, err := s.st.Events(ctx, agentID, n, after, 1000)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			if e.Kind == "event" {
				events = append(events, e.Data)
			}
			after = e.Seq
		}
		if len(evs) < 1000 {
			break
		}
	}
	res["events"] = events
	return res, nil
}

// lastEventID is the request's Last-Event-ID (0 when none).
func lastEventID(r *http.Request) (int64, error) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("Last-Event-ID %q: want an event id from this server", v)
	}
	return n, nil
}

// followTurn answers with turn n of the agent, running or not, as its
// POST would have: JSON once it ends, or (Accept: text/event-stream) its
// events after Last-Event-ID, then live, then the result. It serves a
// retried POST with the same Idempotency-Key and GET .../turns/{n}.
func (s *Server) followTurn(w http.ResponseWriter, r *http.Request, a *agent, n int) {
	after, err := lastEventID(r)
	if err != nil {
		writeError(w, err)
		return
	}
	sse := wantsSSE(r)
	t, err := s.st.GetTurn(r.Context(), a.id, n)
	if err != nil {
		writeError(w, fmt.Errorf("turn %d: %w", n, err))
		return
	}
	var sw *sseWriter
	if sse {
		sw = sseHeaders(w)
		defer sw.done()
	}
	var endSeq int64
	if t.Status != turnRunning {
		// Ended: all of it is stored (a client past its end gets the
		// result alone).
		err = s.replayTurn(r.Context(), a.id, n, after, func(m message) error {
			if m.event == "turn_end" {
				endSeq = m.seq
			} else if sse && m.event == "event" {
				return sw.writeID(m.seq, "event", m.data)
			}
			return nil
		})
	} else {
		err = s.tail(r.Context(), a, after, func(m message) (bool, error) {
			if m.event == "ping" && sse {
				return true, sw.comment("ping")
			}
			if m.turn != n {
				return true, nil
			}
			switch m.event {
			case "event":
				if sse {
					return true, sw.writeID(m.seq, "event", m.data)
				}
			case "turn_end":
				endSeq = m.seq
				return false, nil
			}
			return true, nil
		})
	}
	if err != nil {
		if !sse {
			writeError(w, err)
		}
		return
	}
	res, err := s.turnWithEvents(r.Context(), a.id, n)
	switch {
	case err != nil && !sse:
		writeError(w, err)
	case err != nil:
	case sse:
		_ = sw.writeID(endSeq, "result", res)
		_ = sw.flush()
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

// replayTurn calls fn with the stored messages of turn n after id after.
func (s *Server) replayTurn(ctx context.Context, agentID string, n int, after int64, fn func(message) error) error {
	for {
		evs, err := s.st.Events(ctx, agentID, n, after, 1000)
		if err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		for _, e := range evs {
			after = e.Seq
			if err := fn(message{seq: e.Seq, turn: e.Turn, event: e.Kind, data: e.Data}); err != nil {
				return err
			}
		}
		if len(evs) < 1000 {
			return nil
		}
	}
}

// tailPoll is how often a stream reads the store for messages another
// replica wrote.
const tailPoll = 500 * time.Millisecond

// tail calls fn with the agent's messages after id after, from the store
// then live, until fn returns false, fn's error, the request ends or the
// agent goes. Live messages come from this server's journal as soon as
// they are stored; the store is read again every tailPoll for those
// another replica wrote. Messages kept by no store (beyond a turn's
// budget) come only live, without an id.
func (s *Server) tail(ctx context.Context, a *agent, after int64, fn func(message) (bool, error)) error {
	var ch <-chan []message
	if a.j != nil {
		c, _, unsub := a.j.subscribe()
		defer unsub()
		ch = c
	}
	cursor := after
	readStore := func() (bool, error) {
		for {
			evs, err := s.st.Events(ctx, a.id, 0, cursor, 500)
			if err != nil {
				return false, fmt.Errorf("read events: %w", err)
			}
			for _, e := range evs {
				cursor = e.Seq
				if more, err := fn(message{seq: e.Seq, turn: e.Turn, event: e.Kind, data: e.Data}); !more || err != nil {
					return false, err
				}
			}
			if len(evs) < 500 {
				return true, nil
			}
		}
	}
	if more, err := readStore(); !more || err != nil {
		return err
	}
	poll := time.NewTicker(tailPoll)
	defer poll.Stop()
	progress := time.Now() // of the store's messages
	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	gone := a.gone.Done()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-gone:
			// Deleted, or only let go (a borrow ended, a shutdown): the
			// store says which; a let-go agent is followed in the store.
			if _, err := s.st.LastSeq(ctx, a.id); errors.Is(err, store.ErrNotFound) {
				return notFound("agent %q was deleted", a.id)
			}
			gone, ch = nil, nil
		case batch, ok := <-ch:
			if !ok {
				ch = nil // fell behind, or detached: the store goes on
				continue
			}
			for _, m := range batch {
				if m.seq != 0 && m.seq <= cursor {
					continue
				}
				if m.seq > cursor+1 { // a gap: what is missing is stored
					if more, err := readStore(); !more || err != nil {
						return err
					}
					if m.seq <= cursor {
						continue
					}
				}
				if m.seq != 0 {
					cursor = m.seq
				}
				if more, err := fn(m); !more || err != nil {
					return err
				}
			}
		case <-poll.C:
			last, err := s.st.LastSeq(ctx, a.id)
			if errors.Is(err, store.ErrNotFound) {
				return notFound("agent %q was deleted", a.id)
			}
			if err == nil && last <= cursor && ch == nil && time.Since(progress) >= s.opts.LeaseTTL {
				// Nothing new for a lease's time from another replica:
				// it may have died mid-turn (reap records the turn's
				// end, which the next poll reads).
				progress = time.Now()
				if rec, err := s.st.GetAgent(ctx, a.id); err == nil {
					s.reap(ctx, rec)
				}
			}
			if err != nil || last <= cursor {
				continue // a store that failed a moment is read again next time
			}
			progress = time.Now()
			if more, err := readStore(); !more || err != nil {
				return err
			}
		case <-ping.C:
			if more, err := fn(message{event: "ping"}); !more || err != nil {
				return err
			}
		}
	}
}

// pingEvery keeps idle event streams alive through proxies.
const pingEvery = 15 * time.Second

// watcherBuffer bounds the messages waiting for a watch stream's client.
const watcherBuffer = 1024

// watch streams an agent's turns as they happen: turn_start, every event,
// turn_end, each with its id. With Last-Event-ID it replays what came
// after that id first; without, the running turn from its start.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, a *agent, _ store.Agent) {
	if a.gone.Err() != nil {
		writeError(w, notFound("agent %q was deleted", a.id))
		return
	}
	after, err := lastEventID(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if r.Header.Get("Last-Event-ID") == "" {
		if after, err = s.watchStart(r.Context(), a); err != nil {
			writeError(w, err)
			return
		}
	}
	sw := sseHeaders(w)
	defer sw.done()
	if sw.flush() != nil {
		return
	}
	_ = s.tail(r.Context(), a, after, func(m message) (bool, error) {
		var err error
		if m.event == "ping" {
			err = sw.comment("ping")
		} else {
			err = sw.writeID(m.seq, m.event, m.data)
		}
		if err == nil {
			err = sw.flush()
		}
		return err == nil, err
	})
}

// watchStart is where a watch without Last-Event-ID starts: before the
// running turn's start, else after the latest message.
func (s *Server) watchStart(ctx context.Context, a *agent) (int64, error) {
	last, err := s.st.LastSeq(ctx, a.id)
	if err != nil {
		return 0, err
	}
	turns, err := s.st.ListTurns(ctx, a.id)
	if err != nil || len(turns) == 0 || turns[len(turns)-1].Status != turnRunning {
		return last, err
	}
	first, err := s.st.Events(ctx, a.id, turns[len(turns)-1].N, 0, 1)
	if err != nil || len(first) == 0 {
		return last, err
	}
	return first[0].Seq - 1, nil
}

// sseWriteTimeout bounds one write to an event stream: a client that
// reads nothing for that long is treated as gone.
const sseWriteTimeout = 30 * time.Second

// maxQueued bounds the events waiting for a slow turn stream's client.
const maxQueued = 10000

// sseWriter writes server-sent events.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func sseHeaders(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

// writeID writes one event; id 0 writes none (a message no store keeps).
// v is JSON already (json.RawMessage) or marshalled here.
func (s *sseWriter) writeID(id int64, event string, v any) error {
	data, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if data, err = json.Marshal(v); err != nil {
			return err
		}
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
	var err error
	if id > 0 {
		_, err = fmt.Fprintf(s.w, "id: %d\nevent: %s\ndata: %s\n\n", id, event, data)
	} else {
		_, err = fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, data)
	}
	return err
}

func (s *sseWriter) comment(c string) error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
	_, err := fmt.Fprintf(s.w, ": %s\n\n", c)
	return err
}

func (s *sseWriter) flush() error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
	return s.rc.Flush()
}

// done lifts the write deadline, for whatever the connection serves next.
func (s *sseWriter) done() { _ = s.rc.SetWriteDeadline(time.Time{}) }

// sseStream sends a turn's events to its client from a goroutine of its
// own, so a slow client never holds up the CLI's output. A client that
// stops reading (a write past sseWriteTimeout, or maxQueued events
// behind) breaks the stream: gone calls the turn's cancel.
type sseStream struct {
	sw     *sseWriter
	gone   func() // called once, by goneOnce
	once   sync.Once
	mu     sync.Mutex
	queue  []watchMsg
	closed bool
	broken bool
	wake   chan struct{}
	done   chan struct{}
}

func newSSEStream(w http.ResponseWriter, gone func()) *sseStream {
	s := &sseStream{sw: sseHeaders(w), gone: gone, wake: make(chan struct{}, 1), done: make(chan struct{})}
	_ = s.sw.flush()
	go s.run()
	return s
}

func (s *sseStream) goneOnce() { s.once.Do(s.gone) }

func (s *sseStream) pushID(id int64, event string, v any) {
	s.mu.Lock()
	switch {
	case s.broken:
	case len(s.queue) >= maxQueued:
		s.broken, s.queue = true, nil
		go s.goneOnce()
	default:
		s.queue = append(s.queue, watchMsg{id, event, v})
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// close sends what is queued and returns when the stream is written (or
// broken).
func (s *sseStream) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-s.done
	s.sw.done()
}

func (s *sseStream) run() {
	defer close(s.done)
	for range s.wake {
		s.mu.Lock()
		batch, closed, broken := s.queue, s.closed, s.broken
		s.queue = nil
		s.mu.Unlock()
		if !broken && len(batch) > 0 {
			err := error(nil)
			for _, m := range batch {
				if err = s.sw.writeID(m.id, m.event, m.data); err != nil {
					break
				}
			}
			if err == nil {
				err = s.sw.flush()
			}
			if err != nil {
				s.mu.Lock()
				s.broken, s.queue = true, nil
				s.mu.Unlock()
				s.goneOnce()
			}
		}
		if closed {
			return
		}
	}
}

// sessionCallWait bounds how long a turn waits for a session call that
// holds the agent (the inspector lists sessions as it opens an agent; an
// exec in the sandbox, slow on a loaded engine).
const sessionCallWait = 30 * time.Second

// errTurnStarted ends a turn's wait for the agent when another turn got it.
var errTurnStarted = errors.New("another turn started")
