// Package docker implements sandboxagent.Runtime over the Docker Engine API
// with the official client module (no docker CLI subprocesses). Podman's
// Docker-compatible API service works through the same code: the engine is
// recognised from its responses and its differences are handled here (see
// podman.go).
package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path"
	pathpkg "path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/go-units"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/exectar"
	"github.com/sandbox-agent/sandbox-agent/seccomp"
)

// Options configures the connection. The zero value uses DOCKER_HOST (and
// the other DOCKER_* variables) or the default local socket.
type Options struct {
	// Host overrides DOCKER_HOST, e.g. unix:///run/podman/podman.sock.
	Host string
	// HTTPClient, when set, carries every request as is: its transport must
	// reach the engine itself (Host then only names it). Tests use it with
	// a fake RoundTripper.
	HTTPClient *http.Client
	// ExecGate, when set, admits each exec's engine work (create, attach,
	// the process's start), never a command's whole life: runtime/execlimit's Queue, shared by the runtimes of
	// one engine, keeps execs fair when the engine is saturated.
	ExecGate ExecGate
	// ExecStartHold bounds how long an exec keeps its ExecGate slot after
	// the engine answered the attach, while the engine starts the process:
	// the slot goes back at the first output byte, the stream's end, or
	// after this (0: DefaultExecStartHold, 250 ms; negative: at the attach answer).
	ExecStartHold time.Duration
}

// Runtime talks to one engine. It is safe for concurrent use.
type Runtime struct {
	cli *client.Client
	// hc and base reach the engine for the few Podman-only (libpod) calls
	// the Engine API client does not know.
	hc   *http.Client
	base string
	// libpod is the Libpod-Api-Version header the engine last sent
	// (Podman sends it on every response, Docker never): "" = not Podman,
	// or nothing heard yet.
	libpod atomic.Pointer[string]
	// seen: some response arrived, so libpod is known.
	seen atomic.Bool
	// gvisor says, per container id, whether it runs under gVisor's runsc
	// (underGVisor). Bounded: emptied when it reaches maxGVisorCache (an
	// entry is one inspect to make again).
	gvisorMu sync.Mutex
	gvisor   map[string]bool
	// The engine's storage as the disk limit sees it, read once.
	diskMu     sync.Mutex
	diskKnown  bool
	diskDriver string
	diskErr    error // nil: the driver enforces StorageOpt size by itself
	// podmanDefaults holds the Podman service's default capability set per
	// libpod version (version -> []string): /libpod/info takes seconds.
	podmanDefaults sync.Map
	execGate       ExecGate
	startHold      time.Duration
}

var _ sandboxagent.Runtime = (*Runtime)(nil)

// New connects lazily: the first call negotiates the API version, so New
// itself does not fail on a dead engine (Info does, with
// ErrEngineUnavailable).
func New(ctx context.Context, opts Options) (*Runtime, error) {
	r := &Runtime{execGate: opts.ExecGate, startHold: opts.ExecStartHold}
	if r.startHold == 0 {
		r.startHold = DefaultExecStartHold
	}
	copts := []client.Opt{client.FromEnv}
	if opts.Host != "" {
		copts = append(copts, client.WithHost(opts.Host))
	}
	if opts.HTTPClient != nil {
		copts = append(copts, client.WithHTTPClient(opts.HTTPClient))
	}
	copts = append(copts, client.WithHTTPResponseHook(r.observe))
	cli, err := client.New(copts...)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w: %w", sandboxagent.ErrEngineUnavailable, err)
	}
	r.cli = cli
	r.hc, r.base = sideClient(cli, opts.HTTPClient)
	return r, nil
}

// Client exposes the underlying Engine API client for calls outside the
// sandboxagent.Runtime port (image builds, say).
func (r *Runtime) Client() *client.Client { return r.cli }

// Close releases the connection pool.
func (r *Runtime) Close() error {
	r.hc.CloseIdleConnections()
	return r.cli.Close()
}

