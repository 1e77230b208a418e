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
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
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
	Verification *sandboxagent.Verification `json:"verification,omitempty"`
}

// turnRecord is a turn the server keeps; guarded by its agent's mu.
type turnRecord struct {
	res   turnResult
	bytes int // the kept events' size, roughly
}

// snapshot copies the record, with or without its events.
func (t *turnRecord) snapshot(events bool) turnResult {
	r := t.res
	if events {
		r.Events = append([]sandboxagent.Event(nil), t.res.Events...)
	} else {
		r.Events = nil
	}
	return r
}

type turnRequest struct {
	Prompt string `json:"prompt"`
	// Timeout, in seconds, bounds the turn (on top of timeout_ask).
	Timeout float64 `json:"timeout,omitempty"`
}

// watchMsg is one message of an agent's watch stream.
type watchMsg struct {
	event string
	data  any
}

// broadcast sends m to every watcher; a watcher too slow to keep up is
// dropped (its stream ends; EventSource reconnects). Called with a.mu held.
func (a *agent) broadcast(m watchMsg) {
	for ch := range a.watchers {
		select {
		case ch <- m:
		default:
			close(ch)
			delete(a.watchers, ch)
		}
	}
}

func wantsSSE(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

func (s *Server) postTurn(w http.ResponseWriter, r *http.Request, a *agent) {
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
	if !a.lockForTurn(r) {
		writeError(w, busy(a))
		return
	}
	select {
	case s.turns <- struct{}{}:
	default:
		a.turn.Unlock()
		writeError(w, &apiError{status: http.StatusTooManyRequests, kind: KindLimit, msg: "serve_max_concurrent_turns reached: try again when a turn ends"})
		return
	}
	// The agent is free again as soon as its turn is recorded, before the
	// answer is written: a client that sends the next turn the moment it
	// reads the result must not get 409.
	released := false
	release := func() {
		if !released {
			released = true
			<-s.turns
			a.turn.Unlock()
		}
	}
	defer release()

	// The request's context: a client that goes away aborts the turn
	// (the session is kept); DELETE of the agent cancels it too.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		writeError(w, notFound("agent %q was deleted", a.id))
		return
	}
	a.turnNo++
	rec := &turnRecord{res: turnResult{Turn: a.turnNo, Prompt: req.Prompt, Started: time.Now().UTC(), Running: true}}
	a.running, a.cancel = rec, cancel
	a.keep(rec)
	a.broadcast(watchMsg{"turn_start", map[string]any{"turn": rec.res.Turn, "prompt": req.Prompt}})
	a.mu.Unlock()

	var out *sseStream
	if wantsSSE(r) {
		// A client that stops reading is a client gone: its turn is
		// aborted like a disconnected one's.
		out = newSSEStream(w, cancel)
	}
	res, turnErr := a.ag.Stream(ctx, req.Prompt, func(e sandboxagent.Event) {
		a.mu.Lock()
		if e.SessionID != "" {
			a.session = e.SessionID // shown while the turn runs
		}
		rec.add(e)
		a.broadcast(watchMsg{"event", e})
		a.mu.Unlock()
		if out != nil {
			out.push("event", e)
		}
	})
	// The library's own record of the current session (a CLI that died
	// before naming its session does not change it).
	session := a.ag.SessionID()

	a.mu.Lock()
	a.session = session
	rr := &rec.res
	rr.Running = false
	rr.Reply, rr.SessionID, rr.ExitCode, rr.AuditDir = res.Reply, res.SessionID, res.ExitCode, res.AuditDir
	rr.DurationMS = res.Duration.Milliseconds()
	rr.Verification = res.Verification
	var status int
	var body errorBody
	if turnErr != nil {
		if errors.Is(turnErr, context.DeadlineExceeded) && r.Context().Err() == nil {
			turnErr = fmt.Errorf("%w: the turn's timeout of %v passed: %w", sandboxagent.ErrTimeout, timeout, turnErr)
		}
		status, body = classify(turnErr)
		rr.Error, rr.Kind = body.Error, body.Kind
	}
	a.running, a.cancel = nil, nil
	// The answer carries every event of the turn (the library holds them
	// anyway); the record keeps what its budget allows.
	final := rec.snapshot(false)
	final.Events, final.Dropped = res.Events, 0
	a.broadcast(watchMsg{"turn_end", rec.snapshot(false)})
	a.mu.Unlock()
	release()

	switch {
	case out != nil:
		out.push("result", final)
		out.close()
	case turnErr != nil:
		body.Turn = &final
		writeJSON(w, status, body)
	default:
		writeJSON(w, http.StatusOK, final)
	}
}

