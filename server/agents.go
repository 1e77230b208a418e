package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/store"
)

// agent is one agent of the server, attached here: its library agent
// runs its turns, its journal writes their messages to the store. An
// agent whose sandbox is gone has no library agent, only a reason.
type agent struct {
	id      string
	tenant  string
	driver  string
	model   string
	created time.Time
	req     CreateRequest // as stored: env values left out

	ag        *sandboxagent.Agent // nil when lost, or not borrowed here (shared store)
	lost      string              // why the sandbox is gone
	stop      func()
	j         *journal
	unobserve func()

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
	Tenant    string    `json:"tenant"`
	Driver    string    `json:"driver"`
	Model     string    `json:"model,omitempty"`
	Image     string    `json:"image"`
	SessionID string    `json:"session_id"`
	Status    string    `json:"status"` // idle, busy or lost
	Reason    string    `json:"reason,omitempty"`
	Created   time.Time `json:"created"`
	Turns     int       `json:"turns"`
	Container string    `json:"container"`
}

// Agent statuses (agentView.Status, the store's Agent.Status).
const (
	statusIdle = "idle"
	statusBusy = "busy"
	statusLost = "lost"
)

// storedView is the view of an agent from its stored record.
func storedView(r store.Agent) agentView {
	return agentView{
		ID: r.ID, Tenant: r.Tenant, Driver: r.Driver, Model: r.Model, Image: r.Image, SessionID: r.SessionID,
		Status: r.Status, Reason: r.Reason, Created: r.Created, Turns: r.Turns, Container: r.SandboxName,
	}
}

// view is the agent as it is now: its record, with the live state of a
// turn running here.
func (a *agent) view(r store.Agent) agentView {
	v := storedView(r)
	if a == nil || a.ag == nil {
		return v
	}
	v.Image, v.Container = a.ag.State().Image, a.ag.Container().Name()
	v.SessionID, v.Status = a.ag.SessionID(), statusIdle
	if last, ok := a.lastTurn(); ok {
		v.Turns = max(v.Turns, last.Turn)
		if last.Running {
			v.Status = statusBusy
			if last.SessionID != "" {
				v.SessionID = last.SessionID // shown while the turn runs
			}
		}
	}
	return v
}

// lastTurn is the record of the agent's latest turn here.
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

func lostErr(a *agent) error {
	return &apiError{status: http.StatusGone, kind: KindLost, msg: fmt.Sprintf("agent %s is lost: %s (DELETE it)", a.id, a.lost)}
}

// close ends a running turn and the watch streams and destroys the
// sandbox. It can be called again after a failure (the library retries
// the removal).
func (a *agent) close() error {
	return a.release(true)
}

// detach ends a running turn and the watch streams and lets go of the
// sandbox without removing it: a server started later on the same state
// adopts it.
func (a *agent) detach() error {
	return a.release(false)
}

func (a *agent) release(remove bool) error {
	a.end()
	if a.ag != nil {
		// The running turn (cancelled by end) records its end before the
		// journal closes: the turn's lock is free once it has.
		if _, rel, err := a.ag.Hold(context.Background(), 10*time.Second); err == nil {
			rel()
		}
	}
	a.closeMu.Lock()
	defer a.closeMu.Unlock()
	if a.closed {
		return nil
	}
	var err error
	if a.ag != nil {
		if remove {
			err = a.ag.Close()
		} else {
			err = a.ag.Detach()
		}
	}
	if !a.stopped {
		// What the agent started beside (the fake model) goes now, not
		// only once a removal succeeds.
		a.stopped = true
		if a.unobserve != nil {
			a.unobserve()
		}
		if a.stop != nil {
			a.stop()
		}
	}
	if err != nil {
		return err
	}
	if a.j != nil {
		a.j.close()
	}
	a.closed = true
	return nil
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "ag_" + hex.EncodeToString(b)
}

// stored is the create request as the store keeps it: env values can be
// secrets and are not needed to adopt the sandbox (its environment is
// set), so only their names stay; an endpoint's key is a secret too, and
// goes (KeyDropped says there was one).
func stored(req CreateRequest) CreateRequest {
	if req.Endpoint != nil && req.Endpoint.APIKey != "" {
		ep := *req.Endpoint
		ep.APIKey, ep.KeyDropped = "", true
		req.Endpoint = &ep
	}
	if len(req.Env) > 0 {
		env := make(map[string]string, len(req.Env))
		for k := range req.Env {
			env[k] = ""
		}
		req.Env = env
	}
	if req.Repo != nil && len(req.Repo.Bundle) > 0 {
		rr := *req.Repo
		rr.Bundle = nil // in its bare repository (RepoDir)
		req.Repo = &rr
	}
	return req
}

