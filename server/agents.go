package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"sync"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// Bounds of what the server keeps in memory per agent for the inspector
// and GET .../turns (the audit trail keeps everything).
const (
	maxTurnsKept       = 200
	maxTurnsWithEvents = 20      // older turns keep their summary only
	maxEventsPerTurn   = 5000    // and at most this many events
	maxTurnEventBytes  = 4 << 20 // of at most about this size
	watcherBuffer      = 1024
)

// agent is one agent the server owns.
type agent struct {
	id      string
	driver  string
	model   string
	created time.Time
	ag      *sandboxagent.Agent
	stop    func()

	// turn is held while a turn runs: a second one is refused (409).
	turn sync.Mutex

	mu sync.Mutex
	// session mirrors the library agent's current session: its
	// SessionID waits while a turn runs, a listing must not.
	session  string
	turns    []*turnRecord // the last maxTurnsKept
	turnNo   int
	running  *turnRecord
	cancel   context.CancelFunc // of the running turn
	watchers map[chan watchMsg]struct{}
	closed   bool
	closeErr error
	once     sync.Once
}

// agentView is the JSON of an agent. Field names are a public interface.
type agentView struct {
	ID        string    `json:"id"`
	Driver    string    `json:"driver"`
	Model     string    `json:"model,omitempty"`
	Image     string    `json:"image"`
	SessionID string    `json:"session_id"`
	Status    string    `json:"status"` // idle or busy
	Created   time.Time `json:"created"`
	Turns     int       `json:"turns"`
	Container string    `json:"container"`
}

func (a *agent) view() agentView {
	a.mu.Lock()
	defer a.mu.Unlock()
	status := "idle"
	if a.running != nil {
		status = "busy"
	}
	return agentView{
		ID: a.id, Driver: a.driver, Model: a.model, Image: a.ag.Image(), SessionID: a.session,
		Status: status, Created: a.created, Turns: a.turnNo, Container: a.ag.Container().Name(),
	}
}

// setSession records the agent's current session.
func (a *agent) setSession(id string) {
	a.mu.Lock()
	a.session = id
	a.mu.Unlock()
}

// idleWait is how long a session call waits for a turn to end before it
// answers 409: long enough for the moment between a turn's end and its
// answer, short enough not to hang a client behind a long turn.
const idleWait = 2 * time.Second

// idle holds the agent's turn lock for a session call, which must not
// interleave with a turn (the library would wait for the turn to end); it
// answers 409 while a turn runs. The caller unlocks a.turn.
func (a *agent) idle(w http.ResponseWriter, r *http.Request) bool {
	deadline := time.Now().Add(idleWait)
	for !a.turn.TryLock() {
		if time.Now().After(deadline) || r.Context().Err() != nil {
			writeError(w, busy(a))
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

func busy(a *agent) error {
	return &apiError{status: http.StatusConflict, kind: KindBusy, msg: "a turn is running on agent " + a.id}
}

// close ends a running turn, ends the watch streams and destroys the
// sandbox. Idempotent.
func (a *agent) close() error {
	a.once.Do(func() {
		a.mu.Lock()
		a.closed = true
		if a.cancel != nil {
			a.cancel()
		}
		for ch := range a.watchers {
			close(ch)
		}
		a.watchers = nil
		a.mu.Unlock()
		a.closeErr = a.ag.Close()
		a.stop()
	})
	return a.closeErr
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "ag_" + hex.EncodeToString(b)
}

func (s *Server) createAgent(w http.ResponseWriter, r *http.Request) {
	var req CreateRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Driver == "" {
		writeError(w, badRequest("driver: required"))
		return
	}
	if _, err := seconds("keepalive", req.Keepalive); err != nil {
		writeError(w, err)
		return
	}
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		writeError(w, &apiError{status: http.StatusServiceUnavailable, kind: KindInterrupted, msg: "the server is shutting down"})
		return
	case len(s.agents)+s.starting >= s.opts.MaxAgents:
		s.mu.Unlock()
		writeError(w, &apiError{status: http.StatusTooManyRequests, kind: KindLimit, msg: "serve_max_agents reached: delete an agent first"})
		return
	}
	s.starting++
	s.mu.Unlock()

	ag, stop, err := s.opts.Start(r.Context(), req)
	s.mu.Lock()
	s.starting--
	if err == nil && s.closed {
		s.mu.Unlock()
		_ = ag.Close()
		stop()
		writeError(w, &apiError{status: http.StatusServiceUnavailable, kind: KindInterrupted, msg: "the server is shutting down"})
		return
	}
	if err != nil {
		s.mu.Unlock()
		s.log.Warn("create agent", "driver", req.Driver, "err", err)
		writeError(w, err)
		return
	}
	a := &agent{id: newID(), driver: req.Driver, model: req.Model, created: time.Now().UTC(), ag: ag, stop: stop, session: ag.SessionID(), watchers: map[chan watchMsg]struct{}{}}
	s.agents[a.id] = a
	s.order = append(s.order, a.id)
	s.mu.Unlock()
	s.log.Info("agent started", "id", a.id, "driver", a.driver, "container", ag.Container().Name())
	writeJSON(w, http.StatusCreated, a.view())
}

// lookup finds the agent of the request's {id}, or answers 404.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request) *agent {
	id := r.PathValue("id")
	s.mu.Lock()
	a := s.agents[id]
	s.mu.Unlock()
	if a == nil {
		writeError(w, notFound("no agent %q", id))
	}
	return a
}

func (s *Server) listAgents(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	all := make([]*agent, 0, len(s.order))
	for _, id := range s.order {
		all = append(all, s.agents[id])
	}
	s.mu.Unlock()
	views := make([]agentView, 0, len(all))
	for _, a := range all {
		views = append(views, a.view())
	}
	writeJSON(w, http.StatusOK, map[string]any{"agents": views})
}

func (s *Server) getAgent(w http.ResponseWriter, r *http.Request, a *agent) {
	writeJSON(w, http.StatusOK, a.view())
}

func (s *Server) deleteAgent(w http.ResponseWriter, r *http.Request, a *agent) {
	s.mu.Lock()
	delete(s.agents, a.id)
	for i, id := range s.order {
		if id == a.id {
			s.order = append(s.order[:i:i], s.order[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
	if err := a.close(); err != nil {
		s.log.Warn("close agent", "id", a.id, "err", err)
		writeError(w, err)
		return
	}
	s.log.Info("agent deleted", "id", a.id)
	w.WriteHeader(http.StatusNoContent)
}
