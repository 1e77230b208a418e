// Package server is sandbox-agent's HTTP API: agents, their turns (as one
// JSON result or a stream of server-sent events), commands, files and
// sessions, over the library, for clients in any language. It also serves
// the live web inspector. The routes are described in openapi.json and
// docs/api-http.md; both are checked against routePatterns in tests.
//
// The server owns the agents it started: Close destroys them. It names no
// container engine or driver itself: a Starter, supplied by the caller,
// turns a CreateRequest into a running agent.
package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// Defaults of the limits (config keys serve_max_agents,
// serve_max_concurrent_turns, serve_max_body_bytes).
const (
	DefaultMaxAgents          = 64
	DefaultMaxConcurrentTurns = 32
	DefaultMaxBodyBytes       = 64 << 20
)

// maxJSONBytes bounds a JSON request body below MaxBodyBytes (a session
// dump is the largest: its files travel base64-encoded).
const maxJSONBytes = 32 << 20

// CreateRequest is the body of POST /v1/agents. Field names are a public
// interface.
type CreateRequest struct {
	Driver string `json:"driver"`
	Model  string `json:"model,omitempty"`
	Image  string `json:"image,omitempty"`
	// FakeModelScript, when set, is a fake-model script (the fakemodel
	// format, as a JSON object): the agent talks to a fake model of its
	// own and needs no key.
	FakeModelScript json.RawMessage   `json:"fake_model_script,omitempty"`
	Egress          string            `json:"egress,omitempty"`
	AllowHosts      []string          `json:"allow_hosts,omitempty"`
	Env             map[string]string `json:"env,omitempty"`
	// Keepalive is in seconds.
	Keepalive float64 `json:"keepalive,omitempty"`
	Memory    string  `json:"memory,omitempty"`
	Pids      int64   `json:"pids,omitempty"`
}

// Starter starts the agent req describes. stop, never nil on success,
// releases what the starter made beside the agent (a fake model); the
// server calls it after closing the agent. Errors wrapping
// sandboxagent.ErrInvalidArgument answer 400.
type Starter func(ctx context.Context, req CreateRequest) (ag *sandboxagent.Agent, stop func(), err error)

// Options configure a Server.
type Options struct {
	Start Starter
	// Token is the bearer token every request must carry; required.
	Token string
	// Limits; zero takes the defaults.
	MaxAgents          int
	MaxConcurrentTurns int
	MaxBodyBytes       int64
	Version            string
	Logger             *slog.Logger
}

// Server is the HTTP API over the agents it owns.
type Server struct {
	opts  Options
	log   *slog.Logger
	mux   *http.ServeMux
	turns chan struct{} // one slot per running turn

	mu       sync.Mutex
	agents   map[string]*agent
	order    []string // creation order, for listings
	starting int      // creates under way (counted against MaxAgents)
	closed   bool

	sessions *inspectorSessions
}

// New returns a server; Handler serves it and Close destroys its agents.
func New(opts Options) (*Server, error) {
	if opts.Start == nil {
		return nil, fmt.Errorf("%w: server: no Starter", sandboxagent.ErrInvalidArgument)
	}
	if len(opts.Token) < 16 {
		return nil, fmt.Errorf("%w: server: the token must have at least 16 characters", sandboxagent.ErrInvalidArgument)
	}
	if opts.MaxAgents <= 0 {
		opts.MaxAgents = DefaultMaxAgents
	}
	if opts.MaxConcurrentTurns <= 0 {
		opts.MaxConcurrentTurns = DefaultMaxConcurrentTurns
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		opts:     opts,
		log:      opts.Logger,
		turns:    make(chan struct{}, opts.MaxConcurrentTurns),
		agents:   map[string]*agent{},
		sessions: &inspectorSessions{byID: map[string]time.Time{}},
	}
	s.mux = http.NewServeMux()
	for _, r := range s.routes() {
		s.mux.HandleFunc(r.pattern, r.handler)
	}
	return s, nil
}

type route struct {
	pattern string
	handler http.HandlerFunc
}

// routes is the API; openapi.json must describe exactly these patterns.
func (s *Server) routes() []route {
	return []route{
		{"GET /v1/health", s.health},
		{"GET /v1/openapi.json", s.openAPI},
		{"POST /v1/agents", s.createAgent},
		{"GET /v1/agents", s.listAgents},
		{"GET /v1/agents/{id}", s.withAgent(s.getAgent)},
		{"DELETE /v1/agents/{id}", s.withAgent(s.deleteAgent)},
		{"POST /v1/agents/{id}/turns", s.withAgent(s.postTurn)},
		{"GET /v1/agents/{id}/turns", s.withAgent(s.listTurns)},
		{"GET /v1/agents/{id}/turns/{n}", s.withAgent(s.getTurn)},
		{"GET /v1/agents/{id}/events", s.withAgent(s.watch)},
		{"POST /v1/agents/{id}/exec", s.withAgent(s.exec)},
		{"PUT /v1/agents/{id}/files", s.withAgent(s.putFiles)},
		{"GET /v1/agents/{id}/files", s.withAgent(s.getFiles)},
		{"GET /v1/agents/{id}/sessions", s.withIdleAgent(s.listSessions)},
		{"POST /v1/agents/{id}/sessions", s.withIdleAgent(s.loadSession)},
		{"GET /v1/agents/{id}/sessions/{sid}", s.withIdleAgent(s.dumpSession)},
		{"DELETE /v1/agents/{id}/sessions/{sid}", s.withIdleAgent(s.deleteSession)},
		{"POST /v1/agents/{id}/sessions/{sid}/fork", s.withIdleAgent(s.forkSession)},
		{"GET /v1/agents/{id}/sessions/{sid}/events", s.withAgent(s.sessionEvents)},
		{"PUT /v1/agents/{id}/session", s.withIdleAgent(s.setSession)},
		{"GET /{$}", s.inspector},
		{"GET /ui/{file}", s.asset},
		{"POST /login", s.login},
	}
}

