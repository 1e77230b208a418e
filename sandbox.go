package sandboxagent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-agent/sandbox-agent/egressproxy"
	"github.com/sandbox-agent/sandbox-agent/internal/boundary"
	"github.com/sandbox-agent/sandbox-agent/internal/guest"
	"github.com/sandbox-agent/sandbox-agent/internal/hardening"
	"github.com/sandbox-agent/sandbox-agent/internal/labels"
	"github.com/sandbox-agent/sandbox-agent/safetar"
	"github.com/sandbox-agent/sandbox-agent/seccomp"
	"github.com/sandbox-agent/sandbox-agent/telemetry"
)

// Labels every sandbox container carries. gc finds leftovers by them.
const (
	LabelManaged   = "sandbox-agent.managed" // "true"
	LabelCreated   = "sandbox-agent.created" // Unix seconds (a valid value on every engine, Kubernetes too)
	LabelKeepalive = "sandbox-agent.keepalive"
	// LabelMaxLifetime is the sandbox's hard lifetime in seconds (0: none).
	LabelMaxLifetime = "sandbox-agent.max-lifetime"
	LabelHost        = "sandbox-agent.host"
	LabelPID         = "sandbox-agent.pid"
)

// DefaultCaps is the documented minimum of capabilities a sandbox keeps
// (everything else is dropped): enough for root inside the container to
// own and fix files, switch to an unprivileged user and signal its own
// processes. Raw sockets, mknod, chroot, setfcap, net_bind_service and
// audit_write — in Docker's default set — are dropped.
var DefaultCaps = []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID"}

// Resource defaults of a sandbox.
const (
	defaultMemoryBytes = 4 << 30
	defaultPidsLimit   = 1024
	defaultCPUs        = 2.0
	defaultNetwork     = "none"
)

// SandboxOptions describes one sandbox. The zero value of every hardening
// field is the hardened choice; loosening is an explicit field.
type SandboxOptions struct {
	// Image is required: the image the container runs.
	Image string
	// Config supplies timeouts, keepalive and caps; zero fields take the
	// built-in defaults.
	Config Config

	Name    string            // container name; default sandbox-agent-<random>
	Env     map[string]string // environment of the container and every exec
	User    string            // default: the image's user
	WorkDir string            // default: the image's working directory
	Labels  map[string]string // extra labels (ours are always added)
	// Keepalive overrides Config.Keepalive for this sandbox.
	Keepalive time.Duration
	// MaxLifetime overrides Config.MaxLifetime for this sandbox: the
	// container stops (and removes itself) this long after it started,
	// busy or not. 0 takes Config.MaxLifetime; a negative value is none.
	MaxLifetime time.Duration

	// Egress is the network policy (default EgressNone: no network at
	// all; EgressOpen: the engine's bridge network, an explicit opt-in).
	Egress Egress
	// AllowHosts are host names ("registry.npmjs.org", "*.example.com",
	// optionally ":PORT"; without a port 80 and 443) reachable through the
	// egress proxy on the host, which resolves them itself and refuses
	// private, loopback and link-local addresses. Every exec gets
	// HTTP(S)_PROXY pointing at it; nothing else leaves the sandbox.
	AllowHosts []string
	// OnEgress receives every decision of the egress proxy (allowed
	// connections when they end, denials at once).
	OnEgress func(egressproxy.Record)
	// Hooks are told of the sandbox's commands (Exec; OnEgress has its
	// egress decisions).
	Hooks telemetry.Hooks
	// Network overrides the engine's network mode that Egress implies
	// ("none", or "bridge" for EgressOpen): "host" or a network name is an
	// explicit loosening.
	Network    string
	ExtraHosts []string // host:ip entries for /etc/hosts

	// services are host proxies the sandbox reaches through the relay
	// (the agent's model proxy).
	services map[string]http.Handler

	MemoryBytes int64 // default 4 GiB; swap is always equal (no swap)
	// DiskBytes caps the sandbox's disk use, on Docker's btrfs storage its
	// image's layers too (0: Config.DiskBytes, else 10 GiB where the engine
	// can enforce a limit; negative: none). A limit asked explicitly that the
	// engine cannot enforce fails the start (ErrHardening, setting disk).
	DiskBytes int64
	CPUs      float64 // default 2
	PidsLimit int64   // default 1024
	// Caps are the capabilities kept after dropping ALL; nil means
	// DefaultCaps, an empty non-nil slice means none.
	Caps []string
	// ReadonlyRootfs makes the root filesystem read-only (uploads and
	// downloads through the engine then fail on it; mount tmpfs for
	// scratch space).
	ReadonlyRootfs bool
	Tmpfs          map[string]string
	// OCIRuntime selects another OCI runtime, e.g. "runsc" (gVisor);
	// "" is Config.OCIRuntime.
	OCIRuntime string
	// Images makes the image present when the engine lacks it (pull or
	// build, by policy); nil: a missing image is ErrImageNotFound. It runs
	// outside timeout_start (a build can take minutes).
	Images ImageSource
	// Loosening, each explicit.
	Privileged         bool
	AllowNewPrivileges bool
	NoInit             bool
	// EngineSeccomp runs the sandbox under the engine's default seccomp
	// profile instead of sandbox-agent's (package seccomp), which refuses
	// more: io_uring, userfaultfd, bpf, perf_event_open, the keyring,
	// AF_VSOCK sockets.
	EngineSeccomp bool

	// TrustCACert is a host PEM bundle installed into the sandbox before
	// it starts, with NODE_EXTRA_CA_CERTS and SSL_CERT_FILE pointing at it
	// (for TLS-intercepting proxies).
	TrustCACert string
}

