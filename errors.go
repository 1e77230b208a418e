package sandboxagent

import (
	"errors"
	"fmt"

	"github.com/sandbox-agent/sandbox-agent/internal/boundary"
	"github.com/sandbox-agent/sandbox-agent/internal/errdefs"
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrEngineUnavailable: the container engine cannot be reached.
	ErrEngineUnavailable = errors.New("container engine unavailable")
	// ErrImageNotFound: the image is not present and cannot be had.
	ErrImageNotFound = errors.New("image not found")
	// ErrContainerNotFound: the container is gone (removed, or died and
	// auto-removed).
	ErrContainerNotFound = errors.New("container not found")
	// ErrPathNotFound: a path asked for inside the container does not exist.
	ErrPathNotFound = errdefs.PathNotFound
	// ErrClosed: the sandbox was closed.
	ErrClosed = errors.New("sandbox closed")
	// ErrTimeout: an operation ran past its timeout.
	ErrTimeout = errors.New("timeout")
	// ErrUnsafeArchive: a download carried something that could escape the
	// destination (see safetar for the policy).
	ErrUnsafeArchive = errdefs.UnsafeArchive
	// ErrOutputLimit: a turn's CLI output passed one of Config.Limits
	// (lines, events, their bytes, audit bytes); the turn was ended and
	// what was dropped is recorded in the audit trail.
	ErrOutputLimit = errors.New("turn output limit")
	// ErrLimitExceeded: a download or output cap was hit.
	ErrLimitExceeded = errdefs.LimitExceeded
	// ErrHardening: a hardening setting did not stick on the engine.
	ErrHardening = errors.New("hardening setting not applied")
	// ErrInvalidArgument: the caller passed something unusable.
	ErrInvalidArgument = errdefs.InvalidArgument
	// ErrOutOfMemory: the OOM killer killed a process of the sandbox (see
	// ResourceError).
	ErrOutOfMemory = errors.New("out of memory")
	// ErrPidsLimit: the sandbox's process limit refused forks (see
	// ResourceError).
	ErrPidsLimit = errors.New("process limit reached")
	// ErrDiskLimit: a write failed at the sandbox's disk limit
	// (SandboxOptions.DiskBytes; see ResourceError).
	ErrDiskLimit = errors.New("disk limit reached")
	// ErrDestinationExists: a download would replace something it must not.
	ErrDestinationExists = errdefs.DestinationExists
	// ErrNetwork: the sandbox's boundary (the relay to the host's model
	// and egress proxies) could not be set up.
	ErrNetwork = boundary.ErrNetwork
	// ErrImageDigest: an image is not the one recorded at release — its
	// digest differs from the one compiled into the binary (digests.json)
	// or from its registry's, or image_verify is strict and nothing is
	// recorded for it (see images.DigestError).
	ErrImageDigest = errors.New("image digest mismatch")
	// ErrUnsupportedByRuntime: the container runtime cannot do what was
	// asked (see RuntimeFeatures), e.g. a per-exec user on Kubernetes.
	ErrUnsupportedByRuntime = errors.New("not supported by this container runtime")
	// ErrCheckpointSize: the sandbox is larger than a checkpoint may be
	// (Config.CheckpointMaxBytes); no checkpoint was made.
	ErrCheckpointSize = errors.New("checkpoint too large")
)

// invalidArgument adds ErrInvalidArgument to the chain of err, an error
// of a package the library builds on (images/catalog's own
// ErrInvalidArgument), keeping err's message.
func invalidArgument(err error) error {
	if err == nil {
		return nil
	}
	return argumentError{err}
}

type argumentError struct{ error }

func (e argumentError) Unwrap() []error { return []error{e.error, ErrInvalidArgument} }

// HardeningError says which hardening setting the engine did not apply.
type HardeningError struct {
	Setting string
	Want    string
	Got     string
}

func (e *HardeningError) Error() string {
	return fmt.Sprintf("hardening setting %s not applied by the engine: want %s, got %s", e.Setting, e.Want, e.Got)
}

func (e *HardeningError) Unwrap() error { return ErrHardening }

// Limits a sandbox's commands can hit, for ResourceError.
const (
	resourceMemory = "memory"
	resourcePids   = "pids"
	resourceDisk   = "disk"
)

// ResourceError: a command ran into a limit of its sandbox — the kernel's
// OOM killer killed a process (memory), or forks failed because the
// sandbox had as many processes as its pids limit allows, or a write
// failed because the sandbox's disk use reached its limit. errors.Is
// matches ErrOutOfMemory, ErrPidsLimit or ErrDiskLimit.
type ResourceError struct {
	Resource string // "memory", "pids" or "disk"
	Limit    int64  // bytes for memory and disk, processes for pids
	Events   int64  // OOM kills, or refused forks, since the last check (disk: 0)
	Cmd      string // the command that was running
}

func (e *ResourceError) Error() string {
	switch e.Resource {
	case resourceMemory:
		return fmt.Sprintf("%s: out of memory: the sandbox's memory limit (%d bytes) was reached and the OOM killer killed %d process(es)", e.Cmd, e.Limit, e.Events)
	case resourceDisk:
		return fmt.Sprintf("%s: disk limit reached: the sandbox may use %d bytes of disk and a write failed", e.Cmd, e.Limit)
	default:
		return fmt.Sprintf("%s: process limit reached: the sandbox allows %d processes and %d fork(s) were refused", e.Cmd, e.Limit, e.Events)
	}
}

func (e *ResourceError) Unwrap() error {
	switch e.Resource {
	case resourceMemory:
		return ErrOutOfMemory
	case resourceDisk:
		return ErrDiskLimit
	}
	return ErrPidsLimit
}

// DriverError is a failure the CLI itself reported: a rejected key, an API
// error, a crash. Callers branch on it with errors.As.
type DriverError struct {
	Driver   string
	Message  string // what the CLI said, in one line
	ExitCode int
	Stderr   string // the CLI's stderr (capped), for diagnosis
	// Status is the HTTP status of the API error, when the CLI reported one.
	Status int
	// Err is the sentinel the failure matches, if any (ErrNoOutput when
	// the CLI printed nothing usable).
	Err error `json:"-"`
}

func (e *DriverError) Error() string {
	msg := fmt.Sprintf("%s: %s", e.Driver, e.Message)
	if e.Status != 0 {
		msg += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if e.ExitCode != 0 {
		msg += fmt.Sprintf(" (exit %d)", e.ExitCode)
	}
	return msg
}

func (e *DriverError) Unwrap() error { return e.Err }

// Errors of agents.
var (
	// ErrUnsupported: the driver does not support this (it does not
	// implement the optional interface; see CapabilitiesOf).
	ErrUnsupported = errors.New("not supported by this driver")
	// ErrNoOutput: the CLI exited without printing anything usable.
	ErrNoOutput = errors.New("agent CLI printed nothing")
	// ErrCLIMissing: the CLI is not installed in the image.
	ErrCLIMissing = errors.New("agent CLI not found in the image")
)
