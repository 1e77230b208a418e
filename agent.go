package sandboxagent

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-agent/sandbox-agent/audit"
	"github.com/sandbox-agent/sandbox-agent/egressproxy"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
	"github.com/sandbox-agent/sandbox-agent/internal/boundary"
	"github.com/sandbox-agent/sandbox-agent/internal/cliproc"
	"github.com/sandbox-agent/sandbox-agent/internal/labels"
	"github.com/sandbox-agent/sandbox-agent/internal/lazyre"
	"github.com/sandbox-agent/sandbox-agent/metering"
	"github.com/sandbox-agent/sandbox-agent/modelproxy"
	"github.com/sandbox-agent/sandbox-agent/repo"
	"github.com/sandbox-agent/sandbox-agent/telemetry"
	"github.com/sandbox-agent/sandbox-agent/trajectory"
)

// unknownSessionPrefix starts the session id of a turn whose CLI never
// named its session.
const unknownSessionPrefix = "unknown-"

// Agent is one agent CLI living in one sandbox, driven turn by turn.
// Methods may be called from several goroutines; turns run one at a time.
type Agent struct {
	drv   Driver
	sb    *Sandbox
	image string
	model string
	cfg   Config
	opts  agentOptions // as started, for Fork
	audit bool
	log   *slog.Logger

	srv atomic.Pointer[cliproc.Proc] // the long-lived CLI process (LongLived drivers)
	// modelSvc is the sandbox's model service (nil without the model
	// proxy): the proxy, or Warm's own fake model during a warm-up turn.
	modelSvc *modelSwitch
	// warmed is the process Warm made ready and the sandbox's file
	// writes then, until the first turn takes it.
	warmed atomic.Pointer[warmMark]

	proxy   *modelproxy.Proxy                 // nil when the CLI holds its own key (EgressOpen, unroutable driver)
	router  ModelRouter                       // the unrouted driver, with proxy
	token   string                            // the proxy's token (State)
	baseURL string                            // the proxy as the CLI reaches it (State)
	rec     atomic.Pointer[trajectory.Record] // the running turn's, for the proxy's tap
	net     *audit.Network
	started time.Time // the network audit's date (State)

	secrets []string // the driver's own and the routed copy's: redacted everywhere

	meter *metering.Meter // counts the model proxy's requests
	hooks telemetry.Hooks
	repo  *repo.Repo // WithRepo's

	turnCtx    atomic.Pointer[context.Context] // the running (or last) turn's: the model requests' hook
	deniedMu   sync.Mutex                      // guards the four below: egress denials and usage wait here for the turn
	inTurn     bool
	denied     []Event
	turnSpent  metering.Spent // the running turn's model requests
	turnBudget string         // why the proxy refused a request of the running turn ("": it did not)

	// lock is the turn lock (a one-slot semaphore, so a wait can end with
	// its context): held by a turn or a session call. The fields below it
	// belong to its holder.
	lock     chan struct{}
	sessions map[string]*sessionState
	auditDay audit.Day
	adopted  bool // Adopt made it: sessions may have an audit of the dead host's

	mu         sync.Mutex // guards the three below
	turns      int        // started (changed by the turn lock's holder)
	session    string
	sessionSet int // SetSession calls, so a turn's end does not undo one made meanwhile

	recMu     sync.Mutex // guards the turn records and their observers
	records   []*turnRecord
	observers map[int]func(TurnRecord, *Event)
	nextObs   int
}

type agentOptions struct {
	image, model, workdir, network string
	egress                         Egress
	allowHosts                     []string
	allowSet                       bool
	cfg                            *Config
	audit                          *bool
	logger                         *slog.Logger
	env                            map[string]string
	memoryBytes, pids              int64
	owner                          string
	sandbox                        func(*SandboxOptions)
	meter                          *metering.Meter
	hooks                          telemetry.Hooks
	repoDir                        string // WithRepo
	repo                           repo.Options
}

// AgentOption configures Start.
type AgentOption func(*agentOptions)

// WithModel sets the model the CLI uses (in the CLI's own naming).
func WithModel(m string) AgentOption { return func(o *agentOptions) { o.model = m } }

