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

// agent is one agent the server owns. Its turns, their records and its
// session are the library agent's; the server adds an id and the HTTP.
type agent struct {
	id      string
	driver  string
	model   string
	created time.Time
	ag      *sandboxagent.Agent
	stop    func()

	// gone ends with close: it aborts the running turn and ends the watch
	// streams.
	gone context.Context
	end  context.CancelFunc

	closeMu sync.Mutex
	closed  bool // the library agent is closed
	stopped bool // stop ran
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
	v := agentView{
		ID: a.id, Driver: a.driver, Model: a.model, Image: a.ag.Image(), SessionID: a.ag.SessionID(),
		Status: "idle", Created: a.created, Container: a.ag.Container().Name(),
	}
	if last, ok := a.lastTurn(); ok {
		v.Turns = last.Turn
		if last.Running {
			v.Status = "busy"
			if last.SessionID != "" {
				v.SessionID = last.SessionID // shown while the turn runs
			}
		}
	}
	return v
}

// lastTurn is the record of the agent's latest turn.
func (a *agent) lastTurn() (sandboxagent.TurnRecord, bool) {
	turns := a.ag.Turns()
	if len(turns) == 0 {
		return sandboxagent.TurnRecord{}, false
	}
	return turns[len(turns)-1], true
}

// idleWait is how long a session call waits for a turn to end before it
// answers 409: long enough for the moment between a turn's end and its
// answer, short enough not to hang a client behind a long turn.
const idleWait = 2 * time.Second

func busy(a *agent) error {
	return &apiError{status: http.StatusConflict, kind: KindBusy, msg: "a turn is running on agent " + a.id}
}

// close ends a running turn and the watch streams and destroys the
// sandbox. It can be called again after a failure (the library retries
// the removal).
func (a *agent) close() error {
	a.end()
	a.closeMu.Lock()
	defer a.closeMu.Unlock()
	if a.closed {
		return nil
	}
	err := a.ag.Close()
	if !a.stopped {
		// The agent is being deleted either way: what it started beside
		// (the fake model) goes now, not only once a removal succeeds.
		a.stopped = true
		a.stop()
	}
	if err != nil {
		return err
	}
	a.closed = true
	return nil
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
	a := &agent{id: newID(), driver: req.Driver, model: req.Model, created: time.Now().UTC(), ag: ag, stop: stop}
	a.gone, a.end = context.WithCancel(context.Background())
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
	// Closed first: an agent whose close failed stays listed, and DELETE
	// can be tried again.
	if err := a.close(); err != nil {
		s.log.Warn("close agent", "id", a.id, "err", err)
		writeError(w, err)
		return
	}
	s.mu.Lock()
	if s.agents[a.id] == a {
		delete(s.agents, a.id)
		for i, id := range s.order {
			if id == a.id {
				s.order = append(s.order[:i:i], s.order[i+1:]...)
				break
			}
		}
	}
	s.mu.Unlock()
	s.log.Info("agent deleted", "id", a.id)
	w.WriteHeader(http.StatusNoContent)
}