// keep adds a turn's record, forgetting the oldest beyond maxTurnsKept
// and the events of those beyond maxTurnsWithEvents. Called with a.mu.
func (a *agent) keep(rec *turnRecord) {
	a.turns = append(a.turns, rec)
	if len(a.turns) > maxTurnsKept {
		a.turns = a.turns[len(a.turns)-maxTurnsKept:]
	}
	if n := len(a.turns) - maxTurnsWithEvents; n > 0 {
		old := a.turns[n-1]
		old.res.Dropped += len(old.res.Events)
		old.res.Events, old.bytes = nil, 0
	}
}

// add records one event of the turn within the turn's budget. Called with
// its agent's mu held.
func (t *turnRecord) add(e sandboxagent.Event) {
	t.res.EventCount++
	p := e.Payload
	size := 256 + len(p.Text) + len(p.Output) + len(p.Command) + len(p.Path) + len(p.Input) + len(p.Raw)
	if len(t.res.Events) >= maxEventsPerTurn || t.bytes+size > maxTurnEventBytes {
		t.res.Dropped++
		return
	}
	t.bytes += size
	t.res.Events = append(t.res.Events, e)
}

func (s *Server) listTurns(w http.ResponseWriter, r *http.Request, a *agent) {
	a.mu.Lock()
	out := make([]turnResult, 0, len(a.turns))
	for _, t := range a.turns {
		out = append(out, t.snapshot(false))
	}
	a.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"turns": out})
}

func (s *Server) getTurn(w http.ResponseWriter, r *http.Request, a *agent) {
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 {
		writeError(w, badRequest("turn %q: want a turn number from 1", r.PathValue("n")))
		return
	}
	a.mu.Lock()
	var found *turnResult
	for _, t := range a.turns {
		if t.res.Turn == n {
			snap := t.snapshot(true)
			found = &snap
		}
	}
	a.mu.Unlock()
	if found == nil {
		writeError(w, notFound("agent %s has no turn %d in memory", a.id, n))
		return
	}
	writeJSON(w, http.StatusOK, found)
}

// pingEvery keeps idle event streams alive through proxies.
const pingEvery = 15 * time.Second

// watch streams an agent's turns as they happen: turn_start, every event,
// turn_end. A turn running when the watcher connects is replayed first.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, a *agent) {
	ch := make(chan watchMsg, watcherBuffer)
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		writeError(w, notFound("agent %q was deleted", a.id))
		return
	}
	var replay []watchMsg
	if t := a.running; t != nil {
		replay = append(replay, watchMsg{"turn_start", map[string]any{"turn": t.res.Turn, "prompt": t.res.Prompt}})
		for _, e := range t.res.Events {
			replay = append(replay, watchMsg{"event", e})
		}
	}
	a.watchers[ch] = struct{}{}
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		if _, ok := a.watchers[ch]; ok {
			delete(a.watchers, ch)
		}
		a.mu.Unlock()
	}()

	sw := sseHeaders(w)
	defer sw.done()
	for _, m := range replay {
		if sw.write(m.event, m.data) != nil {
			return
		}
	}
	if sw.flush() != nil {
		return
	}
	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case m, ok := <-ch:
			if !ok {
				return // the agent was deleted, or this watcher fell behind
			}
			if sw.write(m.event, m.data) != nil || sw.flush() != nil {
				return
			}
		case <-ping.C:
			if sw.comment("ping") != nil || sw.flush() != nil {
				return
			}
		}
	}
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

func (s *sseWriter) write(event string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
	_, err = fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, data)
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

func (s *sseStream) push(event string, v any) {
	s.mu.Lock()
	switch {
	case s.broken:
	case len(s.queue) >= maxQueued:
		s.broken, s.queue = true, nil
		go s.goneOnce()
	default:
		s.queue = append(s.queue, watchMsg{event, v})
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
				if err = s.sw.write(m.event, m.data); err != nil {
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

// lockForTurn takes the agent's turn lock: at once, or after the session
// call holding it ends; false (409) while a turn runs.
func (a *agent) lockForTurn(r *http.Request) bool {
	deadline := time.Now().Add(sessionCallWait)
	for !a.turn.TryLock() {
		a.mu.Lock()
		running := a.running != nil
		a.mu.Unlock()
		if running || time.Now().After(deadline) || r.Context().Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