// classify maps engine errors onto the sentinel errors callers branch on.
// notFound is the sentinel a 404 means for this call; a 404 (or Podman's
// 500) that names the container itself is always ErrContainerNotFound, so
// a copy from a removed container is not mistaken for a missing path.
func classify(op string, err error, notFound error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", op, err)
	case client.IsErrConnectionFailed(err):
		return fmt.Errorf("%s: %w: %w", op, sandboxagent.ErrEngineUnavailable, err)
	case notFound != nil && containerGone(err):
		return fmt.Errorf("%s: %w: %w", op, sandboxagent.ErrContainerNotFound, err)
	case notFound != nil && cerrdefs.IsNotFound(err):
		return fmt.Errorf("%s: %w: %w", op, notFound, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Info pings the engine and reports what it is: Docker or Podman (Podman
// sends a Libpod-Api-Version header on every response), its version, the
// negotiated API version and whether it runs rootless.
//
// On Podman, /version is slow (it queries the package manager for conmon
// and the OCI runtime: seconds, more under load), so the version comes from
// the libpod API version header, which equals the Podman release.
func (r *Runtime) Info(ctx context.Context) (sandboxagent.EngineInfo, error) {
	if _, err := r.cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return sandboxagent.EngineInfo{}, classify("engine ping", err, nil)
	}
	info := sandboxagent.EngineInfo{Name: "docker"}
	if v, ok := r.podman(); ok {
		info.Name, info.Version = "podman", v
	} else {
		v, err := r.cli.ServerVersion(ctx, client.ServerVersionOptions{})
		if err != nil {
			return sandboxagent.EngineInfo{}, classify("engine version", err, nil)
		}
		info.Version = v.Version
		if engineIsPodman(v) {
			info.Name = "podman"
		}
	}
	info.APIVersion = r.cli.ClientVersion()
	// Both engines list "name=rootless" among their security options when
	// they run without root.
	si, err := r.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return sandboxagent.EngineInfo{}, classify("engine info", err, nil)
	}
	for _, o := range si.Info.SecurityOptions {
		for _, kv := range strings.Split(o, ",") {
			if kv == "name=rootless" {
				info.Rootless = true
			}
		}
	}
	return info, nil
}

// engineIsPodman recognises Podman from /version alone (a proxy in front of
// it might strip the libpod header).
func engineIsPodman(v client.ServerVersionResult) bool {
	for _, c := range v.Components {
		if strings.EqualFold(c.Name, "podman engine") {
			return true
		}
	}
	return strings.Contains(strings.ToLower(v.Platform.Name), "podman")
}

// Create creates a container from spec without starting it.
func (r *Runtime) Create(ctx context.Context, spec sandboxagent.ContainerSpec) (string, error) {
	if err := r.podmanExtraHosts(ctx, spec.ExtraHosts); err != nil {
		return "", classify("create container", err, nil)
	}
	capDrop, capAdd, err := r.podmanCaps(ctx, spec)
	if err != nil {
		return "", classify("create container", err, nil)
	}
	if _, ok := r.podman(); ok && spec.Runtime != "" {
		// Podman's compat inspect reports every runtime as "oci": the
		// hardening check could not see which one ran.
		return "", fmt.Errorf("create container: %w: OCI runtime %q: choosing one per sandbox is not offered on Podman (set its default runtime in containers.conf)", sandboxagent.ErrUnsupportedByRuntime, spec.Runtime)
	}
	init := spec.Init
	pids := spec.PidsLimit
	secOpt := securityOpt(spec.NoNewPrivileges, spec.Seccomp)
	if _, ok := r.podman(); ok && len(spec.Seccomp) > 0 {
		file, err := seccompFile(spec.Seccomp)
		if err != nil {
			return "", fmt.Errorf("create container: %w", err)
		}
		secOpt = append(securityOpt(spec.NoNewPrivileges, nil), "seccomp="+file)
	}
	hc := &container.HostConfig{
		AutoRemove: spec.AutoRemove,
		// No engine log of the main process's output: what a sandbox
		// prints reaches the host through its bounded streams only (a
		// log grows on the host's disk unbounded, outside --disk).
		LogConfig:      container.LogConfig{Type: "none"},
		Privileged:     spec.Privileged,
		CapDrop:        capDrop,
		CapAdd:         capAdd,
		SecurityOpt:    secOpt,
		ReadonlyRootfs: spec.ReadonlyRootfs,
		Init:           &init,
		NetworkMode:    container.NetworkMode(spec.NetworkMode),
		Tmpfs:          spec.Tmpfs,
		Runtime:        spec.Runtime,
		ExtraHosts:     spec.ExtraHosts,
		Mounts:         mounts(spec.Mounts),
		Resources: container.Resources{
			PidsLimit:  &pids,
			Memory:     spec.MemoryBytes,
			MemorySwap: spec.MemorySwap,
			NanoCPUs:   spec.NanoCPUs,
		},
	}
	if spec.DiskBytes > 0 {
		// overlay2 is tried (on xfs with pquota it enforces the limit, else
		// it refuses); any other storage would take the option and ignore it.
		if driver, err := r.storage(ctx); err != nil && driver != "overlay2" {
			return "", fmt.Errorf("create container: %w", diskRefused(spec.DiskBytes, err.Error()))
		}
		hc.StorageOpt = map[string]string{"size": strconv.FormatInt(spec.DiskBytes, 10)}
	}
	res, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: spec.Name,
		Config: &container.Config{
			Image: spec.Image,
			// The sandbox's command is the whole command: an image's
			// ENTRYPOINT would take it as its arguments. [""] clears the
			// image's on Docker and Podman alike (Podman's compatible API
			// ignores an empty list), as `--entrypoint ""` does.
			Entrypoint: []string{""},
			Cmd:        spec.Cmd,
			Env:        spec.Env,
			User:       spec.User,
			WorkingDir: spec.WorkDir,
			Labels:     spec.Labels,
		},
		HostConfig: hc,
	})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", fmt.Errorf("create container: %w: %s: %w", sandboxagent.ErrImageNotFound, spec.Image, err)
		}
		if spec.DiskBytes > 0 && strings.Contains(err.Error(), "storage-opt") {
			// overlay2 without project quotas: "--storage-opt is supported
			// only for overlay over xfs with 'pquota' mount option".
			return "", fmt.Errorf("create container: %w", diskRefused(spec.DiskBytes, err.Error()))
		}
		if spec.Runtime != "" && strings.Contains(strings.ToLower(err.Error()), "runtime") {
			if have, ierr := r.OCIRuntimes(ctx); ierr == nil && have[spec.Runtime] == "" {
				names := slices.Sorted(maps.Keys(have))
				return "", fmt.Errorf("create container: %w: OCI runtime %q is not registered with the engine (it has: %s; for gVisor see .ci/gvisor.sh): %w",
					sandboxagent.ErrInvalidArgument, spec.Runtime, strings.Join(names, ", "), err)
			}
		}
		return "", classify("create container", err, nil)
	}
	if len(spec.Files) > 0 {
		// Before the start, so the first command finds them (the engine
		// copies into a created container's filesystem).
		data, err := filesTar(spec.Files)
		if err == nil {
			err = r.engineCopyTo(ctx, res.ID, "/", bytes.NewReader(data))
		}
		if err != nil {
			_ = r.Remove(context.WithoutCancel(ctx), res.ID)
			return "", fmt.Errorf("create container: place files: %w", err)
		}
	}
	return res.ID, nil
}