// WithImage overrides the image (highest precedence).
func WithImage(img string) AgentOption { return func(o *agentOptions) { o.image = img } }

// WithConfig supplies the configuration (default: DefaultConfig()).
func WithConfig(c Config) AgentOption { return func(o *agentOptions) { o.cfg = &c } }

// WithAudit switches the audit trail on or off for this agent.
func WithAudit(on bool) AgentOption { return func(o *agentOptions) { o.audit = &on } }

// WithLogger receives warnings (audit write failures); default slog.Default().
func WithLogger(l *slog.Logger) AgentOption { return func(o *agentOptions) { o.logger = l } }

// WithNetwork overrides the engine network mode the egress policy implies
// ("host" or a network name: an explicit loosening, see SandboxOptions).
func WithNetwork(mode string) AgentOption { return func(o *agentOptions) { o.network = mode } }

// WithEgress sets the network policy (default: Config.Egress, else
// EgressModel) and the hosts reachable through the egress proxy (default:
// Config.AllowHosts).
func WithEgress(policy Egress, allowHosts ...string) AgentOption {
	return func(o *agentOptions) {
		o.egress = policy
		o.allowHosts = allowHosts
		o.allowSet = true
	}
}

// WithWorkDir sets the directory the CLI runs in.
func WithWorkDir(dir string) AgentOption { return func(o *agentOptions) { o.workdir = dir } }

// WithEnv adds variables to the sandbox's environment (the container's
// and every exec's, the CLI's included). Keys must be names: not empty,
// without '=' or NUL.
func WithEnv(env map[string]string) AgentOption {
	return func(o *agentOptions) {
		if o.env == nil {
			o.env = map[string]string{}
		}
		for k, v := range env {
			o.env[k] = v
		}
	}
}

// WithResources sets the sandbox's memory limit in bytes (at least 6 MiB;
// swap is never added) and its process limit; zero keeps the default
// (defaultMemoryBytes, defaultPidsLimit). The sandbox's idle keepalive is
// Config.Keepalive (WithConfig).
func WithResources(memoryBytes, pids int64) AgentOption {
	return func(o *agentOptions) { o.memoryBytes, o.pids = memoryBytes, pids }
}

// WithOwner labels the sandbox (label sandbox-agent.owner) as owned by a server's stable
// instance identity (a valid label value: up to 63 letters, digits, '-',
// '_' and '.', starting and ending alphanumeric). GC keeps a running
// sandbox with an owner, whatever becomes of the process that started
// it: the server re-adopts it (Adopt) after a restart.
func WithOwner(id string) AgentOption { return func(o *agentOptions) { o.owner = id } }

// WithMeter counts the agent's model requests (through the model proxy)
// on m, its own, and holds them to its budget and its parent's: once
// spent, the proxy refuses the next request and the turn fails with
// metering.ErrBudgetExceeded; m.SetBudget raises it. Without it the
// agent counts on a meter with no budget.
func WithMeter(m *metering.Meter) AgentOption { return func(o *agentOptions) { o.meter = m } }

// WithHooks has h told of the agent's start, turns, model requests,
// commands and egress decisions (package telemetry); several add up.
func WithHooks(h telemetry.Hooks) AgentOption {
	return func(o *agentOptions) { o.hooks = telemetry.Join(o.hooks, h) }
}

// WithSandbox adjusts the sandbox options before the sandbox starts, after
// every other option; several apply in order.
func WithSandbox(f func(*SandboxOptions)) AgentOption {
	return func(o *agentOptions) {
		prev := o.sandbox
		o.sandbox = func(s *SandboxOptions) {
			if prev != nil {
				prev(s)
			}
			f(s)
		}
	}
}

// minMemoryBytes is the smallest memory limit the engines accept.
const minMemoryBytes = 6 << 20