// caPath is where TrustCACert lands inside the container.
const caPath = "/sandbox-agent/ca.pem"

// Sandbox is one running container. Close destroys it; if the host
// process dies first, the container removes itself after Keepalive idle
// (no command the host started running), and in any case at MaxLifetime.
type Sandbox struct {
	rt      Runtime
	id      string
	name    string
	cfg     Config
	user    string
	workdir string // the working directory asked for ("" = the image's)

	ownerMu sync.Mutex
	owner   *safetar.Owner // the user's uid/gid, once looked up

	hooks telemetry.Hooks

	memoryBytes, pidsLimit, diskBytes int64
	diskMu                            sync.Mutex
	diskUsed                          int64     // the engine's last measure (checkDisk)
	diskMeasured                      time.Time // when it was taken
	limitsMu                          sync.Mutex
	seen                              ResourceEvents // counters at the last check

	host    *boundary.Host    // the relay's host side; nil without proxies
	sockets string            // host.Dir() when bind-mounted (AgentState.SocketDir)
	env     map[string]string // added to every exec (proxy variables)
	egress  Egress
	allow   []string

	closeMu sync.Mutex
	removed bool  // the container is gone (Close succeeded once)
	hostErr error // closing the proxies (once)
	closed  chan struct{}
	// writes counts file writes into the sandbox (uploads, WriteFile,
	// rules, skills): a CLI warmed before one does not see it.
	writes atomic.Uint64
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	orDefault(&c.Timeouts.Start, d.Timeouts.Start)
	orDefault(&c.Timeouts.Exec, d.Timeouts.Exec)
	orDefault(&c.Timeouts.Ask, d.Timeouts.Ask)
	orDefault(&c.Timeouts.Copy, d.Timeouts.Copy)
	orDefault(&c.Keepalive, d.Keepalive)
	orDefault(&c.MaxDownloadBytes, d.MaxDownloadBytes)
	orDefault(&c.MaxDownloadEntries, d.MaxDownloadEntries)
	orDefault(&c.MaxDownloadDepth, d.MaxDownloadDepth)
	orDefault(&c.MaxOutputBytes, d.MaxOutputBytes)
	orDefault(&c.CheckpointMaxBytes, d.CheckpointMaxBytes)
	if c.CheckpointRoot == "" {
		c.CheckpointRoot = d.CheckpointRoot
	}
	// The bounds on a turn's output have no "unlimited": a zero is unset.
	l, dl := &c.Limits, d.Limits
	orDefault(&l.TurnEventBytes, dl.TurnEventBytes)
	orDefault(&l.AuditTurnBytes, dl.AuditTurnBytes)
	orDefault(&l.AuditSessionBytes, dl.AuditSessionBytes)
	orDefault(&l.AuditDayBytes, dl.AuditDayBytes)
	orDefault(&l.TurnLines, dl.TurnLines)
	orDefault(&l.TurnEvents, dl.TurnEvents)
	return c
}

// orDefault sets *v to d when it is zero or negative (unset).
func orDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