// Start starts a created container.
func (r *Runtime) Start(ctx context.Context, id string) error {
	_, err := r.cli.ContainerStart(ctx, id, client.ContainerStartOptions{})
	return classify("start container", err, sandboxagent.ErrContainerNotFound)
}

// Inspect reports a container's state and recorded hardening.
func (r *Runtime) Inspect(ctx context.Context, id string) (sandboxagent.ContainerState, error) {
	res, err := r.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return sandboxagent.ContainerState{}, classify("inspect container", err, sandboxagent.ErrContainerNotFound)
	}
	c := res.Container
	st := sandboxagent.ContainerState{ID: c.ID, Name: strings.TrimPrefix(c.Name, "/"), Image: c.Image}
	if t, err := time.Parse(time.RFC3339Nano, c.Created); err == nil {
		st.Created = t
	}
	if c.Config != nil {
		st.Labels = c.Config.Labels
		st.User = c.Config.User
		st.Image = c.Config.Image
	}
	if s := c.State; s != nil {
		st.Running = s.Running
		st.Status = status(string(s.Status))
		st.ExitCode = s.ExitCode
		st.OOMKilled = s.OOMKilled
	}
	if h := c.HostConfig; h != nil {
		st.Privileged = h.Privileged
		st.CapDrop = h.CapDrop
		st.CapAdd = h.CapAdd
		st.NoNewPrivileges = noNewPrivileges(h.SecurityOpt)
		st.Seccomp = seccompOf(h.SecurityOpt)
		st.Runtime = h.Runtime
		r.noteGVisor(ctx, id, h.Runtime) // the hardening check's inspect spares the first exec one
		if v, ok := h.StorageOpt["size"]; ok {
			st.DiskBytes, _ = units.RAMInBytes(v) // "10737418240", or "10G" when set by hand
		}
		st.ReadonlyRootfs = h.ReadonlyRootfs
		st.Init = h.Init != nil && *h.Init
		if h.PidsLimit != nil {
			st.PidsLimit = *h.PidsLimit
		}
		st.MemoryBytes = h.Memory
		st.MemorySwap = h.MemorySwap
		st.NanoCPUs = h.NanoCPUs
		st.NetworkMode = string(h.NetworkMode)
		st.LogDriver = h.LogConfig.Type
	}
	for _, m := range c.Mounts {
		if m.Type == mount.TypeBind {
			st.Mounts = append(st.Mounts, sandboxagent.Mount{Source: m.Source, Target: m.Destination, ReadOnly: !m.RW})
		}
	}
	if version, ok := r.podman(); ok {
		// Podman's compat CapAdd/CapDrop are relative to its default set:
		// report the bounding set it recorded instead (see podman.go).
		caps, ok, err := r.libpodCaps(ctx, version, c.ID)
		if err != nil {
			return sandboxagent.ContainerState{}, classify("inspect container", err, sandboxagent.ErrContainerNotFound)
		}
		if ok {
			st.CapDrop = []string{"ALL"}
			st.CapAdd = caps
		}
	}
	return st, nil
}

