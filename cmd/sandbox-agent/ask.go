package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
	"github.com/sandbox-agent/sandbox-agent/internal/hardening"
	"github.com/sandbox-agent/sandbox-agent/metering"
	"github.com/sandbox-agent/sandbox-agent/repo"
	"github.com/sandbox-agent/sandbox-agent/trajectory"
)

// exitAgentFailed: the agent CLI reported a failure (a DriverError).
const exitAgentFailed = 1

// agentFlags are the flags of commands that start an agent.
type agentFlags struct {
	sandboxFlags
	model string
	fake  string
	// fakeScript, when set, is the fake model's script itself (serve's
	// fake_model_script) instead of a file to read.
	fakeScript *fakemodel.Script
	// endpoint, when set, is the model endpoint itself (serve's
	// endpoint field) instead of the provider or gateway.
	endpoint  *drivers.Endpoint
	provider  string
	keyEnv    string
	timeout   time.Duration
	noAudit   bool
	auditRoot string
	budget    metering.Budget
}

func (f *agentFlags) register(fs *flag.FlagSet) {
	f.sandboxFlags.register(fs, "")
	fs.StringVar(&f.model, "model", "", "model, in the CLI's naming (default: the driver's)")
	fs.StringVar(&f.fake, "fake-model", "", "serve this fake-model script on 127.0.0.1 and point the CLI at it (no key, no network)")
	fs.StringVar(&f.provider, "provider", "zhipuai-coding-plan", "opencode: the provider to use")
	fs.StringVar(&f.keyEnv, "key-env", "", "environment variable holding the API key (default: ZHIPUAI_CODING_TOKEN for opencode, GATEWAY_KEY for the others)")
	fs.DurationVar(&f.timeout, "timeout", 0, "turn timeout (default: timeout_ask)")
	fs.BoolVar(&f.noAudit, "no-audit", false, "do not write the audit trail")
	fs.StringVar(&f.auditRoot, "audit-root", "", "audit root folder (default: audit_root)")
	fs.Int64Var(&f.budget.Tokens, "budget-tokens", 0, "stop the run once its model requests used this many tokens, input and output (0: no limit)")
	fs.Float64Var(&f.budget.USD, "budget-usd", 0, "stop the run once its model requests cost this many US dollars at the prices (0: no limit)")
}

// fakeKey is a fresh random key for one fake-model run, so a test of the
// audit's redaction has something real to look for.
func fakeKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "sk-fake-" + hex.EncodeToString(b)
}

// newDriver builds the named driver against its endpoint: the fake model
// (a script file, or serve's script itself), serve's request's endpoint,
// else the provider or gateway.
// The returned stop func shuts the fake model down; it is never nil.
func (a *app) newDriver(name string, f *agentFlags) (sandboxagent.Driver, func(), error) {
	stop := func() {}
	var ep drivers.Endpoint
	var err error
	switch {
	case f.fake != "" || f.fakeScript != nil:
		var script fakemodel.Script
		if f.fakeScript != nil {
			script = *f.fakeScript
		} else if script, err = fakemodel.LoadScript(f.fake); err != nil {
			return nil, stop, err
		}
		ep.APIKey = fakeKey()
		a.red.add(ep.APIKey)
		script.ExpectKey = ep.APIKey
		srv, err := fakemodel.New(script, fakemodel.Options{})
		if err != nil {
			return nil, stop, err
		}
		if err := srv.Start("127.0.0.1:0"); err != nil {
			return nil, stop, err
		}
		stop = func() { srv.Close() }
		// The model proxy on the host forwards to it: the sandbox needs
		// no network.
		ep.BaseURL = srv.URL() + "/v1"
		ep.Provider = "sandbox"
	case f.endpoint != nil:
		ep = *f.endpoint
	default:
		if ep, err = a.realEndpoint(name, f.provider, f.keyEnv); err != nil {
			return nil, stop, err
		}
	}
	drv, err := drivers.New(name, ep)
	if err != nil {
		stop()
		return nil, func() {}, err
	}
	if f.endpoint != nil && ep.APIKey != "" {
		// A request's key must stay on the host: an endpoint the model
		// proxy cannot route (opencode's provider without a base URL that
		// the proxy does not know) would hand it to the CLI in the
		// sandbox under egress open.
		if r, ok := drv.(sandboxagent.ModelRouter); ok {
			if _, err := r.ModelRoute(); err != nil {
				stop()
				return nil, func() {}, fmt.Errorf("%w: endpoint: the key would have to enter the sandbox: %w", sandboxagent.ErrInvalidArgument, err)
			}
		}
	}
	return drv, stop, nil
}

