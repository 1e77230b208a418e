// Package errdefs holds the library's sentinel errors that its internal
// packages return as well: package sandboxagent exports each (its
// ErrInvalidArgument is errdefs.InvalidArgument), so errors.Is matches
// whichever package wrapped it.
package errdefs

import "errors"

var (
	InvalidArgument   = errors.New("invalid argument")
	PathNotFound      = errors.New("path not found in container")
	UnsafeArchive     = errors.New("unsafe archive")
	LimitExceeded     = errors.New("limit exceeded")
	DestinationExists = errors.New("destination exists")
)
