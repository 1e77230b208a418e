package sandboxagent

import (
	"context"
	"io"
	"io/fs"
	"time"
)

// Runtime is what a Sandbox needs from a container engine. runtime/docker
// implements it over the Docker Engine API (Podman's compatible API works
// through the same implementation); callers may plug in their own.
//
// Implementations report a missing image with ErrImageNotFound, an
// unreachable engine with ErrEngineUnavailable and a missing container with
// ErrContainerNotFound (wrapped, so errors.Is works).
type Runtime interface {
	// Info pings the engine and describes it.
	Info(ctx context.Context) (EngineInfo, error)
	// Create creates (does not start) a container and returns its id.
	Create(ctx context.Context, spec ContainerSpec) (string, error)
	Start(ctx context.Context, id string) error
	Inspect(ctx context.Context, id string) (ContainerState, error)
	// Exec runs a command in a running container, streaming its output to
	// the request's writers until the command's output closes. It returns
	// the exit code. When ctx is done it detaches (the process keeps
	// running: engines have no exec kill) and returns ctx.Err().
	Exec(ctx context.Context, id string, req RuntimeExec) (int, error)
	// CopyTo extracts an uncompressed tar stream into dir (which must exist).
	CopyTo(ctx context.Context, id, dir string, tar io.Reader) error
	// CopyFrom returns a tar stream of path. Everything in it is hostile.
	CopyFrom(ctx context.Context, id, path string) (io.ReadCloser, error)
	Kill(ctx context.Context, id string) error
	// Remove force-removes a container; a missing container is not an error.
	Remove(ctx context.Context, id string) error
	// List returns containers (running or not) carrying all the labels.
	List(ctx context.Context, labels map[string]string) ([]ContainerState, error)
}

// EngineInfo describes the engine a Runtime talks to.
type EngineInfo struct {
	Name       string // "docker" or "podman"
	Version    string
	APIVersion string
	Rootless   bool
}

// ContainerSpec is what Create needs. Zero values are not defaults here:
// the Sandbox fills every field from its (hardened) options.
type ContainerSpec struct {
	Name       string
	Image      string
	Cmd        []string
	Env        []string // KEY=VALUE
	User       string
	WorkDir    string
	Labels     map[string]string
	AutoRemove bool

	Privileged bool
	CapDrop    []string
	CapAdd     []string
	// NoNewPrivileges: no process may gain privileges (setuid, file caps).
	NoNewPrivileges bool
	ReadonlyRootfs  bool
	Init            bool
	// Seccomp is the seccomp profile's JSON (nil: the engine's default).
	Seccomp     []byte
	PidsLimit   int64
	MemoryBytes int64
	MemorySwap  int64
	NanoCPUs    int64
	// DiskBytes caps the container's disk use (0: none): the engine's
	// storage quota, Kubernetes' ephemeral-storage limit.
	DiskBytes   int64
	NetworkMode string
	Tmpfs       map[string]string
	Runtime     string // OCI runtime, e.g. "runsc"; empty = engine default
	ExtraHosts  []string
	// Mounts are host directories bind-mounted into the container. The
	// library mounts only its own socket folder, read-only.
	Mounts []Mount
	// Files are placed in the container before its first command runs.
	Files []File
}

// File is a file a backend places before the container's first command
// (root-owned; its folders are made).
type File struct {
	Path string // absolute container path
	Data []byte
	Mode fs.FileMode
}

// Mount is a host directory seen inside the container.
type Mount struct {
	Source   string // absolute host path
	Target   string // absolute container path
	ReadOnly bool
}

// Status is a container's state, the same words for every engine.
type Status string

const (
	StatusCreated Status = "created" // made, never started
	StatusRunning Status = "running"
	StatusPaused  Status = "paused"
	StatusExited  Status = "exited" // stopped: exited, dead or being removed
	StatusUnknown Status = "unknown"
)