// agentConfig is the configuration of an agent f starts.
func (a *app) agentConfig(f *agentFlags) sandboxagent.Config {
	cfg := a.cfg
	if f.timeout > 0 {
		cfg.Timeouts.Ask = f.timeout
	}
	if f.auditRoot != "" {
		cfg.AuditRoot = f.auditRoot
	}
	if f.noAudit {
		cfg.AuditEnabled = false
	}
	if f.keepalive > 0 {
		cfg.Keepalive = f.keepalive
	}
	if f.ociRT != "" {
		cfg.OCIRuntime = f.ociRT
	}
	return cfg
}

// useOCIRuntime applies an --oci-runtime flag ("": the config's) to every
// sandbox the command starts.
func (a *app) useOCIRuntime(name string) error {
	if err := hardening.CheckOCIRuntime(name); err != nil {
		return fmt.Errorf("--oci-runtime: %w", err)
	}
	if name != "" {
		a.cfg.OCIRuntime = name
	}
	return nil
}

// sandboxHooks are the options every agent the command line starts gets
// beside its own (ask's flags, serve's request): the image source and the
// egress denials printed on stderr.
func (a *app) sandboxHooks(ctx context.Context) ([]sandboxagent.AgentOption, error) {
	src, err := a.imageSource(ctx)
	if err != nil {
		return nil, err
	}
	return []sandboxagent.AgentOption{sandboxagent.WithSandbox(func(so *sandboxagent.SandboxOptions) {
		so.OnEgress = a.egressDenied
		so.Images = src
	})}, nil
}

// startAgent builds the driver and starts the agent in a sandbox with
// opts (parsed from f's sandbox flags), through the same library options
// as serve's agents (server.NewStarter); on checkpoint from when not nil
// (sandboxagent.StartFrom: its files and session). The returned stop func
// shuts the fake model down.
func (a *app) startAgent(ctx context.Context, name string, f *agentFlags, opts sandboxagent.SandboxOptions, from *sandboxagent.Checkpoint, extra ...sandboxagent.AgentOption) (*sandboxagent.Agent, func(), error) {
	cfg := a.agentConfig(f)
	if opts.DiskBytes != 0 { // --disk, parsed with the other sandbox flags
		cfg.DiskBytes = opts.DiskBytes
	}
	allow := opts.AllowHosts
	if allow == nil {
		allow = cfg.AllowHosts
	}
	a.warnOpen(opts.Egress)
	hooks, err := a.sandboxHooks(ctx)
	if err != nil {
		return nil, func() {}, err
	}
	rt, err := a.runtime(ctx)
	if err != nil {
		return nil, func() {}, err
	}
	meter, err := metering.NewMeter(metering.MeterOptions{Prices: cfg.Prices, Budget: f.budget})
	if err != nil {
		return nil, func() {}, fmt.Errorf("%w: %w", sandboxagent.ErrInvalidArgument, err)
	}
	drv, stop, err := a.newDriver(name, f)
	if err != nil {
		return nil, stop, err
	}
	agentOpts := append([]sandboxagent.AgentOption{
		sandboxagent.WithMeter(meter),
		sandboxagent.WithConfig(cfg), sandboxagent.WithModel(f.model), sandboxagent.WithImage(f.image),
		sandboxagent.WithNetwork(f.network),
		sandboxagent.WithEgress(opts.Egress, allow...),
		sandboxagent.WithEnv(opts.Env),
		sandboxagent.WithResources(opts.MemoryBytes, opts.PidsLimit),
	}, hooks...)
	agentOpts = append(agentOpts, extra...)
	var ag *sandboxagent.Agent
	if from != nil {
		ag, err = sandboxagent.StartFrom(ctx, rt, drv, *from, agentOpts...)
	} else {
		ag, err = sandboxagent.Start(ctx, rt, drv, agentOpts...)
	}
	if err != nil {
		stop()
		return nil, func() {}, err
	}
	return ag, stop, nil
}