func newName() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "sandbox-agent-" + hex.EncodeToString(b)
}

// NewSandbox creates, checks and starts a hardened container. It fails
// with ErrImageNotFound, ErrEngineUnavailable or a *HardeningError; on any
// failure nothing is left behind.
func NewSandbox(ctx context.Context, rt Runtime, opts SandboxOptions) (*Sandbox, error) {
	if rt == nil {
		return nil, fmt.Errorf("%w: nil Runtime", ErrInvalidArgument)
	}
	if opts.Image == "" {
		return nil, fmt.Errorf("%w: no image given", ErrInvalidArgument)
	}
	cfg := opts.Config.withDefaults()
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeouts.Start)
	defer cancel()
	opts = opts.withConfigDefaults(cfg)
	spec, err := sandboxSpec(ctx, rt, opts, cfg)
	if err != nil {
		return nil, err
	}
	host, err := openBoundary(opts, boundary.Open)
	if err != nil {
		return nil, err
	}
	if host != nil {
		sweepLeftoverSockets(rt) // where we add one, clear the dead's
	}
	if host != nil && FeaturesOf(rt).BindMounts {
		mountSockets(&spec, host.Dir())
	}
	id, ctx, cancelRetry, err := createContainer(ctx, parent, rt, spec, opts.Images, cfg.Timeouts.Start)
	defer cancelRetry()
	if err != nil {
		if host != nil {
			host.Close()
		}
		return nil, err
	}
	s := newSandbox(rt, id, spec, opts, cfg, host)
	fail := func(err error) (*Sandbox, error) {
		_ = s.Close()
		return nil, startErr(ctx, err)
	}
	st, err := rt.Inspect(ctx, id)
	if err != nil {
		return fail(err)
	}
	if err := errors.Join(checkHardening(spec, st), checkLogs(st)); err != nil {
		return fail(err)
	}
	s.pidsLimit = st.PidsLimit // the one enforced (a node's may be stricter)
	if err := rt.Start(ctx, id); err != nil {
		return fail(err)
	}
	if err := s.relay(ctx); err != nil {
		return fail(err)
	}
	return s, nil
}

// withConfigDefaults fills the egress policy and allow-list from cfg.
func (opts SandboxOptions) withConfigDefaults(cfg Config) SandboxOptions {
	if opts.Egress == "" {
		opts.Egress = cfg.Egress
	}
	if opts.AllowHosts == nil {
		opts.AllowHosts = cfg.AllowHosts
	}
	return opts
}

// sandboxSpec is the container spec of a sandbox with opts on rt: the
// hardened spec, the default disk limit where the engine enforces one,
// the seccomp profile as rt can apply it.
func sandboxSpec(ctx context.Context, rt Runtime, opts SandboxOptions, cfg Config) (ContainerSpec, error) {
	spec, err := containerSpec(opts, cfg)
	if err != nil {
		return spec, err
	}
	if opts.DiskBytes == 0 && cfg.DiskBytes == 0 {
		// The default limit, where the engine enforces one; elsewhere
		// none (docs/security.md): a default cannot fail every start.
		var quotas error = errors.New("no disk quotas")
		switch dq := rt.(type) {
		case imageDiskQuotas:
			quotas = dq.DiskQuotasOf(ctx, spec.Image)
		case diskQuotas:
			quotas = dq.DiskQuotas(ctx)
		}
		if quotas == nil {
			spec.DiskBytes = hardening.DefaultDiskBytes
		}
	}
	switch {
	case !FeaturesOf(rt).Seccomp:
		spec.Seccomp = nil // the node's RuntimeDefault (docs/kubernetes.md)
	case spec.Seccomp != nil:
		spec.Labels[labels.Seccomp] = seccomp.Digest(spec.Seccomp)
	}
	return spec, nil
}

// newSandbox is the Sandbox of container id, made from spec and opts.
func newSandbox(rt Runtime, id string, spec ContainerSpec, opts SandboxOptions, cfg Config, host *boundary.Host) *Sandbox {
	s := &Sandbox{
		rt: rt, id: id, name: spec.Name, cfg: cfg, user: opts.User, workdir: opts.WorkDir, closed: make(chan struct{}),
		memoryBytes: spec.MemoryBytes, pidsLimit: spec.PidsLimit, diskBytes: spec.DiskBytes, host: host, egress: opts.Egress, allow: opts.AllowHosts,
		hooks: opts.Hooks,
	}
	if len(spec.Mounts) > 0 {
		s.sockets = spec.Mounts[0].Source
	}
	return s
}