// newAgent wraps a running library agent: its journal starts after
// lastSeq.
func (s *Server) newAgent(id, tenant string, req CreateRequest, created time.Time, ag *sandboxagent.Agent, stop func(), lastSeq int64) *agent {
	a := &agent{id: id, tenant: tenant, driver: req.Driver, model: req.Model, created: created, req: stored(req), ag: ag, stop: stop}
	a.gone, a.end = context.WithCancel(context.Background())
	if ag != nil {
		a.j = newJournal(s.st, id, lastSeq, s.log)
		a.unobserve = a.j.observe(ag)
	}
	return a
}

// record is the agent's row in the store as of now.
func (s *Server) record(a *agent, status string) (store.Agent, error) {
	reqJSON, err := json.Marshal(a.req)
	if err != nil {
		return store.Agent{}, err
	}
	r := store.Agent{
		ID: a.id, Tenant: a.tenant, Request: reqJSON, Driver: a.driver, Model: a.model,
		Engine: s.opts.Engine, Status: status, Reason: a.lost, Owner: s.holder, Created: a.created, Updated: time.Now().UTC(),
	}
	if a.ag != nil {
		st := a.ag.State()
		if r.Adopt, err = json.Marshal(st); err != nil {
			return store.Agent{}, err
		}
		r.Image, r.SandboxID, r.SandboxName, r.SessionID, r.Turns = a.ag.State().Image, a.ag.Container().ID(), a.ag.Container().Name(), st.Session, st.Turns
	}
	return r, nil
}

// save writes the agent's row (after a turn, a session change).
func (s *Server) save(ctx context.Context, a *agent, status string) error {
	r, err := s.record(a, status)
	if err != nil {
		return fmt.Errorf("save agent %s: %w", a.id, err)
	}
	if err := s.st.UpdateAgent(context.WithoutCancel(ctx), r); err != nil {
		s.log.Warn("save agent", "id", a.id, "err", err)
		return fmt.Errorf("save agent %s: %w", a.id, err)
	}
	return nil
}

