package sandboxagent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sandbox-agent/sandbox-agent/audit"
)

// Agent is one agent CLI living in one sandbox, driven turn by turn.
// Methods may be called from several goroutines; turns run one at a time.
type Agent struct {
	drv   Driver
	sb    *Sandbox
	image string
	model string
	cfg   Config
	audit bool
	log   *slog.Logger

	mu       sync.Mutex // serialises turns and guards the fields below
	session  string
	turns    int
	sessions map[string]*sessionState
}

type agentOptions struct {
	image, model, workdir, network string
	cfg                            *Config
	audit                          *bool
	logger                         *slog.Logger
	sandbox                        func(*SandboxOptions)
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

// WithNetwork sets the sandbox's network mode (default "bridge": the CLI
// must reach its model; "host" to reach a model on the host's loopback).
func WithNetwork(mode string) AgentOption { return func(o *agentOptions) { o.network = mode } }

// WithWorkDir sets the directory the CLI runs in.
func WithWorkDir(dir string) AgentOption { return func(o *agentOptions) { o.workdir = dir } }

// WithSandbox adjusts the sandbox options before the sandbox starts.
func WithSandbox(f func(*SandboxOptions)) AgentOption {
	return func(o *agentOptions) { o.sandbox = f }
}

// Start starts a sandbox for drv's CLI on rt and installs the CLI's
// configuration. Close destroys it.
func Start(ctx context.Context, rt Runtime, drv Driver, opts ...AgentOption) (*Agent, error) {
	if drv == nil {
		return nil, fmt.Errorf("%w: nil driver", ErrInvalidArgument)
	}
	var o agentOptions
	for _, f := range opts {
		f(&o)
	}
	cfg := DefaultConfig()
	if o.cfg != nil {
		cfg = o.cfg.withDefaults()
	}
	image, err := ResolveImage(drv.Name(), o.image, cfg.ImageName, drv.Image())
	if err != nil {
		return nil, err
	}
	network := o.network
	if network == "" {
		network = "bridge"
	}
	sopts := SandboxOptions{Image: image, Config: cfg, Network: network, WorkDir: o.workdir}
	if o.sandbox != nil {
		o.sandbox(&sopts)
	}
	sb, err := NewSandbox(ctx, rt, sopts)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		drv: drv, sb: sb, image: image, model: o.model, cfg: cfg,
		audit: cfg.AuditEnabled, log: o.logger, sessions: map[string]*sessionState{},
	}
	if o.audit != nil {
		a.audit = *o.audit
	}
	if a.log == nil {
		a.log = slog.Default()
	}
	sctx, cancel := context.WithTimeout(ctx, cfg.Timeouts.Start)
	defer cancel()
	if err := drv.Setup(sctx, sb); err != nil {
		sb.Close()
		return nil, fmt.Errorf("set up %s: %w", drv.Name(), err)
	}
	if a.audit {
		if err := audit.Prune(cfg.AuditRoot, cfg.AuditRetentionDays, time.Now()); err != nil {
			a.log.Warn("sandbox-agent: audit retention", "err", err)
		}
	}
	return a, nil
}

// Container is the sandbox the agent runs in (exec, files, downloads).
func (a *Agent) Container() *Sandbox { return a.sb }

// Driver is the agent's driver.
func (a *Agent) Driver() Driver { return a.drv }

// Image is the image the sandbox runs.
func (a *Agent) Image() string { return a.image }

// SessionID is the session the next turn continues ("" before the first).
func (a *Agent) SessionID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.session
}

// SetSession makes the next turn continue the given session ("" starts a
// new one).
func (a *Agent) SetSession(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.session = id
}

// Close destroys the sandbox. It is idempotent.
func (a *Agent) Close() error { return a.sb.Close() }

// TurnResult is the outcome of one turn.
type TurnResult struct {
	Reply     string
	SessionID string
	Events    []Event
	ExitCode  int
	Duration  time.Duration
	// AuditDir is the session's audit folder ("" when audit is off).
	AuditDir string
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
// is a *DriverError.
func (a *Agent) Stream(ctx context.Context, prompt string, fn func(Event)) (TurnResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.turns++
	t := &turn{a: a, no: a.turns, fn: fn, started: time.Now()}
	t.spec = Turn{Prompt: prompt, Model: a.model, SessionID: a.session, WorkDir: a.sb.workDir()}
	if st := a.sessions[a.session]; a.session != "" && st != nil {
		t.lines = st.lines
	}
	t.firstLine = t.lines + 1
	res, err := t.run(ctx)
	if res.SessionID != "" {
		a.session = res.SessionID
	}
	t.finish(res, err)
	return res, err
}
