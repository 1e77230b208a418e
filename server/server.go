// Package server is sandbox-agent's HTTP API: agents, their turns (as one
// JSON result or a stream of server-sent events), commands, files,
// sessions and checkpoints, over the library, for clients in any
// language. It also serves the live web inspector. The routes are
// described in openapi.json and docs/api-http.md; both are checked against
// routePatterns in tests.
//
// The server owns the agents it started: Close destroys them. It names no
// container engine or driver itself: a Starter, supplied by the caller,
// turns a CreateRequest into a running agent.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
	"github.com/sandbox-agent/sandbox-agent/metering"
	"github.com/sandbox-agent/sandbox-agent/store"
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
	// OCIRuntime is the sandbox's OCI runtime (runsc: gVisor; a
	// RuntimeClass on Kubernetes): the server's own (oci_runtime), or one
	// of those its operator lets requests choose (serve_oci_runtimes), so
	// a request cannot loosen the operator's isolation.
	OCIRuntime string `json:"oci_runtime,omitempty"`
	// Disk is the sandbox's disk limit ("10g"; "none":
	// no limit), like the disk config key.
	Disk string `json:"disk,omitempty"`
	// Budget caps what the agent's model requests may use, in tokens
	// and/or US dollars (docs/metering.md); a turn past it fails with kind
	// budget_exceeded. It counts from the agent's start in this server
	// process (an adopted agent counts afresh).
	Budget *metering.Budget `json:"budget,omitempty"`
	// Checkpoint, when set, is the id of a checkpoint of the tenant's
	// (GET /v1/checkpoints) the agent starts on: its files and its CLI's
	// session. Its driver must be the request's; image must be empty.
	Checkpoint string `json:"checkpoint,omitempty"`
	// Repo, when set, is a git repository put in the sandbox's working
	// directory (sandboxagent.WithRepo); GET /v1/agents/{id}/changes
	// brings the agent's work home as a branch of it. Not with
	// Checkpoint.
	Repo *RepoRequest `json:"repo,omitempty"`
	// Endpoint, when set, is the agent's model endpoint instead of the
	// server's (the Starter's Driver builds the driver on it). Only the
	// admin token may send it; not with FakeModelScript. Its APIKey is
	// never stored.
	Endpoint *EndpointRequest `json:"endpoint,omitempty"`
	// Audit, when set, says whether the agent writes its audit trail
	// (sandboxagent.Config.AuditEnabled); nil: the server's setting.
	// Only the admin token may send it, as AuditRoot.
	Audit *bool `json:"audit,omitempty"`
	// AuditRoot, when set, is the agent's audit root folder on the
	// server's host (sandboxagent.Config.AuditRoot), an absolute path.
	AuditRoot string `json:"audit_root,omitempty"`
	// RepoDir is the host repository the Starter hands WithRepo: Repo's
	// path resolved under Options.RepoRoot, or the bare repository its
	// bundle was unpacked into. The server sets it; never read from a
	// request.
	RepoDir string `json:"-"`
	// RepoWithin is the folder the repository must stay in
	// (repo.Options.Within): the tenant's under Options.RepoRoot, or the
	// uploaded bundles'. The server sets it.
	RepoWithin string `json:"-"`
	// Tenant is whose agent it is: the server sets it for the Starter and
	// the Adopter (a tenant's budget); never read from a request.
	Tenant string `json:"-"`
	// From is the checkpoint Checkpoint names, as the server found it in
	// its store: the Starter starts the agent on it
	// (sandboxagent.StartFrom). Never read from a request.
	From *sandboxagent.Checkpoint `json:"-"`
}

// HasFakeModelScript says whether the request carries a fake-model
// script (a JSON null is none).
func (req CreateRequest) HasFakeModelScript() bool {
	return len(req.FakeModelScript) > 0 && string(req.FakeModelScript) != "null"
}

// Starter starts the agent req describes. stop, never nil on success,
// releases what the starter made beside the agent (a fake model); the
// server calls it after closing the agent. Errors wrapping
// sandboxagent.ErrInvalidArgument answer 400.
type Starter func(ctx context.Context, req CreateRequest) (ag *sandboxagent.Agent, stop func(), err error)