// check validates the options that need no engine.
func (o *agentOptions) check() error {
	for k := range o.env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			// Name the key only: the value may be a secret.
			return fmt.Errorf("%w: env: key %q: want a name without '=' or NUL", ErrInvalidArgument, k)
		}
	}
	if o.memoryBytes < 0 || (o.memoryBytes > 0 && o.memoryBytes < minMemoryBytes) {
		return fmt.Errorf("%w: memory limit of %d bytes: want at least 6 MiB", ErrInvalidArgument, o.memoryBytes)
	}
	if o.pids < 0 {
		return fmt.Errorf("%w: process limit %d: want a positive number", ErrInvalidArgument, o.pids)
	}
	if o.owner != "" && !ownerID.MatchString(o.owner) {
		return fmt.Errorf("%w: owner %q: want up to 63 letters, digits, '-', '_' and '.', alphanumeric at both ends", ErrInvalidArgument, o.owner)
	}
	return nil
}

// ownerID is a label value every engine takes (Kubernetes' is the
// strictest).
var ownerID = lazyre.New(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// applyOptions collects the options and the configuration they name
// (defaults filled in).
func applyOptions(opts []AgentOption) (agentOptions, Config) {
	var o agentOptions
	for _, f := range opts {
		f(&o)
	}
	cfg := DefaultConfig()
	if o.cfg != nil {
		cfg = o.cfg.withDefaults()
	}
	return o, cfg
}

// SandboxOptionsOf is what opts ask of the sandbox Start makes — its
// configuration (defaults filled in), resources, environment, and
// WithSandbox's adjustments; the image, egress and proxies are Start's to
// decide. A pool checks it (no fixed name, the keepalive).
func SandboxOptionsOf(opts ...AgentOption) SandboxOptions {
	o, cfg := applyOptions(opts)
	s := o.sandboxOptions(cfg, "", "", nil)
	s.Config = s.Config.withDefaults() // WithSandbox may have replaced it
	return s
}

func (o *agentOptions) sandboxOptions(cfg Config, image string, egress Egress, allow []string) SandboxOptions {
	s := SandboxOptions{
		Image: image, Config: cfg, Egress: egress, AllowHosts: allow, Network: o.network, WorkDir: o.workdir,
		Env: o.env, MemoryBytes: o.memoryBytes, PidsLimit: o.pids, Hooks: o.hooks,
	}
	if o.owner != "" {
		s.Labels = map[string]string{labels.Owner: o.owner}
	}
	if o.sandbox != nil {
		o.sandbox(&s)
	}
	return s
}

// Start starts a sandbox for drv's CLI on rt and installs the CLI's
// configuration. Close destroys it.
func Start(ctx context.Context, rt Runtime, drv Driver, opts ...AgentOption) (_ *Agent, err error) {
	if drv == nil {
		return nil, fmt.Errorf("%w: nil driver", ErrInvalidArgument)
	}
	o, cfg := applyOptions(opts)
	if err := o.check(); err != nil {
		return nil, err
	}
	image, err := catalog.Resolve(drv.Name(), o.image, cfg.ImageName, drv.Image())
	if err != nil {
		return nil, invalidArgument(err)
	}
	egress, allow := o.egress, o.allowHosts
	if egress == "" {
		egress = cfg.Egress
	}
	if egress == "" {
		egress = EgressModel
	}
	if !o.allowSet {
		allow = cfg.AllowHosts
	}
	a, sopts, err := newAgent(drv, o, cfg, image, egress, allow, AgentState{Started: time.Now()})
	if err != nil {
		return nil, err
	}
	if a.repo, err = o.openRepo(ctx, sopts.Name); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && a.repo != nil {
			a.repo.Close()
		}
	}()
	ctx, started := o.hooks.StartSandbox(ctx, telemetry.SandboxStart{Image: image})
	var phases []telemetry.Phase
	defer func() { started(telemetry.SandboxDone{Phases: phases, Err: err}) }()
	t0 := time.Now()
	sb, err := NewSandbox(ctx, rt, sopts)
	phases = append(phases, telemetry.Phase{Name: "sandbox", Duration: time.Since(t0)})
	if err != nil {
		return nil, err
	}
	a.sb = sb
	a.route()
	sctx, cancel := context.WithTimeout(ctx, cfg.Timeouts.Start)
	defer cancel()
	t1 := time.Now()
	err = a.drv.Setup(sctx, sb)
	phases = append(phases, telemetry.Phase{Name: "setup", Duration: time.Since(t1)})
	if err != nil {
		a.Close()
		return nil, fmt.Errorf("set up %s: %w", drv.Name(), err)
	}
	if a.repo != nil {
		t2 := time.Now()
		err = a.repo.Put(ctx, repoSandbox{sb})
		phases = append(phases, telemetry.Phase{Name: "repo", Duration: time.Since(t2)})
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("repository %s: %w", a.repo.Dir(), err)
		}
	}
	if a.audit {
		if err := audit.Prune(cfg.AuditRoot, cfg.AuditRetentionDays, time.Now()); err != nil {
			a.log.Warn("sandbox-agent: audit retention", "err", err)
		}
	}
	return a, nil
}