// Exec runs one command and streams its demultiplexed output. The exit
// code comes from ExecInspect after the stream ends (the stream may end a
// moment before the engine records the exit). With an ExecGate, the slot
// covers the create, the attach and the engine's start of the process
// (holdUntilStarted: until the first output, the stream's end or
// ExecStartHold), never the command's run nor the exit-code inspect.
func (r *Runtime) Exec(ctx context.Context, id string, req sandboxagent.RuntimeExec) (int, error) {
	release, err := r.admit(ctx)
	if err != nil {
		return -1, err
	}
	defer release()
	cr, err := r.cli.ExecCreate(ctx, id, client.ExecCreateOptions{
		User:         req.User,
		AttachStdin:  req.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
		Env:          req.Env,
		WorkingDir:   req.WorkDir,
		Cmd:          req.Cmd,
	})
	if err != nil {
		if notRunning(err) && !cerrdefs.IsNotFound(err) {
			// A sandbox container that stopped is being auto-removed (on
			// Podman, conmon's cleanup runs a moment after the exit): it is
			// gone for every purpose of an exec.
			return -1, fmt.Errorf("exec create: %w: %w", sandboxagent.ErrContainerNotFound, err)
		}
		return -1, classify("exec create", err, sandboxagent.ErrContainerNotFound)
	}
	att, err := r.cli.ExecAttach(ctx, cr.ID, client.ExecAttachOptions{})
	if err != nil {
		return -1, classify("exec start", err, sandboxagent.ErrContainerNotFound)
	}
	defer att.Close()
	// The engine ignores ctx once the connection is hijacked: closing it is
	// the only way to stop waiting.
	stop := context.AfterFunc(ctx, att.Close)
	defer stop()
	var died func() bool
	if r.underGVisor(ctx, id) {
		var cancel context.CancelFunc
		died, cancel = r.execWatch(ctx, id, att.Close)
		defer cancel()
	}
	if req.Stdin != nil {
		go func() {
			_, _ = io.Copy(att.Conn, req.Stdin)
			_ = att.CloseWrite()
		}()
	}
	stdout, stderr := orDiscard(req.Stdout), orDiscard(req.Stderr)
	src, stopHold := r.holdUntilStarted(att.Reader, release)
	// Demultiplex by our own choice (no TTY), never by Content-Type: API
	// 1.41 engines label multiplexed streams as raw.
	_, copyErr := stdcopy.StdCopy(stdout, stderr, src)
	stopHold()
	// The stream ended: the process ran. The exit-code inspect reads the
	// engine's record of the exec, no start work: it is not queued.
	release()
	if ctx.Err() != nil {
		return -1, ctx.Err()
	}
	if died != nil && died() {
		return -1, fmt.Errorf("exec: %w: the container stopped while the command ran (under gVisor: its kernel was killed, e.g. at the memory limit)", sandboxagent.ErrContainerNotFound)
	}
	if copyErr != nil && !errors.Is(copyErr, io.EOF) {
		return -1, fmt.Errorf("exec stream: %w", copyErr)
	}
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		ins, err := r.cli.ExecInspect(ctx, cr.ID, client.ExecInspectOptions{})
		if err != nil {
			return -1, classify("exec inspect", err, sandboxagent.ErrContainerNotFound)
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(delay):
		}
	}
}

