package sandboxagent

import (
	"errors"
	"fmt"
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
	ErrPathNotFound = errors.New("path not found in container")
	// ErrClosed: the sandbox was closed.
	ErrClosed = errors.New("sandbox closed")
	// ErrTimeout: an operation ran past its timeout.
	ErrTimeout = errors.New("timeout")
	// ErrUnsafeArchive: a download carried something that could escape the
	// destination (see safetar for the policy).
	ErrUnsafeArchive = errors.New("unsafe archive")
	// ErrLimitExceeded: a download or output cap was hit.
	ErrLimitExceeded = errors.New("limit exceeded")
	// ErrHardening: a hardening setting did not stick on the engine.
	ErrHardening = errors.New("hardening setting not applied")
	// ErrInvalidArgument: the caller passed something unusable.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrOutOfMemory: the OOM killer killed a process of the sandbox (see
	// ResourceError).
	ErrOutOfMemory = errors.New("out of memory")
	// ErrPidsLimit: the sandbox's process limit refused forks (see
	// ResourceError).
	ErrPidsLimit = errors.New("process limit reached")
	// ErrDestinationExists: a download would replace something it must not.
	ErrDestinationExists = errors.New("destination exists")
)

// ConfigError is an invalid configuration value, naming the key and the
// source it came from (a file path or an environment variable).
type ConfigError struct {
	Key    string
	Source string
	Err    error
}

func (e *ConfigError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("config %s: %v", e.Source, e.Err)
	}
	return fmt.Sprintf("config key %q from %s: %v", e.Key, e.Source, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

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