// ContainerState is what Inspect and List report.
type ContainerState struct {
	ID        string
	Name      string
	Image     string
	Labels    map[string]string
	Running   bool
	Status    Status // in the library's words; each Runtime maps its engine's
	ExitCode  int
	OOMKilled bool
	// Reason is the engine's word for why a stopped container stopped
	// ("Evicted", "Error", ...), when it gives one.
	Reason  string
	Created time.Time

	// Hardening as the engine recorded it, so the Sandbox can check that
	// every setting stuck (old engines silently drop unknown fields).
	Privileged      bool
	CapDrop         []string
	CapAdd          []string
	NoNewPrivileges bool
	ReadonlyRootfs  bool
	Init            bool
	// Seccomp names the profile the engine recorded: seccomp.Digest of its
	// JSON, "" when none was given (the engine's default).
	Seccomp string
	// Runtime is the OCI runtime the engine recorded (a RuntimeClass on
	// Kubernetes; "" or the engine's default name when none was asked).
	Runtime     string
	PidsLimit   int64
	MemoryBytes int64
	MemorySwap  int64
	NanoCPUs    int64
	DiskBytes   int64 // the disk limit the engine recorded (0: none)
	NetworkMode string
	User        string
	Mounts      []Mount // bind mounts as the engine recorded them
	// LogDriver is the engine's log driver of the main process's output:
	// "none" for a sandbox ("" where the runtime has none to choose:
	// Kubernetes' kubelet keeps bounded logs).
	LogDriver string
}

// RuntimeExec is one command for Runtime.Exec.
type RuntimeExec struct {
	Cmd     []string
	Env     []string // KEY=VALUE
	User    string
	WorkDir string
	Stdin   io.Reader // nil: no stdin (the command sees EOF)
	Stdout  io.Writer
	Stderr  io.Writer
}

// RuntimeFeatures says which parts of the contract a Runtime honours as
// asked. What it lacks is either emulated by the Sandbox (the exec
// tunnel instead of bind-mounted sockets) or refused with a typed error
// (ErrUnsupportedByRuntime), never silently dropped.
type RuntimeFeatures struct {
	// ExecUser: RuntimeExec.User runs the command as another user than
	// the container's. Kubernetes exec has no user: a command there runs
	// as the pod's user, and asking another is ErrUnsupportedByRuntime.
	ExecUser bool
	// BindMounts: ContainerSpec.Mounts (host folders) are mounted. Without
	// them the Sandbox reaches its host proxies through an exec tunnel.
	BindMounts bool
	// CopyAsRoot: CopyTo writes as root with the archive's owners (the
	// engine's archive API); without it files belong to the container's
	// user (tar over exec).
	CopyAsRoot bool
	// AutoRemove: a container whose main process exited is removed by the
	// engine; without it the stopped container stays until Remove or gc.
	AutoRemove bool
	// PidsLimit: each container gets the pids limit its spec asks. Without
	// it the limit is the node's (Kubernetes: the kubelet's podPidsLimit),
	// Inspect reports that, and a sandbox asking another fails the
	// hardening check.
	PidsLimit bool
	// Seccomp: ContainerSpec.Seccomp is applied and Inspect reports it.
	// Without it the engine's (or the node's) default profile applies.
	Seccomp bool
}

// FeaturesOf returns what rt honours: a Runtime that lacks some features
// has a method Features() RuntimeFeatures; one without it is taken to
// honour all of them (the Docker Engine API does). A wrapper around a
// Runtime must pass them on (Features() { return FeaturesOf(inner) }), or
// it claims them all.
func FeaturesOf(rt Runtime) RuntimeFeatures {
	if f, ok := rt.(interface{ Features() RuntimeFeatures }); ok {
		return f.Features()
	}
	return RuntimeFeatures{ExecUser: true, BindMounts: true, CopyAsRoot: true, AutoRemove: true, PidsLimit: true, Seccomp: true}
}

// ImageSource makes a missing image present in the engine (pull, build).
// NewSandbox calls it when the engine reports the sandbox's image
// missing, then creates the container again. The images package's
// Provider is the implementation the command line uses. One that also
// has CheckImage(ctx, ref) error vets an image the engine already has
// (image_verify strict: its digest must be the released one): NewSandbox
// calls it before creating the container.
type ImageSource interface {
	ProvideImage(ctx context.Context, ref string) error
}