// execWatch waits for container id to stop (the engine's wait API: one
// request, no polling) and calls hangUp when it does: runsc never ends an
// exec whose sandbox died (seen when the memory limit killed gVisor's
// kernel: the exec's stream stayed open, the container exited 137). died
// reports whether it hung up; cancel ends the watch.
func (r *Runtime) execWatch(ctx context.Context, id string, hangUp func()) (died func() bool, cancel context.CancelFunc) {
	ctx, cancel = context.WithCancel(ctx)
	var gone atomic.Bool
	go func() {
		w := r.cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
		select {
		case <-w.Result:
		case err := <-w.Error:
			if ctx.Err() != nil || !cerrdefs.IsNotFound(err) {
				return // the exec ended, or the engine is gone (the exec says so)
			}
		}
		if ctx.Err() == nil {
			gone.Store(true)
			hangUp()
		}
	}()
	return gone.Load, cancel
}

// CopyTo extracts an uncompressed tar into dir inside the container.
func (r *Runtime) CopyTo(ctx context.Context, id, dir string, tar io.Reader) error {
	if r.underGVisor(ctx, id) {
		return exectar.CopyTo(ctx, r.userStream(id), "container", dir, tar)
	}
	return r.engineCopyTo(ctx, id, dir, tar)
}

// engineCopyTo copies through the engine's archive API (which also
// reaches a container not started yet).
func (r *Runtime) engineCopyTo(ctx context.Context, id, dir string, tar io.Reader) error {
	_, err := r.cli.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: dir, Content: tar})
	return classify("copy to container "+dir, err, sandboxagent.ErrPathNotFound)
}

// CopyFrom streams a tar of path out of the container. A symlink at path
// is returned as the symlink itself, never followed: the engine's stat
// header (mode bits) decides, and Podman, which resolves the link and sends
// the target's content, gets the same answer as Docker.
func (r *Runtime) CopyFrom(ctx context.Context, id, path string) (io.ReadCloser, error) {
	if r.underGVisor(ctx, id) {
		return exectar.CopyFrom(ctx, r.userStream(id), "container", path)
	}
	res, err := r.cli.CopyFromContainer(ctx, id, client.CopyFromContainerOptions{SourcePath: path})
	if err != nil {
		if pathVanished(err) {
			return nil, fmt.Errorf("copy from container %s: %w: %w", path, sandboxagent.ErrPathNotFound, err)
		}
		return nil, classify("copy from container "+path, err, sandboxagent.ErrPathNotFound)
	}
	if res.Stat.Mode&os.ModeSymlink != 0 {
		res.Content.Close()
		return io.NopCloser(symlinkTar(pathpkg.Base(path), res.Stat.LinkTarget, res.Stat.Mtime)), nil
	}
	return res.Content, nil
}

// underGVisor says whether id runs under gVisor's runsc, from the OCI
// runtime the engine recorded for it (its default filled in) and that
// runtime's binary; decided once per container, and not remembered when
// the engine could not tell. Its files are copied through an exec of tar
// (the engine's copy API reads the container's root folder on the host,
// which misses what gVisor keeps in its own kernel: its /tmp is a tmpfs
// there), and its execs are watched (execWatch).
func (r *Runtime) underGVisor(ctx context.Context, id string) bool {
	r.gvisorMu.Lock()
	g, ok := r.gvisor[id]
	r.gvisorMu.Unlock()
	if ok {
		return g
	}
	res, err := r.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil || res.Container.HostConfig == nil {
		return false // the call that follows reports what is wrong
	}
	return r.noteGVisor(ctx, id, res.Container.HostConfig.Runtime)
}