// Options configure a Server.
type Options struct {
	Start Starter
	// Adopt re-attaches to a stored agent's sandbox (Recover, and an agent
	// another replica started); nil: stored agents are reported lost.
	Adopt Adopter
	// Store keeps the agents, turns, events, tokens and idempotency keys;
	// required (store/sqlite, store/postgres).
	Store store.Store
	// Instance is the server's identity: the owner of the sandboxes it
	// starts (sandboxagent.WithOwner, through the Starter) and of the
	// turn leases it takes. Replicas sharing a store share it; default
	// "sandbox-agent".
	Instance string
	// Engine names the engine the Starter uses, as stored ("docker", ...).
	Engine string
	// Token is the admin's bearer token (every right over every tenant);
	// required. Tenants' tokens live in the Store (CreateToken).
	Token string
	// Limits; zero takes the defaults.
	MaxAgents          int
	MaxConcurrentTurns int
	MaxBodyBytes       int64
	// Per-tenant limits (the admin has none); zero: none.
	TenantMaxAgents int
	TenantMaxTurns  int
	// Exclusive says no other server uses the Store (a SQLite file the
	// caller locked): the server adopts every agent at Recover and keeps
	// them. Otherwise (replicas on one database) a request that needs an
	// agent's sandbox borrows it: the agent's lease in the store, the
	// sandbox adopted, and let go when the request ends.
	Exclusive bool
	// LeaseTTL is how long a turn's lease on its agent outlives a replica
	// that stopped renewing it; default 30s.
	LeaseTTL time.Duration
	Version  string
	Logger   *slog.Logger
	// Metrics, when set, serves GET /metrics to tokens with the metrics
	// scope (and the admin's): Prometheus' exposition (package
	// telemetry/prom); without it /metrics is a 404.
	Metrics http.Handler
	// Tracer, when set, makes a span of each request, continuing the
	// caller's trace (W3C traceparent); the agent's spans (the Starter's
	// hooks: telemetry/tracing) are its children.
	Tracer trace.Tracer
	// Checkpoints is the engine of the committed checkpoints (the
	// Starter's runtime, when it is a checkpoint.Engine: runtime/docker),
	// for their removal; nil on engines without commits (Kubernetes).
	Checkpoints checkpoint.Engine
	// CheckpointRoot is the folder of archived checkpoints (the Starter's
	// sandboxagent.Config.CheckpointRoot), for their removal.
	CheckpointRoot string
	// TenantCheckpointBytes caps the bytes of a tenant's checkpoints
	// (config key serve_tenant_checkpoint_bytes; the admin has none); 0:
	// none.
	TenantCheckpointBytes int64
	// RepoRoot is the folder under which a create request's repo.path
	// may name a repository of the server's host (config key
	// serve_repo_root); "": repo.path is refused.
	RepoRoot string
	// RepoDir is the folder of the bare repositories made of the
	// bundles create requests upload (repo.bundle), one per agent,
	// removed with it; "": repo.bundle is refused.
	RepoDir string
}

// Server is the HTTP API over the agents it owns.
type Server struct {
	opts  Options
	log   *slog.Logger
	mux   *http.ServeMux
	turns chan struct{} // one slot per running turn

	st     store.Store
	holder string // this process's name in turn leases

	mu         sync.Mutex
	agents     map[string]*agent      // attached here
	adopting   map[string]*sync.Mutex // one adoption per agent at a time
	borrows    map[string]*borrowed   // shared store: sandboxes borrowed here
	starting   int                    // creates under way (counted against MaxAgents)
	startingBy map[string]int         // per tenant
	turnsBy    map[string]int         // running turns per tenant
	closed     bool
	leaseHeld  map[string]time.Time // shared store: reap asks again after
	recovery   sync.WaitGroup       // Recover's adoptions
	// requests are the create requests of the agents started here, env
	// values included (the store keeps their names only), for their forks.
	requests map[string]CreateRequest

	// checkpointMu makes a tenant's checkpoint bytes checked and stored
	// at once (on this server: replicas may pass the cap together).
	checkpointMu sync.Mutex

	// Background work (housekeep), started once by Recover, ended by
	// stopAll.
	bgOnce   sync.Once
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup

	sessions *inspectorSessions
}