// newAgent makes the agent of drv, short of its sandbox, and the options
// of the sandbox: the egress policy, the model proxy and the audit. st
// names what an adopted agent keeps (its sandbox's name, the proxy's
// token; "": fresh ones) and when it started.
func newAgent(drv Driver, o agentOptions, cfg Config, image string, egress Egress, allow []string, st AgentState) (*Agent, SandboxOptions, error) {
	if _, err := ParseEgress(string(egress)); err != nil {
		return nil, SandboxOptions{}, err
	}
	if egress == EgressNone {
		return nil, SandboxOptions{}, fmt.Errorf("%w: egress none leaves the agent no way to its model; use model (the default), which allows only the model proxy", ErrInvalidArgument)
	}
	a := &Agent{
		drv: drv, image: image, model: o.model, cfg: cfg, opts: o, started: st.Started, hooks: o.hooks,
		audit: cfg.AuditEnabled, log: o.logger, sessions: map[string]*sessionState{},
		lock: make(chan struct{}, 1),
	}
	a.turnCtx.Store(new(context.Background()))
	if o.audit != nil {
		a.audit = *o.audit
	}
	if a.log == nil {
		a.log = slog.Default()
	}
	sopts := o.sandboxOptions(cfg, image, egress, allow)
	if st.SandboxName != "" {
		sopts.Name = st.SandboxName
	}
	if sopts.Name == "" {
		sopts.Name = newName()
	}
	a.secrets = drv.Secrets()
	user := sopts.OnEgress
	sopts.OnEgress = func(r egressproxy.Record) {
		a.egressRecord(r)
		if h := o.hooks.Egress; h != nil {
			h(telemetry.EgressDecision{Allowed: r.Allowed})
		}
		if user != nil {
			user(r)
		}
	}
	router, routable := drv.(ModelRouter)
	var route ModelRoute
	if routable {
		var err error
		if route, err = router.ModelRoute(); err != nil {
			if egress != EgressOpen || st.ModelToken != "" {
				return nil, SandboxOptions{}, fmt.Errorf("%s: route through the model proxy: %w", drv.Name(), err)
			}
			a.log.Warn("sandbox-agent: the driver cannot be routed through the model proxy", "driver", drv.Name(), "err", err)
			routable = false
		}
	}
	switch {
	case routable && (st.SandboxName == "" || st.ModelToken != ""):
		a.router, a.token = router, st.ModelToken
		if a.token == "" {
			a.token = modelproxy.NewToken()
		}
		a.secrets = append(a.secrets, a.token)
		var err error
		if a.meter = o.meter; a.meter == nil {
			if a.meter, err = metering.NewMeter(metering.MeterOptions{Prices: cfg.Prices}); err != nil {
				return nil, SandboxOptions{}, err
			}
		}
		a.proxy, err = modelproxy.New(modelproxy.Options{
			Upstream: route.Upstream, Key: route.Key, Token: a.token, CACertFile: cfg.CACertFile, Log: a.modelRecord, APIs: route.proxyAPIs(),
			Tap: a.tap, Meter: a.meter,
		})
		if err != nil {
			return nil, SandboxOptions{}, fmt.Errorf("%w: %s: model proxy: %w", ErrInvalidArgument, drv.Name(), err)
		}
		a.modelSvc = &modelSwitch{proxy: a.proxy}
		sopts.services = map[string]http.Handler{boundary.ServiceModel: a.modelSvc}
	case st.ModelToken != "":
		return nil, SandboxOptions{}, fmt.Errorf("%w: driver %s cannot be routed through the model proxy, which the sandbox's CLI was set up for", ErrInvalidArgument, drv.Name())
	case egress == EgressModel:
		return nil, SandboxOptions{}, fmt.Errorf("%w: driver %s cannot be routed through the model proxy (it does not implement ModelRouter); use egress open", ErrInvalidArgument, drv.Name())
	default:
		a.log.Warn("sandbox-agent: driver cannot use the model proxy: its API key enters the sandbox", "driver", drv.Name())
	}
	if a.audit {
		a.net = &audit.Network{Root: cfg.AuditRoot, Date: st.Started, Name: sopts.Name, Secrets: a.secrets, Log: a.log, Max: cfg.Limits.AuditSessionBytes}
	}
	if egress == EgressOpen {
		a.log.Warn("sandbox-agent: egress open: the agent can reach the internet and the host's services", "driver", drv.Name())
	}
	return a, sopts, nil
}

