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
}

// turnJSON is the JSON of a turn record, with or without its events.
func turnJSON(t sandboxagent.TurnRecord, events bool) turnResult {
	r := turnResult{
		Turn: t.Turn, Prompt: t.Prompt, Reply: t.Reply, SessionID: t.SessionID, ExitCode: t.ExitCode,
		Started: t.Started, DurationMS: t.Duration.Milliseconds(), AuditDir: t.AuditDir, Running: t.Running,
		EventCount: t.EventCount, Dropped: t.EventCount - len(t.Events), Verification: t.Verification,
	}
	if t.Running {
		r.Reply, r.SessionID, r.ExitCode, r.DurationMS, r.AuditDir, r.Verification = "", "", 0, 0, "", nil
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

// watchMsg is one message of an agent's watch stream.
type watchMsg struct {
	event string
	data  any
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
	defer release()
	select {
	case s.turns <- struct{}{}:
	default:
		writeError(w, &apiError{status: http.StatusTooManyRequests, kind: KindLimit, msg: "serve_max_concurrent_turns reached: try again when a turn ends"})
		return
	}
	// The agent is free again as soon as its turn is recorded, before the
	// answer is written: a client that sends the next turn the moment it
	// reads the result must not get 409.
	freed := false
	free := func() {
		if !freed {
			freed = true
			<-s.turns
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

	var out *sseStream
	if wantsSSE(r) {
		// A client that stops reading is a client gone: its turn is
		// aborted like a disconnected one's.
		out = newSSEStream(w, cancel)
	}
	var fn func(sandboxagent.Event)
	if out != nil {
		fn = func(e sandboxagent.Event) { out.push("event", e) }
	}
	res, turnErr := a.ag.Stream(ctx, req.Prompt, fn)
	rec, _ := a.lastTurn() // this turn's: the agent is still held
	free()

	// The answer carries every event of the turn (the library holds them
	// anyway); the record keeps what its budget allows.
	final := turnJSON(rec, false)
	final.Events, final.Dropped = res.Events, 0
	switch {
	case out != nil:
		out.push("result", final)
		out.close()
	case turnErr != nil:
		status, body := classify(turnError(turnErr))
		body.Turn = &final
		writeJSON(w, status, body)
	default:
		writeJSON(w, http.StatusOK, final)
	}
}

func (s *Server) listTurns(w http.ResponseWriter, r *http.Request, a *agent) {
	turns := a.ag.Turns()
	out := make([]turnResult, 0, len(turns))
	for _, t := range turns {
		out = append(out, turnJSON(t, false))
	}
	writeJSON(w, http.StatusOK, map[string]any{"turns": out})
}

func (s *Server) getTurn(w http.ResponseWriter, r *http.Request, a *agent) {
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 {
		writeError(w, badRequest("turn %q: want a turn number from 1", r.PathValue("n")))
		return
	}
	for _, t := range a.ag.Turns() {
		if t.Turn == n {
			writeJSON(w, http.StatusOK, turnJSON(t, true))
			return
		}
	}
	writeError(w, notFound("agent %s has no turn %d in memory", a.id, n))
}

// pingEvery keeps idle event streams alive through proxies.
const pingEvery = 15 * time.Second

// watcherBuffer bounds the messages waiting for a watch stream's client.
const watcherBuffer = 1024

// watch streams an agent's turns as they happen: turn_start, every event,
// turn_end. A turn running when the watcher connects is replayed first.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, a *agent) {
	if a.gone.Err() != nil {
		writeError(w, notFound("agent %q was deleted", a.id))
		return
	}
	// The library calls the observer in order, under its own lock: it
	// only queues, and a watcher too slow to keep up is dropped (its
	// stream ends; EventSource reconnects).
	ch := make(chan watchMsg, watcherBuffer)
	dropped := false
	running, stop := a.ag.Observe(func(t sandboxagent.TurnRecord, e *sandboxagent.Event) {
		if dropped {
			return
		}
		var m watchMsg
		switch {
		case e != nil:
			m = watchMsg{"event", *e}
		case t.Running:
			m = watchMsg{"turn_start", map[string]any{"turn": t.Turn, "prompt": t.Prompt}}
		default:
			m = watchMsg{"turn_end", turnJSON(t, false)}
		}
		select {
		case ch <- m:
		default:
			dropped = true
			close(ch)
		}
	})
	defer stop()
	var replay []watchMsg
	if running.Turn != 0 {
		replay = append(replay, watchMsg{"turn_start", map[string]any{"turn": running.Turn, "prompt": running.Prompt}})
		for _, e := range running.Events {
			replay = append(replay, watchMsg{"event", e})
		}
	}

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
		case <-a.gone.Done():
			return // the agent was deleted
		case m, ok := <-ch:
			if !ok {
				return // this watcher fell behind
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

// errTurnStarted ends a turn's wait for the agent when another turn got it.
var errTurnStarted = errors.New("another turn started")