// noteGVisor decides and remembers whether id, recorded by the engine as
// running under the OCI runtime name, runs under runsc (not remembered
// when the engine cannot list its runtimes).
func (r *Runtime) noteGVisor(ctx context.Context, id, name string) bool {
	g := false
	// Podman records every runtime as "oci" and is offered none (Create):
	// asking its /info (seconds) would only say so.
	_, podman := r.podman()
	if !podman && name != "" && name != "runc" && name != "crun" {
		have, err := r.OCIRuntimes(ctx)
		if err != nil {
			return false
		}
		g = pathpkg.Base(have[name]) == "runsc"
	}
	r.gvisorMu.Lock()
	if r.gvisor == nil || len(r.gvisor) >= maxGVisorCache {
		r.gvisor = map[string]bool{}
	}
	r.gvisor[id] = g
	r.gvisorMu.Unlock()
	return g
}

// maxGVisorCache bounds Runtime.gvisor (a long-running server sees many
// containers it never removes itself: detached, adopted elsewhere).
const maxGVisorCache = 4096

// DiskQuotas says (nil) whether the engine enforces a container's disk
// limit (StorageOpt size) whatever its configuration: Docker's btrfs and
// zfs storage drivers. overlay2 does only on xfs mounted with pquota,
// which the engine does not report: an error, so no default limit is set
// there (an explicit one is tried, and the engine refuses it where it
// cannot). Docker's containerd image store accepts the option and drops
// it: an error. Read once per Runtime.
func (r *Runtime) DiskQuotas(ctx context.Context) error {
	_, err := r.storage(ctx)
	return err
}

// DiskQuotasOf is DiskQuotas answered, where it can be, from image's
// record (an image inspect, about a millisecond where /info takes tens):
// the image's storage driver is the engine's, and one other than btrfs
// or zfs enforces no limit whatever the image store. Those two need /info
// (the containerd image store drops the limit); so does a missing image.
func (r *Runtime) DiskQuotasOf(ctx context.Context, image string) error {
	r.diskMu.Lock()
	known := r.diskKnown
	r.diskMu.Unlock()
	if _, pod := r.podman(); !known && !pod {
		ins, err := r.cli.ImageInspect(ctx, image)
		if err == nil && ins.GraphDriver != nil {
			if d := ins.GraphDriver.Name; d != "" && d != "btrfs" && d != "zfs" {
				r.diskMu.Lock()
				r.diskKnown, r.diskDriver, r.diskErr = true, d, errNoQuota(d)
				r.diskMu.Unlock()
			}
		}
	}
	return r.DiskQuotas(ctx) // what was learnt, or /info (and Podman's answer)
}

// errNoQuota: storage driver d enforces no disk limit by itself.
func errNoQuota(d string) error {
	return fmt.Errorf("the engine's storage driver %s enforces no disk limit by itself", d)
}

// storage is the engine's storage driver and whether it enforces disk
// limits (DiskQuotas).
func (r *Runtime) storage(ctx context.Context) (string, error) {
	if _, ok := r.podman(); ok {
		return "", errors.New("disk limits are not offered on Podman")
	}
	r.diskMu.Lock()
	defer r.diskMu.Unlock()
	if r.diskKnown {
		return r.diskDriver, r.diskErr
	}
	si, err := r.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return "", classify("engine info", err, nil) // not an answer: asked again next time
	}
	r.diskKnown, r.diskDriver, r.diskErr = true, si.Info.Driver, nil
	for _, kv := range si.Info.DriverStatus {
		if len(kv) == 2 && kv[0] == "driver-type" && kv[1] == "io.containerd.snapshotter.v1" {
			r.diskErr = fmt.Errorf("the engine's containerd image store (%s) ignores disk limits", si.Info.Driver)
		}
	}
	if r.diskErr == nil && si.Info.Driver != "btrfs" && si.Info.Driver != "zfs" {
		r.diskErr = errNoQuota(si.Info.Driver)
	}
	return r.diskDriver, r.diskErr
}

