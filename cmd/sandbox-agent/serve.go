package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
	"github.com/sandbox-agent/sandbox-agent/metering"
	"github.com/sandbox-agent/sandbox-agent/server"
	"github.com/sandbox-agent/sandbox-agent/telemetry"
	"github.com/sandbox-agent/sandbox-agent/telemetry/prom"
	"github.com/sandbox-agent/sandbox-agent/telemetry/tracing"
)

// defaultListen is serve's address: the loopback only.
const defaultListen = "127.0.0.1:7860"

// A graceful shutdown waits requestsGrace for the requests to end, then
// shutdownGrace for the sandboxes' removal, then flushGrace for the
// tenants' last charges.
const (
	requestsGrace = 30 * time.Second
	shutdownGrace = 2 * time.Minute
	flushGrace    = 15 * time.Second
)

func runServe(ctx context.Context, a *app, args []string) int {
	if len(args) > 0 && args[0] == "token" {
		return runToken(ctx, a, args[1:])
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() {
		fmt.Fprintln(a.stderr, "usage: sandbox-agent serve [flags]\n\nServes the HTTP API (docs/api-http.md) and the web inspector at /. Every\nrequest needs a bearer token: the admin's (in --token-file, generated there when\nmissing) or a tenant's (sandbox-agent serve token create). Agents, turns and\nevents are kept in --state; SIGINT or SIGTERM (or, with --stop-on-stdin-eof, the\nend of standard input) stops the server and leaves the sandboxes running for the\nnext start on the same state to adopt (with --state :memory: it removes them).\n\nsubcommands: serve token create|list|revoke (tenants' tokens)\n\nflags:")
		fs.PrintDefaults()
	}
	listen := fs.String("listen", defaultListen, "address to listen on (host:port; port 0 picks a free one)")
	tokenFile := fs.String("token-file", "", "file holding the bearer token; created (mode 0600) with a random token when missing (default ~/.config/sandbox-agent/serve-token)")
	readyFile := fs.String("ready-file", "", "write the address listened on (host:port) to this file once serving")
	noAudit := fs.Bool("no-audit", false, "do not write the audit trail")
	auditRoot := fs.String("audit-root", "", "audit root folder (default: audit_root)")
	statePath := fs.String("state", a.cli.state, "where agents, turns and tokens are kept: a SQLite file, a postgres:// URL (several replicas), or :memory: (default: the state key, else "+defaultStatePath()+")")
	instance := fs.String("instance", "", "the server's name, owner of its sandboxes: up to 63 letters, digits, '-', '_', '.' (replicas on one state share it; default serve-HOSTNAME)")
	tlsCert := fs.String("tls-cert", "", "serve HTTPS with this certificate (PEM; with --tls-key)")
	tlsKey := fs.String("tls-key", "", "the certificate's private key (PEM)")
	insecure := fs.Bool("allow-insecure-http", false, "allow listening beyond the loopback without TLS")
	stopOnEOF := fs.Bool("stop-on-stdin-eof", false, "stop, as on SIGTERM, once standard input ends (EOF) or fails: a parent process holding the pipe's other end stops serve by closing it, or by dying")
	ociRT := fs.String("oci-runtime", "", "OCI runtime of every sandbox, e.g. runsc for gVisor (default from config key oci_runtime, else the engine's); a create request may name another only from serve_oci_runtimes")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitError
	}
	if fs.NArg() > 0 {
		return a.fail(fmt.Errorf("serve: unexpected argument %q", fs.Arg(0)))
	}
	if err := a.useOCIRuntime(*ociRT); err != nil {
		return a.fail(fmt.Errorf("serve: %w", err))
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		return a.fail(fmt.Errorf("%w: serve: --tls-cert and --tls-key go together", sandboxagent.ErrInvalidArgument))
	}
	if *instance == "" {
		*instance = defaultInstance()
	}
	if *tokenFile == "" {
		*tokenFile = defaultTokenFile()
	}
	token, created, err := loadToken(*tokenFile)
	if err != nil {
		return a.fail(fmt.Errorf("serve: %w", err))
	}
	a.red.add(token)
	log := slog.New(slog.NewTextHandler(a.stderr, nil))
	if created {
		log.Info("generated a bearer token", "token_file", *tokenFile)
	}
	if *stopOnEOF {
		// The parent holding our stdin often holds our stderr too: once it
		// is gone, a log line to that pipe must not kill us (Go exits on
		// SIGPIPE for fds 1 and 2) before the sandboxes are removed.
		// Notify, not Ignore: the commands serve starts (git, image
		// builds) get the default disposition back.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
		var stop context.CancelFunc
		ctx, stop = context.WithCancel(ctx)
		defer stop()
		go watchStdin(serveStdin, func() {
			log.Info("standard input ended: stopping (--stop-on-stdin-eof)")
			stop()
		})
	}
	// One engine connection and one image source for every agent: they
	// start concurrently.
	if _, err := a.engine(ctx); err != nil {
		return a.fail(err)
	}
	src, err := a.imageSource(ctx)
	if err != nil {
		return a.fail(err)
	}
	if src != nil {
		a.images = &imageOnce{src: src}
	}
	st, err := openState(ctx, *statePath, true)
	if err != nil {
		return a.fail(fmt.Errorf("serve: %w", err))
	}
	defer st.Close()
	stateName := st.name
	starterOpts, err := a.serveStarter(ctx, *noAudit, *auditRoot, *instance)
	if err != nil {
		return a.fail(err)
	}
	if b := a.cli.serveTenantBudget; !b.Zero() {
		// Every tenant's budget, its count in the state: the replicas
		// on one database share it.
		starterOpts.Tenants, err = metering.NewTenants(metering.MeterOptions{
			Prices: a.cfg.Prices, Budget: b, Period: a.cli.serveTenantBudgetPeriod, Ledger: server.StoreLedger(st),
		})
		if err != nil {
			return a.fail(fmt.Errorf("serve: tenant budget: %w", err))
		}
	}
	// Prometheus' /metrics: the Go runtime's and the process's series,
	// and sandbox-agent's (telemetry/prom), fed by every agent's hooks.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := prom.New(reg, prom.Options{Engine: a.engineName(), Prices: a.cfg.Prices})
	if err != nil {
		return a.fail(fmt.Errorf("serve: metrics: %w", err))
	}
	starterOpts.Hooks = metrics.Hooks
	// OpenTelemetry traces, when the standard OTEL_EXPORTER_OTLP_*
	// variables name a collector.
	tp, err := tracing.FromEnv(ctx, a.getenv, "sandbox-agent", version)
	if err != nil {
		return a.fail(fmt.Errorf("serve: traces: %w", err))
	}
	var tracer trace.Tracer
	if tp != nil {
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				log.Warn("flush traces", "err", err)
			}
		}()
		tracer = tp.Tracer("github.com/sandbox-agent/sandbox-agent")
		starterOpts.Hooks = func(tenant string) telemetry.Hooks {
			return telemetry.Join(metrics.Hooks(tenant), tracing.Hooks(tracer, tenant))
		}
		log.Info("exporting traces over OTLP")
	}
	// Checkpoints: the engine's committed images (Docker, Podman: the
	// runtime lists and removes them) and the archives under
	// checkpoint_root (Kubernetes), removed by DELETE /v1/checkpoints/{id}.
	var ckEngine checkpoint.Engine
	if a.cli.runtime != "kubernetes" {
		ckEngine, _ = starterOpts.Runtime.(checkpoint.Engine)
	}
	ckRoot := starterOpts.Config.CheckpointRoot
	if ckRoot == "" {
		ckRoot = sandboxagent.DefaultConfig().CheckpointRoot
	}
	// Repositories: create requests' paths under serve_repo_root, their
	// uploaded bundles beside the state (a temporary folder without a
	// state file).
	repoDir, dropRepoDir, err := serveRepoDir(*statePath)
	if err != nil {
		return a.fail(fmt.Errorf("serve: %w", err))
	}
	defer dropRepoDir()
	if root := a.cli.serveRepoRoot; root != "" {
		if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
			return a.fail(fmt.Errorf("%w: serve_repo_root %s: not a folder", sandboxagent.ErrInvalidArgument, root))
		}
	}
	var srv *server.Server
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandbox_agent_agents",
		Help: "Agents this server drives (one sandbox each).", ConstLabels: prometheus.Labels{"engine": a.engineName()}},
		func() float64 { return float64(srv.Agents()) }))
	// Agents made ahead for the requests seen (serve_pool_size): closed,
	// their ready sandboxes removed, when serve stops.
	pools := server.NewPools(starterOpts, a.cli.servePoolSize, a.cli.servePoolMax)
	defer func() {
		if err := pools.Close(); err != nil {
			log.Warn("close the pools", "err", err)
		}
	}()
	srv, err = server.New(server.Options{
		Start: pools.Start, Adopt: server.NewAdopter(starterOpts), Store: st, Exclusive: st.exclusive,
		Instance: *instance, Engine: a.engineName(), Token: token, Version: version, Logger: log,
		MaxAgents: a.cli.serveMaxAgents, MaxConcurrentTurns: a.cli.serveMaxTurns, MaxBodyBytes: a.cli.serveMaxBodyBytes,
		TenantMaxAgents: a.cli.serveTenantMaxAgents, TenantMaxTurns: a.cli.serveTenantMaxTurns, LeaseTTL: a.cli.serveLeaseTTL,
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}), Tracer: tracer,
		Checkpoints: ckEngine, CheckpointRoot: ckRoot, TenantCheckpointBytes: a.cli.serveTenantCheckpointBytes,
		RepoRoot: a.cli.serveRepoRoot, RepoDir: repoDir,
	})
	if err != nil {
		return a.fail(err)
	}
	// The agents of an earlier run on this state: their interrupted turns
	// recorded before any request, their sandboxes adopted meanwhile.
	recovered, err := srv.Recover(ctx)
	if err != nil {
		return a.fail(fmt.Errorf("serve: %w", err))
	}
	go func() {
		r := <-recovered
		if r.Err != nil {
			log.Warn("recover agents", "adopted", r.Adopted, "lost", r.Lost, "err", r.Err)
		} else if r.Adopted+r.Lost > 0 {
			log.Info("recovered agents", "adopted", r.Adopted, "lost", r.Lost, "state", stateName, "took", r.Took.Round(time.Millisecond))
		}
	}()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return a.fail(fmt.Errorf("serve: %w", err))
	}
	addr := ln.Addr().(*net.TCPAddr)
	scheme := "http"
	if *tlsCert != "" {
		scheme = "https"
	} else if !addr.IP.IsLoopback() {
		if !*insecure {
			ln.Close()
			return a.fail(fmt.Errorf("%w: serve: %s is beyond the loopback: give --tls-cert and --tls-key, or --allow-insecure-http (TLS in front)", sandboxagent.ErrInvalidArgument, addr))
		}
		log.Warn("listening beyond the loopback without TLS (--allow-insecure-http)", "addr", addr.String())
	}
	// Every request's context ends when the server stops, so running
	// turns are aborted and event streams end before the shutdown waits.
	base, stopRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRequests()
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() {
		if *tlsCert != "" {
			served <- hs.ServeTLS(ln, *tlsCert, *tlsKey)
			return
		}
		served <- hs.Serve(ln)
	}()
	fmt.Fprintf(a.stderr, "sandbox-agent: listening on %s://%s (inspector at /, token in %s, state %s)\n", scheme, addr, *tokenFile, stateName)
	if *readyFile != "" {
		if err := writeFileAtomic(*readyFile, []byte(addr.String()+"\n"), 0o644); err != nil {
			hs.Close()
			return a.fail(fmt.Errorf("serve: ready file: %w", err))
		}
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	durable := *statePath != memoryState
	if durable {
		log.Info("shutting down: aborting turns; the sandboxes stay for the next start to adopt")
	} else {
		log.Info("shutting down: aborting turns, removing sandboxes")
	}
	stopRequests()
	// The requests first (their turns are aborted), with a bound of their
	// own: a client that reads nothing must not use up the sandboxes'
	// time.
	hctx, hcancel := context.WithTimeout(context.WithoutCancel(ctx), requestsGrace)
	if hs.Shutdown(hctx) != nil {
		_ = hs.Close()
	}
	hcancel()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	var closeErr error
	if durable {
		closeErr = srv.Shutdown(sctx)
	} else {
		closeErr = srv.Close(sctx)
	}
	if t := starterOpts.Tenants; t != nil {
		// The tenants' last charges, written in the background, reach
		// the state before it is closed (with time of their own: the
		// sandboxes' removal may have used up sctx).
		fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), flushGrace)
		if err := t.Flush(fctx); err != nil {
			log.Error("tenant budgets: the last charges were not saved", "err", err)
		}
		fcancel()
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return a.fail(fmt.Errorf("serve: %w", serveErr))
	}
	if closeErr != nil {
		return a.fail(fmt.Errorf("serve: %w", closeErr))
	}
	return exitOK
}