// agentHandler serves a request about one agent, the one of its {id}.
type agentHandler func(w http.ResponseWriter, r *http.Request, a *agent)

// withAgent finds the agent of the request's {id} (or answers 404).
func (s *Server) withAgent(h agentHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a := s.lookup(w, r); a != nil {
			h(w, r, a)
		}
	}
}

// withIdleAgent is withAgent for session calls, which run between turns
// (Agent.Hold).
func (s *Server) withIdleAgent(h agentHandler) http.HandlerFunc {
	return s.withAgent(func(w http.ResponseWriter, r *http.Request, a *agent) {
		// The library's turn lock, held for the call (r's context carries
		// the hold): a running turn is waited for idleWait, then 409.
		ctx, release, err := a.ag.Hold(r.Context(), idleWait)
		if err != nil {
			writeError(w, busy(a))
			return
		}
		defer release()
		h(w, r.WithContext(ctx), a)
	})
}

// routePatterns lists the routes' ServeMux patterns.
func routePatterns() []string {
	s := &Server{}
	var out []string
	for _, r := range s.routes() {
		out = append(out, r.pattern)
	}
	return out
}

// Handler is the API with authentication and body limits.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if r.URL.Path != "/login" {
			if err := s.authorize(r); err != nil {
				if r.Method == http.MethodGet && r.URL.Path == "/" {
					s.loginPage(w)
					return
				}
				w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox-agent"`)
				writeError(w, err)
				return
			}
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
		}
		s.mux.ServeHTTP(w, r)
	})
}

// authorize accepts the bearer token, or an inspector session's cookie
// on a request from the inspector's own origin.
func (s *Server) authorize(r *http.Request) error {
	denied := &apiError{status: http.StatusUnauthorized, kind: KindUnauthorized, msg: "missing or wrong bearer token"}
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		tok = strings.TrimSpace(tok)
		if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(s.opts.Token)) != 1 {
			return denied
		}
		return nil
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil || !s.sessions.valid(c.Value) {
		return denied
	}
	// Browsers send a cookie to every port of a host (SameSite ignores
	// ports), so a page served elsewhere on 127.0.0.1 could ride it:
	// only the inspector's own origin may use it.
	site := r.Header.Get("Sec-Fetch-Site")
	origin := r.Header.Get("Origin")
	self := "http://" + r.Host
	if r.TLS != nil {
		self = "https://" + r.Host
	}
	switch {
	case site == "cross-site" || site == "same-site":
	case origin != "" && origin != self:
	case r.Method != http.MethodGet && r.Method != http.MethodHead && site != "same-origin" && origin != self:
	default:
		return nil
	}
	denied.msg = "the inspector's cookie is valid only on requests from its own pages"
	return denied
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	n := len(s.agents)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "agents": n, "version": s.opts.Version})
}

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIJSON)
}

// Close ends every running turn and destroys every agent the server owns;
// later creates fail. ctx bounds the wait.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	all := make([]*agent, 0, len(s.agents))
	for _, id := range s.order {
		all = append(all, s.agents[id])
	}
	s.agents = map[string]*agent{}
	s.order = nil
	s.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(all))
	for i, a := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = a.close()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return errors.Join(errs...)
	case <-ctx.Done():
		return fmt.Errorf("server: closing %d agents: %w", len(all), ctx.Err())
	}
}

// decode reads a JSON body into v: one object, no unknown fields.
func decode(r *http.Request, v any) error {
	if r.Body == nil {
		return badRequest("empty body")
	}
	body := http.MaxBytesReader(nil, r.Body, maxJSONBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &apiError{status: http.StatusRequestEntityTooLarge, kind: KindTooLarge, msg: fmt.Sprintf("request body over %d bytes", mbe.Limit)}
		}
		return badRequest("body: %v", err)
	}
	if dec.More() {
		return badRequest("body: more than one JSON value")
	}
	return nil
}

// seconds turns a JSON number of seconds into a duration.
func seconds(field string, v float64) (time.Duration, error) {
	if v < 0 || v > 7*24*3600 {
		return 0, badRequest("%s: %v seconds is out of range (0 to 604800)", field, v)
	}
	return time.Duration(v * float64(time.Second)), nil
}