// New returns a server; Handler serves it and Close destroys its agents.
func New(opts Options) (*Server, error) {
	if opts.Start == nil {
		return nil, fmt.Errorf("%w: server: no Starter", sandboxagent.ErrInvalidArgument)
	}
	if opts.Store == nil {
		return nil, fmt.Errorf("%w: server: no Store", sandboxagent.ErrInvalidArgument)
	}
	if opts.Instance == "" {
		opts.Instance = "sandbox-agent"
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = defaultLeaseTTL
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
		st:       opts.Store, holder: opts.Instance + "/" + newID()[3:],
		adopting: map[string]*sync.Mutex{}, borrows: map[string]*borrowed{}, leaseHeld: map[string]time.Time{}, startingBy: map[string]int{}, turnsBy: map[string]int{},
		requests: map[string]CreateRequest{},
	}
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
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
		{"GET /metrics", s.metrics},
		{"GET /v1/openapi.json", s.openAPI},
		{"POST /v1/agents", s.createAgent},
		{"GET /v1/agents", s.listAgents},
		{"GET /v1/agents/{id}", s.withRecord(s.getAgent)},
		{"DELETE /v1/agents/{id}", s.withRecord(s.deleteAgent)},
		{"POST /v1/agents/{id}/turns", s.withRecord(s.postTurn)}, // borrows after its key
		{"GET /v1/agents/{id}/turns", s.withRecord(s.listTurns)},
		{"GET /v1/agents/{id}/turns/{n}", s.withRecord(s.getTurn)},
		{"GET /v1/agents/{id}/events", s.withRecord(s.watch)},
		{"POST /v1/agents/{id}/exec", s.withAgent(s.exec)},
		{"PUT /v1/agents/{id}/files", s.withAgent(s.putFiles)},
		{"GET /v1/agents/{id}/files", s.withAgent(s.getFiles)},
		{"GET /v1/agents/{id}/sessions", s.withIdleAgent(s.listSessions)},
		{"POST /v1/agents/{id}/sessions", s.withIdleAgent(s.loadSession)},
		{"GET /v1/agents/{id}/sessions/{sid}", s.withIdleAgent(s.dumpSession)},
		{"DELETE /v1/agents/{id}/sessions/{sid}", s.withIdleAgent(s.deleteSession)},
		{"POST /v1/agents/{id}/sessions/{sid}/fork", s.withIdleAgent(s.forkSession)},
		{"GET /v1/agents/{id}/sessions/{sid}/events", s.withRecord(s.sessionEvents)},
		{"PUT /v1/agents/{id}/session", s.withIdleAgent(s.setSession)},
		{"PUT /v1/agents/{id}/rules", s.withIdleAgent(s.putRules)},
		{"POST /v1/agents/{id}/skills", s.withIdleAgent(s.postSkill)},
		{"POST /v1/agents/{id}/checkpoints", s.withRecord(s.postCheckpoint)}, // holds the agent after the body
		{"POST /v1/agents/{id}/fork", s.withRecord(s.fork)},
		{"GET /v1/agents/{id}/changes", s.withIdleAgent(s.getChanges)},
		{"GET /v1/checkpoints", s.listCheckpoints},
		{"GET /v1/checkpoints/{id}", s.getCheckpoint},
		{"DELETE /v1/checkpoints/{id}", s.deleteCheckpoint},
		{"GET /{$}", s.inspector},
		{"GET /ui/{file}", s.asset},
		{"POST /login", s.login},
	}
}

// agentHandler serves a request about one agent, the one of its {id},
// with its stored record.
type agentHandler func(w http.ResponseWriter, r *http.Request, a *agent, rec store.Agent)

// withRecord finds the agent of the request's {id} (or answers 404); a
// lost agent too.
func (s *Server) withRecord(h agentHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a, rec := s.lookup(w, r); a != nil {
			h(w, r, a, rec)
		}
	}
}

// withAgent is withRecord for calls that need the sandbox (need).
func (s *Server) withAgent(h agentHandler) http.HandlerFunc {
	return s.withRecord(func(w http.ResponseWriter, r *http.Request, a *agent, rec store.Agent) {
		a, done, err := s.need(r.Context(), a, rec)
		if err != nil {
			writeError(w, err)
			return
		}
		defer done()
		h(w, r, a, rec)
	})
}

// need is the agent with its sandbox, for a call that uses it: a lost
// agent is a 410; on a shared store the sandbox is borrowed until done.
func (s *Server) need(ctx context.Context, a *agent, rec store.Agent) (*agent, func(), error) {
	done := func() {}
	if s.opts.Exclusive && a.ag == nil && a.lost == "" { // a read's agent, during Recover
		att, err := s.attach(ctx, rec)
		if err != nil {
			return nil, nil, err
		}
		a = att
	}
	if !s.opts.Exclusive && a.lost == "" {
		b, giveBack, err := s.borrow(ctx, rec)
		if err != nil {
			return nil, nil, err
		}
		a, done = b, giveBack
	}
	if a.ag == nil {
		done()
		return nil, nil, lostErr(a)
	}
	return a, done, nil
}