// serveStdin is what --stop-on-stdin-eof watches (tests replace it).
var serveStdin io.Reader = os.Stdin

// watchStdin reads r to its end, discarding what comes, then calls stop:
// at EOF, or at the first read error (a pipe whose writer is gone).
func watchStdin(r io.Reader, stop func()) {
	_, _ = io.Copy(io.Discard, r)
	stop()
}

// serveRepoDir is the folder of the bare repositories made of uploaded
// bundles: STATE.repos beside a SQLite state file (its agents outlive
// the process), else a temporary folder, removed by drop.
func serveRepoDir(statePath string) (dir string, drop func(), err error) {
	if statePath == "" {
		statePath = defaultStatePath()
	}
	if statePath != memoryState && !isPostgres(statePath) {
		return statePath + ".repos", func() {}, nil
	}
	dir, err = os.MkdirTemp("", "sandbox-agent-repos-")
	if err != nil {
		return "", nil, fmt.Errorf("repository folder: %w", err)
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

func defaultTokenFile() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		dir = "."
	}
	return filepath.Join(dir, "sandbox-agent", "serve-token")
}

// loadToken reads the token file, or creates it (0600, its folder 0700)
// with a fresh random token. A token file others can read is refused, as
// ssh refuses such a key.
func loadToken(path string) (token string, created bool, err error) {
	fi, err := os.Stat(path)
	switch {
	case err == nil:
		if fi.Mode().Perm()&0o077 != 0 {
			return "", false, fmt.Errorf("%w: token file %s has mode %v: want 0600 (chmod 600 %s)", sandboxagent.ErrInvalidArgument, path, fi.Mode().Perm(), path)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return "", false, fmt.Errorf("token file: %w", err)
		}
		tok := strings.TrimSpace(string(data))
		if len(tok) < 16 || strings.ContainsAny(tok, " \t\r\n") {
			return "", false, fmt.Errorf("%w: token file %s: want one token of at least 16 characters", sandboxagent.ErrInvalidArgument, path)
		}
		return tok, false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", false, fmt.Errorf("token file: %w", err)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", false, err
	}
	tok := hex.EncodeToString(b)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", false, fmt.Errorf("token file: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", false, fmt.Errorf("token file: %w", err)
	}
	_, err = f.WriteString(tok + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return "", false, fmt.Errorf("token file: %w", err)
	}
	return tok, true, nil
}