// route points the driver at the model proxy as the sandbox reaches it.
func (a *Agent) route() {
	if a.router != nil {
		a.baseURL = a.proxy.BaseURL(a.sb.host.URL(boundary.ServiceModel))
		a.drv = a.router.Routed(a.baseURL, a.token)
	}
}

// longLived is the driver's long-lived mode, unless the configuration
// asks for a CLI per turn.
func (a *Agent) longLived() (LongLived, bool) {
	ll, ok := a.drv.(LongLived)
	return ll, ok && !a.cfg.PerTurn
}

// Container is the sandbox the agent runs in (exec, files, downloads).
func (a *Agent) Container() *Sandbox { return a.sb }

// Driver is the agent's driver: for a ModelRouter, the copy routed through
// the model proxy (its key is the token), so calls through it keep the
// real key out of the sandbox.
func (a *Agent) Driver() Driver { return a.drv }

// SessionID is the session the next turn continues ("" before the
// first). It does not wait for a running turn: the turn's own session, as
// far as it is known, is in its record (Turns).
func (a *Agent) SessionID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.session
}

// SetSession makes the next turn continue the given session ("" starts a
// new one), also when a turn is running.
func (a *Agent) SetSession(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.session = id
	a.sessionSet++
}

// holdKey marks a context whose calls run under an agent's Hold.
type holdKey struct{}

// lockTurn takes the turn lock for one call: at once when ctx carries
// this agent's hold, else when the lock is free (an error when ctx ends
// first).
func (a *Agent) lockTurn(ctx context.Context) (unlock func(), err error) {
	if h, _ := ctx.Value(holdKey{}).(*Agent); h == a {
		return func() {}, nil
	}
	select { // a free lock is taken even when ctx is done (the call then aborts and is recorded)
	case a.lock <- struct{}{}:
		return func() { <-a.lock }, nil
	default:
	}
	select {
	case a.lock <- struct{}{}:
		return func() { <-a.lock }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for the agent's running turn or session call: %w", ctx.Err())
	}
}

// Hold waits up to wait (or until ctx ends) for the agent's turn lock,
// which a turn or a session call holds while it runs, and keeps it until
// release: other turns and session calls wait meanwhile. The agent's
// methods called with the returned context (derived from ctx) run under
// the hold; such calls must not overlap. A wait that runs out is an error
// matching ErrTimeout. release is idempotent.
func (a *Agent) Hold(ctx context.Context, wait time.Duration) (context.Context, func(), error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	unlock, err := a.lockTurn(wctx)
	if err != nil {
		if ctx.Err() == nil {
			err = fmt.Errorf("%w: the agent stayed busy for %v", ErrTimeout, wait)
		}
		return nil, nil, err
	}
	var once sync.Once
	return context.WithValue(ctx, holdKey{}, a), func() { once.Do(unlock) }, nil
}

// Close revokes the agent's model-proxy token and destroys the sandbox.
// It is idempotent.
func (a *Agent) Close() error {
	if a.proxy != nil {
		a.proxy.Revoke()
	}
	// Not under mu: Close must not wait for a running turn.
	if s := a.srv.Swap(nil); s != nil {
		s.CloseForRemoval()
	}
	err := a.sb.Close()
	if a.net != nil {
		a.net.Close()
	}
	if a.repo != nil {
		a.repo.Close()
	}
	return err
}