// DiskUsage is the container's disk use as its StorageOpt size counts it:
// its own layer, and on btrfs its image's too (a subvolume's quota group
// holds both; zfs and overlay2's project quotas count the layer alone).
// The engine walks the layer: seconds on a large one.
func (r *Runtime) DiskUsage(ctx context.Context, id string) (int64, error) {
	driver, _ := r.storage(ctx)
	res, err := r.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{Size: true})
	if err != nil {
		return 0, classify("inspect container size", err, sandboxagent.ErrContainerNotFound)
	}
	size := res.Container.SizeRw
	if driver == "btrfs" {
		size = res.Container.SizeRootFs
	}
	if size == nil {
		return 0, errors.New("the engine reported no size")
	}
	return *size, nil
}

// OCIRuntimes are the OCI runtimes the engine was given: name → binary
// (the engine's default, runc, among them).
func (r *Runtime) OCIRuntimes(ctx context.Context) (map[string]string, error) {
	si, err := r.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return nil, classify("engine info", err, nil)
	}
	out := map[string]string{}
	for name, rt := range si.Info.Runtimes {
		out[name] = rt.Path
		if out[name] == "" {
			out[name] = name
		}
	}
	return out, nil
}

// userStream runs commands in id as the container's user, for exectar:
// under gVisor an exec as root in a container of another user gets no
// capabilities (runc gives it the container's), so root could not read
// the user's 0600 files. Copies then write as that user, as on
// Kubernetes (the archive's owners apply only when it is root).
func (r *Runtime) userStream(id string) exectar.Stream {
	return func(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
		return r.Exec(ctx, id, sandboxagent.RuntimeExec{Cmd: argv, Stdin: stdin, Stdout: stdout, Stderr: stderr})
	}
}

// symlinkTar is a tar holding one symlink entry.
func symlinkTar(name, target string, mtime time.Time) io.Reader {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: mtime})
	_ = tw.Close()
	return &buf
}

// Kill sends SIGKILL to the container's main process.
func (r *Runtime) Kill(ctx context.Context, id string) error {
	_, err := r.cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"})
	if err != nil && isGone(err) {
		return nil
	}
	return classify("kill container", err, sandboxagent.ErrContainerNotFound)
}