// writeFileAtomic writes data to path through a temporary file, so a
// reader never sees half of it.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".sandbox-agent-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// serveStarter starts the agent of a POST /v1/agents through
// server.NewStarter, with the library options ask uses: the request's
// fields as options, the fake model when the request carries a script,
// the request's endpoint when it names one (the admin's), else the real
// endpoint.
func (a *app) serveStarter(ctx context.Context, noAudit bool, auditRoot, instance string) (server.StarterOptions, error) {
	rt, err := a.runtime(ctx)
	if err != nil {
		return server.StarterOptions{}, err
	}
	hooks, err := a.sandboxHooks(ctx)
	if err != nil {
		return server.StarterOptions{}, err
	}
	cfg := a.agentConfig(&agentFlags{noAudit: noAudit, auditRoot: auditRoot})
	return server.StarterOptions{
		Runtime: rt, Config: &cfg, Options: append(hooks, sandboxagent.WithOwner(instance)), OCIRuntimes: a.cli.serveOCIRuntimes,
		Driver: func(ctx context.Context, req server.CreateRequest) (sandboxagent.Driver, func(), error) {
			if !slices.Contains(drivers.Names(), req.Driver) {
				return nil, nil, fmt.Errorf("%w: driver %q: want one of %s", sandboxagent.ErrInvalidArgument, req.Driver, strings.Join(drivers.Names(), ", "))
			}
			f := agentFlags{provider: "zhipuai-coding-plan"}
			if req.Endpoint != nil {
				ep, err := a.requestEndpoint(req.Driver, *req.Endpoint)
				if err != nil {
					return nil, nil, err
				}
				f.endpoint = &ep
			}
			if req.HasFakeModelScript() {
				script, err := fakemodel.ParseScript(req.FakeModelScript)
				if err != nil {
					return nil, nil, fmt.Errorf("%w: fake_model_script: %w", sandboxagent.ErrInvalidArgument, err)
				}
				f.fakeScript = &script
			}
			a.warnOpen(sandboxagent.Egress(req.Egress))
			return a.newDriver(req.Driver, &f)
		},
	}, nil
}

// imageOnce lets one agent at a time make a given image present: fifty
// agents asking for a missing image wait for one pull or build.
type imageOnce struct {
	src   sandboxagent.ImageSource
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func (o *imageOnce) ProvideImage(ctx context.Context, ref string) error {
	o.mu.Lock()
	if o.locks == nil {
		o.locks = map[string]*sync.Mutex{}
	}
	l := o.locks[ref]
	if l == nil {
		l = &sync.Mutex{}
		o.locks[ref] = l
	}
	o.mu.Unlock()
	l.Lock()
	defer l.Unlock()
	return o.src.ProvideImage(ctx, ref)
}

// defaultInstance is serve-HOSTNAME, as a label value (at most 63 of
// [A-Za-z0-9._-], alphanumeric at both ends).
func defaultInstance() string {
	host, _ := os.Hostname()
	b := []byte("serve-" + host)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '-'
		}
	}
	return strings.TrimRight(string(b[:min(len(b), 63)]), "-_.")
}

// engineName is the runtime setting, as the store records it.
func (a *app) engineName() string {
	if a.cli.runtime == "" {
		return "docker"
	}
	return a.cli.runtime
}