// relay starts the sandbox's end of its proxies: forward.pl where the
// sockets are mounted, else the exec tunnel.
func (s *Sandbox) relay(ctx context.Context) error {
	if s.host == nil {
		return nil
	}
	relay, exec := s.host.Relay, s.execAsRoot
	if !FeaturesOf(s.rt).BindMounts {
		relay, exec = s.host.StartTunnel, s.execTunnel
	}
	if err := relay(ctx, exec); err != nil {
		return err
	}
	s.useProxies()
	return nil
}

// useProxies points the sandbox's commands at the egress proxy, once its
// port is known.
func (s *Sandbox) useProxies() {
	if s.host.Serves(boundary.ServiceEgress) {
		s.env = boundary.ProxyEnv(s.host.URL(boundary.ServiceEgress))
	}
}

// mountSockets mounts the socket folder dir read-only at SocketDir, the
// one mount of a sandbox.
func mountSockets(spec *ContainerSpec, dir string) {
	spec.Mounts = append(spec.Mounts, Mount{Source: dir, Target: boundary.SocketDir, ReadOnly: true})
	spec.Labels[labels.Sockets] = filepath.Base(dir)
}

// openBoundary checks the egress options and opens the host side of the
// sandbox's proxies (nil when it needs none) with open: boundary.Open, or
// for an adopted sandbox its own folder again.
func openBoundary(opts SandboxOptions, open func(map[string]http.Handler) (*boundary.Host, error)) (*boundary.Host, error) {
	if _, err := ParseEgress(string(opts.Egress)); err != nil {
		return nil, err
	}
	if err := CheckAllowHosts(opts.AllowHosts); err != nil {
		return nil, err
	}
	services := map[string]http.Handler{}
	for k, v := range opts.services {
		services[k] = v
	}
	if len(opts.AllowHosts) > 0 {
		ep, err := egressproxy.New(egressproxy.Options{Allow: opts.AllowHosts, Log: opts.OnEgress})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
		services[boundary.ServiceEgress] = ep
	}
	if len(services) == 0 {
		return nil, nil
	}
	return open(services)
}

// execAsRoot is how the boundary starts forward.pl: as root (the
// sandbox's user cannot kill it), under timeout_start, its output
// captured as Run captures.
func (s *Sandbox) execAsRoot(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	res, err := s.Run(ctx, ExecRequest{Cmd: args, User: "0", Stdin: stdin, Timeout: s.cfg.Timeouts.Start})
	stdout.Write(res.Stdout)
	stderr.Write(res.Stderr)
	return res.ExitCode, err
}

// execTunnel is how the boundary runs tunnel.pl: one long exec straight
// on the runtime, until the tunnel closes.
func (s *Sandbox) execTunnel(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	code, err := s.rt.Exec(ctx, s.id, RuntimeExec{Cmd: args, Stdin: stdin, Stdout: stdout, Stderr: stderr})
	if errors.Is(err, ErrUnsupportedByRuntime) {
		err = boundary.Refused(err)
	}
	return code, err
}

// createContainer creates the container, vetting its image first (an
// ImageSource's CheckImage) and, when the engine lacks the image, having images
// provide it — outside timeout_start (a build takes minutes) — then
// creating again under a fresh timeout_start. It returns the context the
// start goes on with and its cancel (always non-nil).
func createContainer(ctx, parent context.Context, rt Runtime, spec ContainerSpec, images ImageSource, timeout time.Duration) (string, context.Context, context.CancelFunc, error) {
	cancel := func() {}
	if c, ok := images.(interface {
		CheckImage(ctx context.Context, ref string) error
	}); ok {
		if err := c.CheckImage(ctx, spec.Image); err != nil {
			return "", ctx, cancel, startErr(ctx, err)
		}
	}
	id, err := rt.Create(ctx, spec)
	if errors.Is(err, ErrImageNotFound) && images != nil {
		if err := images.ProvideImage(parent, spec.Image); err != nil {
			return "", ctx, cancel, fmt.Errorf("start sandbox: %w", err) // not startErr: it ran outside timeout_start
		}
		ctx, cancel = context.WithTimeout(parent, timeout)
		id, err = rt.Create(ctx, spec)
	}
	if err != nil {
		return "", ctx, cancel, startErr(ctx, err)
	}
	return id, ctx, cancel, nil
}