// Remove force-removes the container and its anonymous volumes, and
// returns once it is gone. A container that is already gone (or being
// auto-removed) is not an error.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	_, err := r.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !isGone(err) {
		return classify("remove container", err, nil)
	}
	if err == nil {
		// This call removed it: both engines answer once it is gone.
		r.gvisorMu.Lock()
		delete(r.gvisor, id)
		r.gvisorMu.Unlock()
		return nil
	}
	// An auto-remove already in progress finishes on its own; wait for it
	// so callers never see a half-removed container.
	for delay := 5 * time.Millisecond; ; delay = min(delay*2, 200*time.Millisecond) {
		_, err := r.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if cerrdefs.IsNotFound(err) || containerGone(err) {
			r.gvisorMu.Lock()
			delete(r.gvisor, id)
			r.gvisorMu.Unlock()
			return nil
		}
		if err != nil {
			return classify("remove container", err, nil)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("remove container %s: %w", id, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// isGone reports an error that means the container no longer exists or is
// already on its way out (for Kill and Remove, where that is success).
func isGone(err error) bool {
	return containerGone(err) || notRunning(err) || errorHas(err, "is already in progress")
}

// containerGone reports an engine error saying the container does not
// exist. Docker: 404 "No such container: ID". Podman: "no such container"
// (404, or 500 from some handlers) or "container has already been removed"
// (a removal or auto-remove raced the call).
func containerGone(err error) bool {
	return errorHas(err, "no such container") || errorHas(err, "container has already been removed")
}

// notRunning reports an engine error refusing an operation because the
// container is not running. Docker: 409 "Container ID is not running".
// Podman: 500 "... container state improper" or "container is stopped".
func notRunning(err error) bool {
	return errorHas(err, "is not running") || errorHas(err, "container state improper") ||
		errorHas(err, "container is stopped")
}

// errorHas reports whether err's message contains sub, ignoring case.
func errorHas(err error, sub string) bool {
	return err != nil && strings.Contains(strings.ToLower(err.Error()), sub)
}

// List returns every container (running or not) carrying all labels.
func (r *Runtime) List(ctx context.Context, labels map[string]string) ([]sandboxagent.ContainerState, error) {
	f := make(client.Filters)
	for k, v := range labels {
		if v == "" {
			f.Add("label", k)
		} else {
			f.Add("label", k+"="+v)
		}
	}
	res, err := r.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, classify("list containers", err, nil)
	}
	out := make([]sandboxagent.ContainerState, 0, len(res.Items))
	for _, c := range res.Items {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		out = append(out, sandboxagent.ContainerState{
			ID:      c.ID,
			Name:    name,
			Image:   c.Image,
			Labels:  c.Labels,
			Running: c.State == container.StateRunning,
			Status:  status(string(c.State)),
			Created: time.Unix(c.Created, 0),
		})
	}
	return out, nil
}

// mounts turns the spec's bind mounts into the engine's.
func mounts(in []sandboxagent.Mount) []mount.Mount {
	var out []mount.Mount
	for _, m := range in {
		out = append(out, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	return out
}

// status maps the engine's state word (Docker's and Podman's compatible
// API use the same) to the library's.
func status(word string) sandboxagent.Status {
	switch strings.ToLower(word) {
	case "created", "configured", "initialized":
		return sandboxagent.StatusCreated
	case "running", "restarting":
		return sandboxagent.StatusRunning
	case "paused":
		return sandboxagent.StatusPaused
	case "exited", "dead", "removing", "stopped", "stopping":
		return sandboxagent.StatusExited
	}
	return sandboxagent.StatusUnknown
}

// securityOpt is the engine's spelling of no-new-privileges.
func securityOpt(nnp bool, seccomp []byte) []string {
	var opts []string
	if nnp {
		opts = append(opts, "no-new-privileges:true")
	}
	if len(seccomp) > 0 { // the profile's text, as the docker CLI sends a file's
		opts = append(opts, "seccomp="+string(seccomp))
	}
	return opts
}

// seccompOf reads the profile back: its digest, "" when none was given.
// Docker keeps the profile's text; Podman the path of the file it read
// (seccompFile's), whose content is the digest's.
func seccompOf(opts []string) string {
	for _, o := range opts {
		p, ok := strings.CutPrefix(o, "seccomp=")
		if !ok || p == "unconfined" {
			continue
		}
		if !strings.HasPrefix(p, "/") {
			return seccomp.Digest([]byte(p))
		}
		// A file seccompFile named by its content's digest: the name is
		// what the engine loaded at creation, even if the file has since
		// been deleted from the cache.
		if hex, ok := strings.CutPrefix(pathpkg.Base(p), "sha256-"); ok && len(hex) == 64+len(".json") && strings.HasSuffix(hex, ".json") {
			return "sha256:" + strings.TrimSuffix(hex, ".json")
		}
		f, err := os.Open(p)
		if err != nil {
			return "unreadable " + p
		}
		data, err := io.ReadAll(io.LimitReader(f, maxSeccompFile))
		f.Close()
		if err != nil {
			return "unreadable " + p
		}
		return seccomp.Digest(data)
	}
	return ""
}

// maxSeccompFile bounds a profile file Inspect reads back.
const maxSeccompFile = 1 << 20

// noNewPrivileges reads it back (Podman echoes it without ":true").
func noNewPrivileges(opts []string) bool {
	for _, o := range opts {
		if o == "no-new-privileges" || o == "no-new-privileges:true" || o == "no-new-privileges=true" {
			return true
		}
	}
	return false
}

// filesTar is an uncompressed tar of the spec's files (and their
// folders), rooted at /, root-owned.
func filesTar(files []sandboxagent.File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return nil, fmt.Errorf("%w: file path %q", sandboxagent.ErrInvalidArgument, f.Path)
		}
		rel := f.Path[1:]
		var parents []string
		for d := path.Dir(rel); d != "."; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}); err != nil {
				return nil, err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: int64(f.Mode.Perm()), Size: int64(len(f.Data))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// diskRefused is the hardening error of a disk limit the engine cannot
// enforce.
func diskRefused(limit int64, why string) error {
	return &sandboxagent.HardeningError{Setting: "disk", Want: strconv.FormatInt(limit, 10) + " bytes",
		Got: "no limit the engine can enforce (" + why + "; see docs/security.md)"}
}
