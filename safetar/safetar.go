package safetar

import (
	"errors"
	"fmt"
)

// Default limits, used for zero (or negative) fields of [Limits].
const (
	DefaultMaxBytes   int64 = 1 << 30
	DefaultMaxEntries       = 100000
	DefaultMaxDepth         = 64
)

// Fixed name limits.
const (
	// MaxNameLen is the longest entry name accepted, in bytes.
	MaxNameLen = 4096
	// MaxComponentLen is the longest path component accepted, in bytes.
	MaxComponentLen = 255
)

// maxSkippedListed bounds Report.Skipped; further skips are only counted.
const maxSkippedListed = 1000

// Sentinel errors wrapped by [*Error].
var (
	// ErrUnsafe: an entry could escape the destination or is otherwise
	// hostile (bad name, duplicate, case-fold collision, bad parent).
	ErrUnsafe = errors.New("unsafe archive entry")
	// ErrLimit: a size, entry-count or depth limit was exceeded.
	ErrLimit = errors.New("archive limit exceeded")
	// ErrTruncated: the stream ended early, is not a tar, or is empty.
	ErrTruncated = errors.New("truncated or corrupt archive")
)

// Limits bounds what [Extract] accepts. A zero field means the default
// (DefaultMaxBytes, DefaultMaxEntries, DefaultMaxDepth), never "unlimited".
type Limits struct {
	MaxBytes   int64 // total regular-file bytes written (hardlink copies included)
	MaxEntries int   // entries of any kind, plus implicitly created directories
	MaxDepth   int   // path components, the top-level name included
}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	return l
}

// Skipped is an entry that was not written, under policy.
type Skipped struct {
	Name   string // entry name as validated (top-level name first)
	Reason string // e.g. "symlink", "fifo", "hardlink target not extracted"
}

// Report describes what [Extract] wrote.
type Report struct {
	Files int   // regular files written, hardlink copies included
	Dirs  int   // directories created, implicit parents included
	Bytes int64 // regular-file bytes written
	// Skipped lists entries left out under policy: symlinks, devices, FIFOs,
	// sparse files, unknown types, unsupported hardlinks. At most 1000 are
	// listed; SkippedOmitted counts the rest.
	Skipped        []Skipped
	SkippedOmitted int
}

func (r *Report) skip(name, reason string) {
	if len(r.Skipped) >= maxSkippedListed {
		r.SkippedOmitted++
		return
	}
	r.Skipped = append(r.Skipped, Skipped{Name: name, Reason: reason})
}

// Error is a rejection: which entry and why. Err wraps [ErrUnsafe],
// [ErrLimit] or [ErrTruncated] (possibly together with the underlying cause),
// a context error, or a filesystem error.
type Error struct {
	Entry  string // entry name as found in the stream (shortened if huge); "" if none
	Reason string
	Err    error
}

func (e *Error) Error() string {
	if e.Entry == "" {
		return "safetar: " + e.Reason
	}
	return fmt.Sprintf("safetar: entry %q: %s", e.Entry, e.Reason)
}

func (e *Error) Unwrap() error { return e.Err }

// shorten keeps hostile names printable in errors and reports.
func shorten(s string) string {
	const max = 512
	if len(s) <= max {
		return s
	}
	return s[:max] + "...(" + fmt.Sprint(len(s)) + " bytes)"
}

func newErr(entry string, sentinel error, format string, args ...any) *Error {
	return &Error{Entry: shorten(entry), Reason: fmt.Sprintf(format, args...), Err: sentinel}
}