// resultLine is the last line of ask --json.
type resultLine struct {
	Kind      string `json:"kind"` // "result"
	Reply     string `json:"reply"`
	SessionID string `json:"session_id,omitempty"`
	ExitCode  int    `json:"exit_code"`
	Error     string `json:"error,omitempty"`
	AuditDir  string `json:"audit_dir,omitempty"`
	// Verification: the check of the turn's events against the model
	// proxy's record (absent without a model proxy).
	Verification *trajectory.Verification `json:"verification,omitempty"`
	// Usage: what the turn's model requests used and cost, as the model
	// proxy counted them (absent without a model proxy).
	Usage *metering.Spent `json:"usage,omitempty"`
	// Checkpoint: the id of the checkpoint --checkpoint made after the turn.
	Checkpoint string `json:"checkpoint,omitempty"`
	// Branch: the host branch --repo's changes came back as; Changes:
	// the whole sync (--changes patch|bundle: its output).
	Branch  string        `json:"branch,omitempty"`
	Changes *repo.Changes `json:"changes,omitempty"`
}

func runAsk(ctx context.Context, a *app, args []string) int {
	fs := flag.NewFlagSet("ask", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() {
		fmt.Fprintln(a.stderr, "usage: sandbox-agent ask [--driver NAME] [flags] PROMPT\n\nRuns one turn of an agent CLI in a throw-away sandbox and prints the reply.\nExit codes: 0 ok, 1 the agent CLI failed, 3 a budget was spent, 124 timeout, 125 sandbox-agent failed.\n\nflags:")
		fs.PrintDefaults()
	}
	driver := fs.String("driver", "opencode", "agent CLI: "+strings.Join(drivers.Names(), ", ")+" (with --from-checkpoint: the checkpoint's)")
	asJSON := fs.Bool("json", false, "print events as JSON lines, then a result line")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr (shown only when stderr is a terminal, and never with --json)")
	ckName := fs.String("checkpoint", "", "after a turn that succeeded, checkpoint the sandbox under this `NAME` and print the checkpoint's id")
	fromCk := fs.String("from-checkpoint", "", "start the agent on this checkpoint (`ID`, see 'checkpoint list'): its files, continuing its session; --driver, when given, must be the checkpoint's")
	var af agentFlags
	af.register(fs)
	var rf repoFlags
	rf.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitError
	}
	prompt := strings.Join(fs.Args(), " ")
	if strings.TrimSpace(prompt) == "" {
		return a.fail(errors.New("ask: no prompt given"))
	}
	var extra []sandboxagent.AgentOption
	if o, err := rf.option(fs); err != nil {
		return a.fail(fmt.Errorf("ask: %w", err))
	} else if o != nil {
		if *fromCk != "" {
			return a.fail(fmt.Errorf("%w: ask: --repo with --from-checkpoint: the checkpoint holds the sandbox's files", sandboxagent.ErrInvalidArgument))
		}
		extra = append(extra, o)
	}
	opts, ups, downs, err := af.sandboxFlags.options(a.cfg)
	if err != nil {
		return a.fail(fmt.Errorf("ask: %w", err))
	}
	var from *sandboxagent.Checkpoint
	if *fromCk != "" {
		driverSet := false
		fs.Visit(func(f *flag.Flag) { driverSet = driverSet || f.Name == "driver" })
		if af.image != "" {
			return a.fail(fmt.Errorf("%w: ask: --image with --from-checkpoint: the checkpoint holds the sandbox's files", sandboxagent.ErrInvalidArgument))
		}
		c, err := a.findCheckpoint(ctx, *fromCk)
		if err != nil {
			return a.fail(fmt.Errorf("ask: --from-checkpoint: %w", err))
		}
		if driverSet && *driver != c.Driver {
			return a.fail(fmt.Errorf("%w: ask: checkpoint %s is of a %s agent, not --driver %s (omit --driver to take the checkpoint's)", sandboxagent.ErrInvalidArgument, c.ID, line(c.Driver), *driver))
		}
		*driver = c.Driver
		from = &c
	}
	ag, stop, err := a.startAgent(ctx, *driver, &af, opts, from, extra...)
	defer stop()
	if err != nil {
		return a.fail(err)
	}
	defer ag.Close()
	for _, u := range ups {
		if err := ag.Container().Upload(ctx, u.host, u.ctr); err != nil {
			return a.fail(err)
		}
	}
	var onEvent func(sandboxagent.Event)
	enc := a.jsonOut()
	switch {
	case *asJSON:
		onEvent = func(e sandboxagent.Event) { _ = enc.Encode(e) }
	case !*quiet && isTerminal(a.rawStderr):
		onEvent = newProgress(a.stderr).event
	}
	res, turnErr := ag.Stream(ctx, prompt, onEvent)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.Timeouts.Copy)
	defer cancel()
	dlErr := a.download(dctx, ag.Container(), downs)
	// The agent's work comes home whether or not its turn succeeded.
	var changes *repo.Changes
	var chErr error
	if ag.Repo() != nil {
		if ch, err := ag.Changes(dctx); err != nil {
			chErr = fmt.Errorf("changes: %w", err)
		} else {
			changes = &ch
		}
	}
	var ck sandboxagent.Checkpoint
	var ckErr error
	if *ckName != "" && turnErr == nil {
		if ck, ckErr = ag.Checkpoint(ctx, *ckName); ckErr != nil {
			ckErr = fmt.Errorf("checkpoint %q: %w", *ckName, ckErr)
		}
	}
	a.printTurn(enc, *asJSON, res, turnErr, ck.ID, changes)
	if *ckName != "" && turnErr != nil {
		fmt.Fprintln(a.stderr, "sandbox-agent: --checkpoint: no checkpoint made, the turn failed")
	}
	if dlErr != nil {
		return a.fail(dlErr)
	}
	if chErr != nil {
		return a.fail(chErr)
	}
	if ckErr != nil {
		return a.fail(ckErr)
	}
	switch {
	case turnErr == nil:
		return exitOK
	case errors.Is(turnErr, metering.ErrBudgetExceeded): // first, as serve ranks it
		return exitBudget
	case errors.Is(turnErr, sandboxagent.ErrTimeout):
		return exitTimeout
	case isAgentFailure(turnErr):
		return exitAgentFailed
	default:
		return exitError
	}
}