// withIdleAgent is withAgent for session calls, which run between turns
// (Agent.Hold).
func (s *Server) withIdleAgent(h agentHandler) http.HandlerFunc {
	return s.withAgent(func(w http.ResponseWriter, r *http.Request, a *agent, rec store.Agent) {
		// The library's turn lock, held for the call (r's context carries
		// the hold): a running turn is waited for idleWait, then 409.
		ctx, release, err := a.ag.Hold(r.Context(), idleWait)
		if err != nil {
			writeError(w, busy(a))
			return
		}
		defer release()
		h(w, r.WithContext(ctx), a, rec)
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
			p, err := s.authorize(r)
			if err != nil {
				if r.Method == http.MethodGet && r.URL.Path == "/" {
					s.loginPage(w)
					return
				}
				w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox-agent"`)
				writeError(w, err)
				return
			}
			if (strings.HasPrefix(r.URL.Path, "/v1/agents") || strings.HasPrefix(r.URL.Path, "/v1/checkpoints")) && !p.can(routeScope(r)) {
				writeError(w, forbidden(routeScope(r)))
				return
			}
			if r.URL.Path == "/metrics" && !p.can(ScopeMetrics) {
				writeError(w, forbidden(ScopeMetrics))
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
		}
		if s.opts.Tracer != nil {
			_, pattern := s.mux.Handler(r) // the route, not the path: no ids in span names
			if pattern == "" {
				pattern = r.Method + " (no route)"
			}
			ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			ctx, span := s.opts.Tracer.Start(ctx, pattern, trace.WithSpanKind(trace.SpanKindServer))
			defer span.End()
			r = r.WithContext(ctx)
		}
		s.mux.ServeHTTP(w, r)
	})
}

// authorize finds the request's principal: a bearer token (the admin
// token or one the store issued), or an inspector session's cookie on a
// request from the inspector's own origin (the inspector is the admin's).
func (s *Server) authorize(r *http.Request) (principal, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		tok = strings.TrimSpace(tok)
		if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
			return principal{}, errDenied
		}
		return s.authenticate(r.Context(), tok)
	}
	denied := &apiError{status: http.StatusUnauthorized, kind: KindUnauthorized, msg: "missing or wrong bearer token"}
	c, err := r.Cookie(sessionCookie)
	if err != nil || !s.sessions.valid(c.Value) {
		return principal{}, denied
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
		return principal{tenant: AdminTenant, scopes: []string{ScopeAdmin}}, nil
	}
	denied.msg = "the inspector's cookie is valid only on requests from its own pages"
	return principal{}, denied
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	n := len(s.agents) // attached here
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "agents": n, "version": s.opts.Version})
}

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIJSON)
}

// Close ends every running turn and destroys every agent attached here,
// and deletes them from the store; later creates fail. ctx bounds the
// wait.
func (s *Server) Close(ctx context.Context) error {
	return s.stopAll(ctx, true)
}

// Shutdown ends every running turn (recorded as interrupted) and lets go
// of the agents attached here without removing their sandboxes: a server
// started later on the same store adopts them (Recover). ctx bounds the
// wait.
func (s *Server) Shutdown(ctx context.Context) error {
	return s.stopAll(ctx, false)
}

func (s *Server) stopAll(ctx context.Context, remove bool) error {
	s.mu.Lock()
	s.closed = true
	all := make([]*agent, 0, len(s.agents))
	for _, a := range s.agents {
		all = append(all, a)
	}
	s.agents = map[string]*agent{}
	s.requests = map[string]CreateRequest{} // their env values: none kept past the server
	s.mu.Unlock()
	if s.bgCancel != nil {
		s.bgCancel()
	}
	var wg sync.WaitGroup
	wg.Go(s.recovery.Wait) // an adoption under way lets go of its agent (attach)
	wg.Go(s.bg.Wait)
	errs := make([]error, len(all))
	for i, a := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// An agent with a request's key cannot be adopted by a later
			// server (the key is never stored): it goes with this one.
			if !remove && (a.req.Endpoint == nil || !a.req.Endpoint.KeyDropped) {
				errs[i] = a.detach()
				return
			}
			if errs[i] = a.close(); errs[i] == nil {
				s.removeBundle(a.id)
				if err := s.st.DeleteAgent(context.WithoutCancel(ctx), a.id); err != nil && !errors.Is(err, store.ErrNotFound) {
					errs[i] = err
				}
			}
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

// metrics serves Options.Metrics.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	if s.opts.Metrics == nil {
		http.NotFound(w, r)
		return
	}
	s.opts.Metrics.ServeHTTP(w, r)
}

// Agents counts the agents attached to this server (live sandboxes it
// drives), for a metrics gauge.
func (s *Server) Agents() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.agents)
}
