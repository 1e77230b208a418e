package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	units "github.com/docker/go-units"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/config"
	"github.com/sandbox-agent/sandbox-agent/egressproxy"
	"github.com/sandbox-agent/sandbox-agent/gc"
	"github.com/sandbox-agent/sandbox-agent/internal/hardening"
	"github.com/sandbox-agent/sandbox-agent/internal/termsafe"
)

// defaultExecImage is the image exec uses when given none.
const defaultExecImage = "debian:stable-slim"

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// copySpec is one --upload HOST:CTR or --download CTR:HOST.
type copySpec struct{ host, ctr string }

// parseUpload splits HOST:CTR at the last ":/" (container paths are absolute).
func parseUpload(v string) (copySpec, error) {
	i := strings.LastIndex(v, ":/")
	if i <= 0 {
		return copySpec{}, fmt.Errorf("--upload %q: want HOST_PATH:/CONTAINER_PATH", v)
	}
	return copySpec{host: v[:i], ctr: v[i+1:]}, nil
}

// parseDownload splits CTR:HOST at the first ":".
func parseDownload(v string) (copySpec, error) {
	i := strings.Index(v, ":")
	if i <= 0 || !strings.HasPrefix(v, "/") || i == len(v)-1 {
		return copySpec{}, fmt.Errorf("--download %q: want /CONTAINER_PATH:HOST_PATH", v)
	}
	return copySpec{ctr: v[:i], host: v[i+1:]}, nil
}

// sandboxFlags are the flags every command that starts a sandbox shares.
type sandboxFlags struct {
	image     string
	network   string
	egress    string
	allow     multiFlag
	keepalive time.Duration
	memory    string
	pids      int64
	ociRT     string
	disk      string
	env       multiFlag
	uploads   multiFlag
	downloads multiFlag
}

func (f *sandboxFlags) register(fs *flag.FlagSet, defaultImage string) {
	fs.StringVar(&f.image, "image", defaultImage, "image to run")
	fs.StringVar(&f.network, "network", "", "engine network mode overriding the egress policy's (host, or a network name): an explicit loosening")
	fs.StringVar(&f.egress, "egress", "", "network policy: none (no network; exec's default), model (only the model proxy; ask's default) or open (unrestricted bridge network)")
	fs.Var(&f.allow, "allow-host", "HOST or *.DOMAIN (optionally :PORT) reachable through the egress proxy (repeatable)")
	fs.DurationVar(&f.keepalive, "keepalive", 0, "idle time after which a left-behind sandbox removes itself (default from config, 1h)")
	fs.StringVar(&f.memory, "memory", "", "memory limit of the sandbox, e.g. 512m or 2g (default 4g; swap is never added)")
	fs.Int64Var(&f.pids, "pids", 0, "process limit of the sandbox (default 1024)")
	fs.StringVar(&f.disk, "disk", "", "disk limit of the sandbox, e.g. 10g, or none (default from config key disk, else 10g where the engine can enforce it)")
	fs.StringVar(&f.ociRT, "oci-runtime", "", "OCI runtime of the sandbox, e.g. runsc for gVisor (a RuntimeClass on Kubernetes; default from config key oci_runtime, else the engine's)")
	fs.Var(&f.env, "env", "KEY=VALUE in the sandbox (repeatable)")
	fs.Var(&f.uploads, "upload", "HOST:CTR copy a host file or directory in before running (repeatable)")
	fs.Var(&f.downloads, "download", "CTR:HOST copy a container file or directory out afterwards (repeatable)")
}