// printResult prints the turn's outcome: the result line (--json), or the
// reply on stdout and the error on stderr. Both go through the doors of
// output.go: the reply is the agent's text, hostile like all of it.
func (a *app) printResult(enc *json.Encoder, asJSON bool, res sandboxagent.TurnResult, turnErr error) {
	a.printTurn(enc, asJSON, res, turnErr, "", nil)
}

// printTurn is printResult with the id of the checkpoint made after the
// turn ("": none) and the repository's changes (nil: none): the result
// line's "checkpoint", "branch" and "changes", or last lines
// "checkpoint: ID", "branch: NAME" (or "changes: PATH") after the reply.
func (a *app) printTurn(enc *json.Encoder, asJSON bool, res sandboxagent.TurnResult, turnErr error, checkpointID string, ch *repo.Changes) {
	if asJSON {
		rl := resultLine{Kind: "result", Reply: res.Reply, SessionID: res.SessionID, ExitCode: res.ExitCode, AuditDir: res.AuditDir, Verification: res.Verification, Usage: res.Usage, Checkpoint: checkpointID, Changes: ch}
		if ch != nil {
			rl.Branch = ch.Branch
		}
		if turnErr != nil {
			rl.Error = turnErr.Error()
		}
		_ = enc.Encode(rl)
	} else if turnErr == nil {
		fmt.Fprintln(a.stdout, res.Reply)
		if checkpointID != "" {
			fmt.Fprintf(a.stdout, "checkpoint: %s\n", line(checkpointID))
		}
	}
	if !asJSON && ch != nil {
		printChanges(a.stdout, ch)
	}
	if turnErr != nil {
		fmt.Fprintf(a.stderr, "sandbox-agent: %s\n", errText(turnErr))
		var de *sandboxagent.DriverError
		if errors.As(turnErr, &de) && de.Stderr != "" {
			fmt.Fprintf(a.stderr, "%s stderr:\n%s\n", line(de.Driver), indent(de.Stderr))
		}
	}
}

func isAgentFailure(err error) bool {
	var de *sandboxagent.DriverError
	var re *sandboxagent.ResourceError
	return errors.As(err, &de) || errors.As(err, &re) || errors.Is(err, sandboxagent.ErrCLIMissing) || errors.Is(err, sandboxagent.ErrOutputLimit)
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if len(s) > 4000 {
		s = "…" + s[len(s)-4000:]
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