func (s *Server) createAgent(w http.ResponseWriter, r *http.Request) {
	p := who(r)
	var req CreateRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	req.Tenant = p.tenant
	if req.Driver == "" {
		writeError(w, badRequest("driver: required"))
		return
	}
	if req.Image != "" && namesCheckpointImage(req.Image) {
		// A checkpoint is started through its record (checkpoint), which
		// is the tenant's: its image, named here, would be anyone's.
		writeError(w, badRequest("image %q: a checkpoint's image, or an image id or digest, is not a request's image; start on a checkpoint with the checkpoint field", req.Image))
		return
	}
	if _, err := seconds("keepalive", req.Keepalive); err != nil {
		writeError(w, err)
		return
	}
	if err := s.checkAdminFields(p, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := s.checkRepo(&req); err != nil {
		writeError(w, err)
		return
	}
	key, err := idempotencyKey(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if key != "" {
		claim, mine, err := s.claim(r.Context(), p.tenant, key, "create_agent")
		if err != nil {
			writeError(w, err)
			return
		}
		if !mine {
			s.replayCreate(w, r, claim)
			return
		}
	}
	done := false
	defer func() {
		if key != "" && !done {
			s.unclaim(p.tenant, key)
		}
	}()
	if req.Checkpoint != "" {
		c, err := s.checkpointFor(r.Context(), p, req)
		if err != nil {
			writeError(w, err)
			return
		}
		req.From = &c
		if req.Model == "" {
			req.Model = c.Model // the record and the view show it
		}
	}
	ad, err := s.admit(r.Context(), p.tenant, 1)
	if err != nil {
		writeError(w, err)
		return
	}
	defer ad.release()
	a, rec, err := s.launch(r.Context(), req, ad)
	if err != nil {
		writeError(w, err)
		return
	}
	views, err := s.settle(r.Context(), []*agent{a}, []store.Agent{rec})
	if err != nil {
		writeError(w, err)
		return
	}
	if key != "" {
		if err := s.st.SetIdempotencyRef(context.WithoutCancel(r.Context()), p.tenant, key, a.id); err != nil {
			s.log.Warn("idempotency key", "agent", a.id, "err", err)
		}
	}
	done = true
	writeJSON(w, http.StatusCreated, views[0])
}

// namesCheckpointImage says whether an image reference could name a
// checkpoint's committed image: its repository is
// sandboxagent.CheckpointRepo (in any case, with Docker Hub's or Podman's
// local prefixes, any tag or digest), or it is an image id or digest
// ("sha256:...", bare hex), which the engine looks up as such.
func namesCheckpointImage(ref string) bool {
	r := strings.ToLower(strings.TrimSpace(ref))
	if strings.HasPrefix(r, "sha256:") || r != "" && strings.Trim(r, "0123456789abcdef") == "" {
		return true
	}
	if i := strings.IndexByte(r, '@'); i >= 0 {
		r = r[:i]
	}
	if i := strings.LastIndexByte(r, ':'); i > strings.LastIndexByte(r, '/') {
		r = r[:i]
	}
	for again := true; again; {
		again = false
		for _, p := range []string{"docker.io/", "index.docker.io/", "registry-1.docker.io/", "library/", "localhost/"} {
			if strings.HasPrefix(r, p) {
				r, again = r[len(p):], true
			}
		}
	}
	return r == sandboxagent.CheckpointRepo
}

// launch starts the agent of req, admitted by ad, and stores its row. The
// caller settles it (or discards it).
func (s *Server) launch(ctx context.Context, req CreateRequest, ad *admission) (*agent, store.Agent, error) {
	id := newID()
	dropRepo, err := s.prepareRepo(ctx, id, &req)
	if err != nil {
		return nil, store.Agent{}, err
	}
	req.Repo = stored(req).Repo // the bundle is in RepoDir now
	ag, stop, err := s.opts.Start(ctx, req)
	if err != nil {
		dropRepo()
		s.log.Warn("create agent", "driver", req.Driver, "err", err)
		return nil, store.Agent{}, s.startErr(req.From, err)
	}
	a := s.newAgent(id, req.Tenant, req, time.Now().UTC(), ag, stop, 0)
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		if a.close() == nil {
			dropRepo()
		}
		return nil, store.Agent{}, &apiError{status: http.StatusServiceUnavailable, kind: KindInterrupted, msg: "the server is shutting down", retryAfter: 5}
	}
	rec, err := s.record(a, statusIdle)
	if err == nil {
		err = s.st.CreateAgent(context.WithoutCancel(ctx), rec)
	}
	if err != nil {
		// Not stored: a restarted server would not know it, so it goes.
		if a.close() == nil {
			dropRepo()
		}
		s.log.Warn("store agent", "err", err)
		return nil, store.Agent{}, fmt.Errorf("store the agent: %w", err)
	}
	ad.done(1)
	s.mu.Lock()
	s.requests[a.id] = req
	s.mu.Unlock()
	return a, rec, nil
}

// settle makes launched agents the server's and returns their views:
// held here (an exclusive store), or let go for any replica to borrow.
// All or none: a server closed since they started discards them (503).
func (s *Server) settle(ctx context.Context, agents []*agent, recs []store.Agent) ([]agentView, error) {
	views := make([]agentView, len(agents))
	for i, a := range agents {
		views[i] = a.view(recs[i])
	}
	if s.opts.Exclusive {
		s.mu.Lock()
		closed := s.closed
		if !closed {
			for _, a := range agents {
				s.agents[a.id] = a
			}
		}
		s.mu.Unlock()
		if closed { // stopAll has run: nobody would close them
			err := error(&apiError{status: http.StatusServiceUnavailable, kind: KindInterrupted, msg: "the server is shutting down", retryAfter: 5})
			if cleanup := s.discardAll(ctx, agents); cleanup != nil {
				err = &cleanupError{err: err, cleanup: cleanup}
			}
			return nil, err
		}
	}
	for _, a := range agents {
		container := ""
		if a.ag != nil {
			container = a.ag.Container().Name()
		}
		s.log.Info("agent started", "id", a.id, "tenant", a.tenant, "driver", a.driver, "container", container)
		if !s.opts.Exclusive {
			if err := a.detach(); err != nil {
				// Shared: any replica borrows it when a request needs it.
				s.log.Warn("detach agent", "id", a.id, "err", err)
			}
		}
	}
	return views, nil
}

// discard removes a launched agent that is not settled: its sandbox and
// its row.
func (s *Server) discard(ctx context.Context, a *agent) error {
	err := a.close()
	if err == nil {
		if err = s.st.DeleteAgent(context.WithoutCancel(ctx), a.id); errors.Is(err, store.ErrNotFound) {
			err = nil
		}
	}
	s.forgetRequest(a.id)
	if err == nil {
		s.removeBundle(a.id)
	}
	if err != nil {
		s.log.Warn("discard agent", "id", a.id, "err", err)
	}
	return err
}

// admission is creates counted against the server's and the tenant's
// limits (admit) until their rows are stored (done) or they fail
// (release): the tenant's limit counts rows.
type admission struct {
	s      *Server
	tenant string
	mu     sync.Mutex
	n      int // still counted as starting
}

// done stops counting k of the admitted creates as starting.
func (ad *admission) done(k int) {
	ad.mu.Lock()
	k = min(k, ad.n)
	ad.n -= k
	ad.mu.Unlock()
	if k <= 0 {
		return
	}
	s := ad.s
	s.mu.Lock()
	s.starting -= k
	if s.startingBy[ad.tenant] -= k; s.startingBy[ad.tenant] <= 0 {
		delete(s.startingBy, ad.tenant)
	}
	s.mu.Unlock()
}

// release stops counting the creates not done.
func (ad *admission) release() { ad.done(math.MaxInt) }

// admit counts n creates against the server's and the tenant's limits,
// all or none, or answers 429 (503 when shutting down).
func (s *Server) admit(ctx context.Context, tenant string, n int) (*admission, error) {
	// Counted in the store: on a shared one, agents another replica made
	// (or that no replica holds now) count too.
	all, err := s.st.ListAgents(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("count agents: %w", err)
	}
	var stored []store.Agent
	for _, a := range all {
		if a.Tenant == tenant {
			stored = append(stored, a)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	total := len(all) + s.starting
	switch {
	case s.closed:
		return nil, &apiError{status: http.StatusServiceUnavailable, kind: KindInterrupted, msg: "the server is shutting down", retryAfter: 5}
	case total+n > s.opts.MaxAgents:
		return nil, limited("serve_max_agents reached: delete an agent first")
	case tenant != AdminTenant && s.opts.TenantMaxAgents > 0 && len(stored)+s.startingBy[tenant]+n > s.opts.TenantMaxAgents:
		return nil, limited("serve_tenant_max_agents (%d) reached for tenant %s: delete an agent first", s.opts.TenantMaxAgents, tenant)
	}
	s.starting += n
	s.startingBy[tenant] += n
	return &admission{s: s, tenant: tenant, n: n}, nil
}

// lookup finds the request's {id} among the agents the principal may
// see, or answers 404 (the same for another tenant's: no oracle).
func (s *Server) lookup(w http.ResponseWriter, r *http.Request) (*agent, store.Agent) {
	id := r.PathValue("id")
	rec, err := s.st.GetAgent(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) || err == nil && !who(r).owns(rec.Tenant) {
		writeError(w, notFound("no agent %q", id))
		return nil, store.Agent{}
	}
	if err != nil {
		writeError(w, fmt.Errorf("find agent: %w", err))
		return nil, store.Agent{}
	}
	if !s.opts.Exclusive {
		// Shared: reading needs no sandbox; withAgent borrows it.
		if r.Method == http.MethodGet {
			rec = s.reap(r.Context(), rec)
		}
		return s.peek(rec), rec
	}
	if r.Method == http.MethodGet {
		s.mu.Lock()
		a := s.agents[rec.ID]
		s.mu.Unlock()
		if a == nil {
			// Not adopted yet (Recover's under way, or it failed and a
			// call that needs the sandbox tries again): reads need none.
			return s.peek(rec), rec
		}
	}
	a, err := s.attach(r.Context(), rec)
	if err != nil {
		writeError(w, err)
		return nil, store.Agent{}
	}
	return a, rec
}

func (s *Server) listAgents(w http.ResponseWriter, r *http.Request) {
	p := who(r)
	tenant := p.tenant
	if p.admin() {
		tenant = ""
	}
	recs, err := s.st.ListAgents(r.Context(), tenant)
	if err != nil {
		writeError(w, fmt.Errorf("list agents: %w", err))
		return
	}
	views := make([]agentView, 0, len(recs))
	s.mu.Lock()
	for _, rec := range recs {
		views = append(views, s.agents[rec.ID].view(rec))
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"agents": views})
}

func (s *Server) getAgent(w http.ResponseWriter, r *http.Request, a *agent, rec store.Agent) {
	writeJSON(w, http.StatusOK, a.view(rec))
}

func (s *Server) deleteAgent(w http.ResponseWriter, r *http.Request, a *agent, rec store.Agent) {
	if a.ag == nil && a.lost == "" { // shared: the sandbox is borrowed to be removed
		b, done, err := s.borrow(r.Context(), rec)
		if err != nil {
			writeError(w, err)
			return
		}
		defer done()
		a = b
	}
	// Closed first: an agent whose close failed stays listed, and DELETE
	// can be tried again.
	if err := a.close(); err != nil {
		s.log.Warn("close agent", "id", a.id, "err", err)
		writeError(w, err)
		return
	}
	if err := s.st.DeleteAgent(context.WithoutCancel(r.Context()), a.id); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("delete agent", "id", a.id, "err", err)
		writeError(w, fmt.Errorf("delete agent: %w", err))
		return
	}
	s.mu.Lock()
	if s.agents[a.id] == a {
		delete(s.agents, a.id)
	}
	delete(s.requests, a.id)
	s.mu.Unlock()
	s.removeBundle(a.id)
	s.log.Info("agent deleted", "id", a.id)
	w.WriteHeader(http.StatusNoContent)
}