func (f *sandboxFlags) options(cfg sandboxagent.Config) (sandboxagent.SandboxOptions, []copySpec, []copySpec, error) {
	opts := sandboxagent.SandboxOptions{Image: f.image, Config: cfg, Network: f.network, Keepalive: f.keepalive, Env: map[string]string{}}
	egress, err := sandboxagent.ParseEgress(f.egress)
	if err != nil {
		return opts, nil, nil, fmt.Errorf("--egress: %w", err)
	}
	opts.Egress = egress
	if len(f.allow) > 0 {
		if err := sandboxagent.CheckAllowHosts(f.allow); err != nil {
			return opts, nil, nil, fmt.Errorf("--allow-host: %w", err)
		}
		opts.AllowHosts = f.allow
	}
	if f.memory != "" {
		n, err := units.RAMInBytes(f.memory)
		if err != nil || n < 6<<20 {
			return opts, nil, nil, fmt.Errorf("--memory %q: want a size of at least 6m, like 512m or 2g", f.memory)
		}
		opts.MemoryBytes = n
	}
	if f.pids < 0 {
		return opts, nil, nil, fmt.Errorf("--pids %d: want a positive number", f.pids)
	}
	if err := hardening.CheckOCIRuntime(f.ociRT); err != nil {
		return opts, nil, nil, fmt.Errorf("--oci-runtime: %w", err)
	}
	opts.OCIRuntime = f.ociRT
	if f.disk != "" {
		if opts.DiskBytes, err = config.ParseDisk(f.disk); err != nil {
			return opts, nil, nil, fmt.Errorf("--disk: %w", err)
		}
	}
	opts.PidsLimit = f.pids
	for _, kv := range f.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return opts, nil, nil, fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
		opts.Env[k] = v
	}
	var ups, downs []copySpec
	for _, u := range f.uploads {
		c, err := parseUpload(u)
		if err != nil {
			return opts, nil, nil, err
		}
		ups = append(ups, c)
	}
	for _, d := range f.downloads {
		c, err := parseDownload(d)
		if err != nil {
			return opts, nil, nil, err
		}
		downs = append(downs, c)
	}
	return opts, ups, downs, nil
}