// Detach lets go of the agent without removing its sandbox, for another
// process (or this one, later) to Adopt from its State: the long-lived
// CLI is stopped (its session is on disk), the proxies stop serving but
// their socket folder stays, the token stays valid for the adopter. Call
// it between turns; the agent is unusable afterwards.
func (a *Agent) Detach() error {
	if s := a.srv.Swap(nil); s != nil {
		s.Stop()
	}
	a.sb.detach()
	if a.net != nil {
		a.net.Close()
	}
	if a.repo != nil {
		a.repo.Close() // its quarantine; the adopter resumes from State
	}
	return nil
}

// NetworkAuditDir is the folder of the agent's model-proxy and egress
// audit lines (model.jsonl, egress.jsonl); "" when audit is off.
func (a *Agent) NetworkAuditDir() string {
	if a.net == nil {
		return ""
	}
	return a.net.Dir()
}

// TurnResult is the outcome of one turn.
type TurnResult struct {
	Reply     string
	SessionID string
	Events    []Event
	ExitCode  int
	Duration  time.Duration
	// AuditDir is the session's audit folder ("" when audit is off).
	AuditDir string
	// Verification is the check of Events against what the model proxy
	// saw (nil without a model proxy): how many events it backed, which
	// lines it did not, and the CLI's reply when it was not the model's.
	Verification *trajectory.Verification
	// Usage is what the turn's model requests used and cost, as the model
	// proxy measured them (nil without a model proxy).
	Usage *metering.Spent
}

// Ask runs one turn and returns the final reply.
func (a *Agent) Ask(ctx context.Context, prompt string) (string, error) {
	res, err := a.Stream(ctx, prompt, nil)
	return res.Reply, err
}

// Stream runs one turn, calling fn (when not nil) with each event as it
// happens, and returns the whole result. On error the result still holds
// the events so far. A turn past its timeout (timeout_ask) has its
// process tree killed and fails with ErrTimeout; a failure the CLI reported
// is a *DriverError. Turns run one at a time: Stream waits (until ctx
// ends) for a running turn or session call.
func (a *Agent) Stream(ctx context.Context, prompt string, fn func(Event)) (TurnResult, error) {
	unlock, err := a.lockTurn(ctx)
	if err != nil {
		return TurnResult{}, err
	}
	defer unlock()
	a.mu.Lock()
	session, set := a.session, a.sessionSet
	a.turns++
	no := a.turns
	a.mu.Unlock()
	t := &turn{a: a, no: no, fn: fn, started: time.Now()}
	t.spec = Turn{Prompt: prompt, Model: a.model, SessionID: session, WorkDir: a.sb.workdir}
	if session != "" && a.sessions[session] == nil && a.adopted && a.audit {
		a.resumeAudit(session) // a session of the dead host's: its audit goes on
	}
	if st := a.sessions[session]; session != "" && st != nil {
		t.lines = st.lines
	}
	t.firstLine = t.lines + 1
	t.record = a.recordStart(t.no, prompt, t.started, session)
	ctx, turnDone := a.hooks.StartTurn(ctx, telemetry.TurnStart{Driver: a.drv.Name(), Model: a.model})
	a.turnCtx.Store(&ctx)
	a.setInTurn(true)
	defer a.setInTurn(false)
	res, err := t.run(ctx)
	turnDone(telemetry.TurnDone{Outcome: outcomeOf(err), Usage: res.Usage, Err: err})
	// A made-up id (the CLI died before naming its session) names only the
	// audit folder: the next turn must not ask the CLI to resume it.
	if res.SessionID != "" && !strings.HasPrefix(res.SessionID, unknownSessionPrefix) {
		a.mu.Lock()
		if a.sessionSet == set { // a SetSession during the turn wins
			a.session = res.SessionID
		}
		a.mu.Unlock()
		if s := a.srv.Load(); s != nil {
			s.Session = res.SessionID // the session the long-lived process is on now
		}
	}
	t.finish(res, err)
	a.recordEnd(t.record, res, err)
	return res, err
}

// Bounds of the turn records an agent keeps (Turns): the audit trail
// keeps everything.
const (
	maxTurnsKept       = 200
	maxTurnsWithEvents = 20      // older records keep their summary only
	maxEventsPerTurn   = 5000    // and a record at most this many events
	maxTurnEventBytes  = 4 << 20 // of at most about this size
)

