// Package catalog is the image catalog: versions.json (the pin of every
// agent CLI and of the base image, the one list of CLIs), the Dockerfiles
// under docker/, and digests.json (the image digests recorded at release),
// all compiled into the binary; the image tags derived from them
// (Versions, DefaultImage, Resolve); and the image_policy and image_verify
// settings (Policy, Verify).
//
// It imports nothing of the module's root package: the library
// (sandboxagent) and package images use it, and wrap its ErrInvalidArgument
// into sandboxagent.ErrInvalidArgument at their API.
package catalog

import "errors"

// ErrInvalidArgument is wrapped by every error about a value the caller
// passed: an unknown CLI, an unpinned image reference, a malformed
// repository, an unknown policy.
var ErrInvalidArgument = errors.New("invalid argument")