// download performs the --download copies, reporting skipped entries.
func (a *app) download(ctx context.Context, sb *sandboxagent.Sandbox, downs []copySpec) error {
	var errs []error
	for _, d := range downs {
		rep, err := sb.Download(ctx, d.ctr, d.host)
		a.reportSkipped(d.ctr, rep)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// reportSkipped prints the entries a download skipped. The names come
// from the sandbox: one line each, escaped.
func (a *app) reportSkipped(ctr string, rep sandboxagent.DownloadReport) {
	for _, s := range rep.Skipped {
		fmt.Fprintf(a.stderr, "sandbox-agent: download %s: skipped %s: %s\n", line(ctr), line(s.Name), line(s.Reason))
	}
	if rep.SkippedOmitted > 0 {
		fmt.Fprintf(a.stderr, "sandbox-agent: download %s: skipped %d more\n", line(ctr), rep.SkippedOmitted)
	}
}

func runExec(ctx context.Context, a *app, args []string) int {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() {
		fmt.Fprintln(a.stderr, "usage: sandbox-agent exec [flags] -- CMD [ARG...]\n\nRuns CMD in a throw-away sandbox and exits with its exit code (124 on timeout,\n125 when sandbox-agent itself fails).\n\nflags:")
		fs.PrintDefaults()
	}
	var sf sandboxFlags
	sf.register(fs, defaultExecImage)
	timeout := fs.Duration("timeout", 0, "kill CMD's process tree after this long (default: timeout_exec)")
	workdir := fs.String("workdir", "", "working directory of CMD")
	user := fs.String("user", "", "user to run CMD as (default: the image's)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitError
	}
	cmd := fs.Args()
	if len(cmd) == 0 {
		return a.fail(errors.New("exec: no command given (usage: sandbox-agent exec [flags] -- CMD [ARG...])"))
	}
	opts, ups, downs, err := sf.options(a.cfg)
	if err != nil {
		return a.fail(fmt.Errorf("exec: %w", err))
	}
	rt, err := a.runtime(ctx)
	if err != nil {
		return a.fail(err)
	}
	a.egressNotes(&opts)
	if opts.Images, err = a.imageSource(ctx); err != nil {
		return a.fail(err)
	}
	stdout, stderr, flush := a.execStreams()
	req := sandboxagent.ExecRequest{
		Cmd: cmd, WorkDir: *workdir, User: *user, Timeout: *timeout,
		Stdin: nil, Stdout: stdout, Stderr: stderr,
	}
	if len(ups) == 0 && len(downs) == 0 && sandboxagent.CanRunOnce(ctx, rt, opts) {
		// Nothing to copy: the command is the container's own process.
		res, err := sandboxagent.RunOnce(ctx, rt, opts, req)
		flush()
		if errors.Is(err, sandboxagent.ErrLeftBehind) {
			// The command ran: its exit code stands, as after a failed
			// Close below.
			fmt.Fprintf(a.stderr, "sandbox-agent: %s\n", errText(err))
			err = nil
		}
		code, _ := a.execResult(ctx, res, err)
		return code
	}
	sb, err := sandboxagent.NewSandbox(ctx, rt, opts)
	if err != nil {
		return a.fail(err)
	}
	defer sb.Close()
	for _, u := range ups {
		if err := sb.Upload(ctx, u.host, u.ctr); err != nil {
			return a.fail(err)
		}
	}
	res, err := sb.Run(ctx, req)
	flush()
	if code, failed := a.execResult(ctx, res, err); failed {
		return code
	}
	// Downloads run even after a failure or timeout: partial results are
	// often what one wants to look at. They use a fresh context so an
	// interrupt does not also lose them.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.Timeouts.Copy)
	defer cancel()
	if err := a.download(dctx, sb, downs); err != nil {
		return a.fail(err)
	}
	if err := sb.Close(); err != nil {
		fmt.Fprintf(a.stderr, "sandbox-agent: %s\n", errText(err))
	}
	return res.ExitCode
}

// execResult reports CMD's result on stderr and returns exec's exit code:
// CMD's, 124 on timeout, exitError when sandbox-agent failed (failed).
func (a *app) execResult(ctx context.Context, res sandboxagent.ExecResult, err error) (code int, failed bool) {
	var rerr *sandboxagent.ResourceError
	switch {
	case errors.As(err, &rerr):
		// CMD hit a limit: say so, keep its exit code (137 for an OOM
		// kill) and still download what it left.
		fmt.Fprintf(a.stderr, "sandbox-agent: %s\n", errText(err))
	case err != nil && !res.TimedOut:
		return a.fail(err), true
	}
	if res.TimedOut {
		if ctx.Err() != nil {
			fmt.Fprintln(a.stderr, "sandbox-agent: interrupted; command killed")
		} else {
			fmt.Fprintln(a.stderr, "sandbox-agent: command timed out; its processes were killed")
		}
	}
	return res.ExitCode, false
}

// execStreams are where CMD's stdout and stderr go. They are data, passed
// through like docker exec's, so byte-exact into a pipe or a file; only a
// terminal gets them escaped (termsafe), as a terminal would act on them.
// Secrets are not redacted there: exec's sandbox is given no key.
func (a *app) execStreams() (stdout, stderr io.Writer, flush func()) {
	stdout, stderr = a.rawStdout, a.rawStderr
	var ws []*termsafe.Writer
	if isTerminal(stdout) {
		w := termsafe.NewWriter(stdout)
		stdout, ws = w, append(ws, w)
	}
	if isTerminal(stderr) {
		w := termsafe.NewWriter(stderr)
		stderr, ws = w, append(ws, w)
	}
	return stdout, stderr, func() {
		for _, w := range ws {
			_ = w.Flush()
		}
	}
}

func runGC(ctx context.Context, a *app, args []string) int {
	fs := flag.NewFlagSet("gc", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	all := fs.Bool("all", false, "remove every sandbox of ours, even ones whose owner still runs")
	dry := fs.Bool("dry-run", false, "only report")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitError
	}
	rt, err := a.runtime(ctx)
	if err != nil {
		return a.fail(err)
	}
	res, err := gc.Run(ctx, rt, gc.Options{All: *all, DryRun: *dry})
	verb := "removed"
	if *dry {
		verb = "would remove"
	}
	for _, e := range res.Removed {
		fmt.Fprintf(a.stdout, "%s %s %s (%s)\n", verb, line(shortID(e.ID)), line(e.Name), line(e.Reason))
	}
	for _, e := range res.Kept {
		fmt.Fprintf(a.stdout, "kept %s %s (%s)\n", line(shortID(e.ID)), line(e.Name), line(e.Reason))
	}
	for _, d := range res.SocketDirs {
		fmt.Fprintf(a.stdout, "%s socket folder %s (owner gone)\n", verb, line(d))
	}
	eng, ckErr := a.checkpointEngine(ctx)
	if ckErr == nil {
		var ck gc.CheckpointResult
		ck, ckErr = gc.Checkpoints(ctx, eng, a.cfg.CheckpointRoot, gc.CheckpointOptions{Retention: a.cli.checkpointRetention, DryRun: *dry})
		a.printCheckpointGC(ck, verb)
	}
	if err := errors.Join(err, ckErr); err != nil {
		return a.fail(err)
	}
	return exitOK
}

// printCheckpointGC prints what gc did (verb) with the checkpoints.
func (a *app) printCheckpointGC(res gc.CheckpointResult, verb string) {
	name := func(c sandboxagent.Checkpoint) string {
		if c.Name == "" {
			return "-"
		}
		return line(c.Name)
	}
	for _, e := range res.Removed {
		fmt.Fprintf(a.stdout, "%s checkpoint %s %s (%s)\n", verb, line(e.Checkpoint.ID), name(e.Checkpoint), line(e.Reason))
	}
	for _, e := range res.Kept {
		fmt.Fprintf(a.stdout, "kept checkpoint %s %s (%s)\n", line(e.Checkpoint.ID), name(e.Checkpoint), line(e.Reason))
	}
	for _, d := range res.Leftovers {
		fmt.Fprintf(a.stdout, "%s checkpoint folder %s (never completed)\n", verb, line(d))
	}
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// version is set at release time with -ldflags "-X main.version=...".
var version = "dev"

func runVersion(ctx context.Context, a *app, args []string) int {
	fmt.Fprintf(a.stdout, "sandbox-agent %s\n", version)
	eng, err := a.engine(ctx)
	if err != nil {
		return a.fail(err)
	}
	info, err := sandboxagent.EngineInfo{}, errPingUnknown
	if eng.version != nil {
		info, err = eng.version(ctx)
	}
	if err != nil {
		info, err = eng.rt.Info(ctx) // the engine's full answer, or why it has none
	}
	if err != nil {
		fmt.Fprintf(a.stdout, "engine: unavailable (%s)\n", line(err.Error()))
		return exitOK
	}
	fmt.Fprintf(a.stdout, "engine: %s %s (API %s)\n", line(info.Name), line(info.Version), line(info.APIVersion))
	return exitOK
}

// egressNotes warns about an open network and reports every denied
// egress attempt on stderr.
func (a *app) egressNotes(opts *sandboxagent.SandboxOptions) {
	a.warnOpen(opts.Egress)
	opts.OnEgress = a.egressDenied
}

// warnOpen warns, on stderr, of a sandbox whose policy (egress, else
// egress from the configuration) is open.
func (a *app) warnOpen(egress sandboxagent.Egress) {
	if egress == "" {
		egress = a.cfg.Egress
	}
	if egress == sandboxagent.EgressOpen {
		fmt.Fprintln(a.stderr, "sandbox-agent: warning: egress open: the sandbox can reach the internet and the host's services")
	}
}

// egressDenied reports a denied egress attempt on stderr.
func (a *app) egressDenied(r egressproxy.Record) {
	if !r.Allowed {
		// The host is what the sandbox asked for.
		fmt.Fprintf(a.stderr, "sandbox-agent: egress to %s:%d denied: %s\n", line(r.Host), r.Port, line(r.Reason))
	}
}