// startErr turns a start-deadline expiry into ErrTimeout.
func startErr(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && !errors.Is(err, ErrTimeout) {
		return fmt.Errorf("start sandbox: %w (timeout_start): %w", ErrTimeout, err)
	}
	return fmt.Errorf("start sandbox: %w", err)
}

func containerSpec(opts SandboxOptions, cfg Config) (ContainerSpec, error) {
	keepalive, lifetime := opts.Keepalive, opts.MaxLifetime
	if keepalive <= 0 {
		keepalive = cfg.Keepalive
	}
	if lifetime == 0 {
		lifetime = cfg.MaxLifetime
	}
	cmd, kaSecs, lifeSecs := guest.KeepaliveCmd(keepalive, lifetime)
	name := opts.Name
	if name == "" {
		name = newName()
	}
	env := make([]string, 0, len(opts.Env)+2)
	for k, v := range opts.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return ContainerSpec{}, fmt.Errorf("%w: environment variable name %q", ErrInvalidArgument, k)
		}
		env = append(env, k+"="+v)
	}
	if opts.TrustCACert != "" {
		env = append(env, "NODE_EXTRA_CA_CERTS="+caPath, "SSL_CERT_FILE="+caPath)
	}
	sort.Strings(env)

	host, _ := os.Hostname()
	labels := map[string]string{}
	for k, v := range opts.Labels {
		labels[k] = v
	}
	labels[LabelManaged] = "true"
	labels[LabelCreated] = strconv.FormatInt(time.Now().Unix(), 10)
	labels[LabelKeepalive] = strconv.FormatInt(kaSecs, 10)
	labels[LabelMaxLifetime] = strconv.FormatInt(lifeSecs, 10)
	labels[LabelHost] = host
	labels[LabelPID] = strconv.Itoa(os.Getpid())

	caps := opts.Caps
	if caps == nil {
		caps = DefaultCaps
	}
	mem := opts.MemoryBytes
	if mem <= 0 {
		mem = defaultMemoryBytes
	}
	cpus := opts.CPUs
	if cpus <= 0 {
		cpus = defaultCPUs
	}
	pids := opts.PidsLimit
	if pids <= 0 {
		pids = defaultPidsLimit
	}
	disk := opts.DiskBytes
	if disk == 0 {
		disk = cfg.DiskBytes
	}
	if disk < 0 {
		disk = 0
	}
	network := opts.Network
	if network == "" {
		network = defaultNetwork
		if opts.Egress == EgressOpen {
			network = "bridge"
		}
	}
	ociRuntime := opts.OCIRuntime
	if ociRuntime == "" {
		ociRuntime = cfg.OCIRuntime
	}
	if err := hardening.CheckOCIRuntime(ociRuntime); err != nil {
		return ContainerSpec{}, err
	}
	var profile []byte
	if !opts.EngineSeccomp && !opts.Privileged { // privileged: no filter at all
		profile = seccomp.Profile()
	}
	var files []File
	if opts.TrustCACert != "" {
		pem, err := os.ReadFile(opts.TrustCACert)
		if err != nil {
			return ContainerSpec{}, fmt.Errorf("%w: trust CA cert: %w", ErrInvalidArgument, err)
		}
		files = append(files, File{Path: caPath, Data: pem, Mode: 0o644})
	}
	return ContainerSpec{
		Name:            name,
		Image:           opts.Image,
		Cmd:             cmd,
		Env:             env,
		User:            opts.User,
		WorkDir:         opts.WorkDir,
		Labels:          labels,
		AutoRemove:      true,
		Privileged:      opts.Privileged,
		CapDrop:         []string{"ALL"},
		CapAdd:          caps,
		NoNewPrivileges: !opts.AllowNewPrivileges,
		Files:           files,
		ReadonlyRootfs:  opts.ReadonlyRootfs,
		Init:            !opts.NoInit,
		Seccomp:         profile,
		PidsLimit:       pids,
		MemoryBytes:     mem,
		DiskBytes:       disk,
		MemorySwap:      mem,
		NanoCPUs:        int64(cpus * 1e9),
		NetworkMode:     network,
		Tmpfs:           opts.Tmpfs,
		Runtime:         ociRuntime,
		ExtraHosts:      opts.ExtraHosts,
	}, nil
}