// TurnRecord is what the agent keeps of one turn (Turns, Observe). The
// embedded result is the turn's so far while it runs (SessionID as soon
// as the CLI names it); Events are the first ones within the record's
// budget (5,000 events, about 4 MiB; none for turns older than the last
// 20).
type TurnRecord struct {
	TurnResult
	Turn    int // numbered from 1 in the agent's life
	Prompt  string
	Started time.Time
	Running bool
	Err     error // the error Stream returned
	// EventCount counts the turn's events, kept or not.
	EventCount int
}

type turnRecord struct {
	TurnRecord
	bytes int // the kept events' size, roughly
}

// Turns returns the records of the agent's last 200 turns, oldest first,
// the running one included. It does not wait for a running turn. The
// records share their Events with the agent: read them, do not change
// them.
func (a *Agent) Turns() []TurnRecord {
	a.recMu.Lock()
	defer a.recMu.Unlock()
	out := make([]TurnRecord, len(a.records))
	for i, r := range a.records {
		out[i] = r.TurnRecord
	}
	return out
}

// Observe calls fn as turns run: when one starts (ev nil, rec.Running),
// with each of its events (rec as of that event), and when it ends (ev
// nil, !rec.Running), in order, from the goroutine running the turn. fn
// must return quickly and must not call the agent. Observe returns the
// record of the turn running when fn was registered (Turn 0 when none),
// so an observer can replay what it missed without gaps or repeats; stop
// ends the observation.
func (a *Agent) Observe(fn func(rec TurnRecord, ev *Event)) (running TurnRecord, stop func()) {
	a.recMu.Lock()
	defer a.recMu.Unlock()
	if a.observers == nil {
		a.observers = map[int]func(TurnRecord, *Event){}
	}
	id := a.nextObs
	a.nextObs++
	a.observers[id] = fn
	if n := len(a.records); n > 0 && a.records[n-1].Running {
		running = a.records[n-1].TurnRecord
	}
	return running, func() {
		a.recMu.Lock()
		delete(a.observers, id)
		a.recMu.Unlock()
	}
}

// notify hands a record's change to the observers. Called with recMu.
func (a *Agent) notify(r *turnRecord, ev *Event) {
	for _, fn := range a.observers {
		fn(r.TurnRecord, ev)
	}
}

// recordStart opens the record of a turn, forgetting the oldest beyond
// maxTurnsKept and the events of those beyond maxTurnsWithEvents.
func (a *Agent) recordStart(no int, prompt string, started time.Time, session string) *turnRecord {
	r := &turnRecord{TurnRecord: TurnRecord{Turn: no, Prompt: prompt, Started: started.UTC(), Running: true}}
	r.SessionID = session
	a.recMu.Lock()
	defer a.recMu.Unlock()
	a.records = append(a.records, r)
	if len(a.records) > maxTurnsKept {
		a.records = append([]*turnRecord(nil), a.records[len(a.records)-maxTurnsKept:]...)
	}
	if n := len(a.records) - maxTurnsWithEvents; n > 0 {
		old := a.records[n-1]
		old.Events, old.bytes = nil, 0
	}
	a.notify(r, nil)
	return r
}

// recordEvent adds one event of the running turn, within its budget.
func (a *Agent) recordEvent(r *turnRecord, ev Event) {
	a.recMu.Lock()
	defer a.recMu.Unlock()
	r.EventCount++
	if ev.SessionID != "" && !strings.HasPrefix(ev.SessionID, unknownSessionPrefix) {
		r.SessionID = ev.SessionID
	}
	if size := int(eventSize(ev)); len(r.Events) < maxEventsPerTurn && r.bytes+size <= maxTurnEventBytes {
		r.bytes += size
		r.Events = append(r.Events, ev)
	}
	a.notify(r, &ev)
}

// recordEnd closes the record of a turn with its outcome.
func (a *Agent) recordEnd(r *turnRecord, res TurnResult, err error) {
	a.recMu.Lock()
	defer a.recMu.Unlock()
	events := r.Events
	r.TurnResult = res
	r.Events = events
	r.Running, r.Err = false, err
	a.notify(r, nil)
}