// diskQuotas is a Runtime that can tell whether its engine enforces
// ContainerSpec.DiskBytes: nil when it does, else why not.
type diskQuotas interface {
	DiskQuotas(ctx context.Context) error
}

// imageDiskQuotas is a diskQuotas that can answer from an image's
// record, more cheaply than from the engine's description.
type imageDiskQuotas interface {
	DiskQuotasOf(ctx context.Context, image string) error
}

// checkLogs refuses a new sandbox whose main process's output the engine
// logs to the host (an engine that ignored the log driver asked). Not a
// hardening setting adoption checks: older sandboxes had engine logs.
func checkLogs(got ContainerState) error {
	if got.LogDriver != "" && got.LogDriver != "none" {
		return &HardeningError{Setting: "log driver", Want: "none", Got: got.LogDriver}
	}
	return nil
}

// checkHardening compares what the engine recorded with what was asked
// (see package hardening).
func checkHardening(want ContainerSpec, got ContainerState) error {
	mounts := func(ms []Mount) (out []hardening.Mount) {
		for _, m := range ms {
			out = append(out, hardening.Mount{Target: m.Target, ReadOnly: m.ReadOnly})
		}
		return out
	}
	seccomp := seccomp.Digest(want.Seccomp)
	if seccomp != "" && strings.HasPrefix(got.Seccomp, "sha256:") && got.Seccomp == got.Labels[labels.Seccomp] {
		// Our profile as another version of sandbox-agent made it (the
		// label is the host's, set at creation): an upgraded host adopts
		// its sandboxes. At creation the label is this profile's.
		seccomp = got.Seccomp
	}
	setting, w, g, ok := hardening.Diff(hardening.Settings{
		Privileged: want.Privileged, ReadonlyRootfs: want.ReadonlyRootfs, Init: want.Init, NoNewPrivileges: want.NoNewPrivileges,
		Seccomp: seccomp, OCIRuntime: want.Runtime,
		MemoryBytes: want.MemoryBytes, MemorySwap: want.MemorySwap, NanoCPUs: want.NanoCPUs, PidsLimit: want.PidsLimit, DiskBytes: want.DiskBytes,
		NetworkMode: want.NetworkMode, CapDrop: want.CapDrop, CapAdd: want.CapAdd, Mounts: mounts(want.Mounts),
	}, hardening.Settings{
		Privileged: got.Privileged, ReadonlyRootfs: got.ReadonlyRootfs, Init: got.Init, NoNewPrivileges: got.NoNewPrivileges,
		Seccomp: got.Seccomp, OCIRuntime: got.Runtime,
		MemoryBytes: got.MemoryBytes, MemorySwap: got.MemorySwap, NanoCPUs: got.NanoCPUs, PidsLimit: got.PidsLimit, DiskBytes: got.DiskBytes,
		NetworkMode: got.NetworkMode, CapDrop: got.CapDrop, CapAdd: got.CapAdd, Mounts: mounts(got.Mounts),
	})
	if !ok {
		return &HardeningError{Setting: setting, Want: w, Got: g}
	}
	return nil
}

// ID is the container id.
func (s *Sandbox) ID() string { return s.id }

// Name is the container name.
func (s *Sandbox) Name() string { return s.name }

// Inspect reports the container's current state.
func (s *Sandbox) Inspect(ctx context.Context) (ContainerState, error) {
	return s.rt.Inspect(ctx, s.id)
}

func (s *Sandbox) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// Close destroys the container. It is idempotent and succeeds when the
// container already died or removed itself; a failed removal is tried
// again by the next Close (an error closing the proxies is told once).
func (s *Sandbox) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if !s.isClosed() {
		close(s.closed)
		if s.host != nil {
			if err := s.host.Close(); err != nil {
				s.hostErr = fmt.Errorf("close sandbox %s: proxies: %w", s.name, err)
			}
		}
	}
	if !s.removed {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.rt.Remove(ctx, s.id); err != nil {
			return fmt.Errorf("close sandbox %s: %w", s.name, err)
		}
		s.removed = true
	}
	err := s.hostErr
	s.hostErr = nil // reported once: there is nothing left to retry
	return err
}
