package kit

import (
	"context"
	"crypto/rand"
	"fmt"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// IsUUID reports whether s is a UUID as the CLIs write them: hex digits
// (either case) in 8-4-4-4-12 groups. Only such ids reach paths and
// command lines.
func IsUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return false
			}
		default:
			if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F') {
				return false
			}
		}
	}
	return true
}

// NewUUID is a random (version 4) UUID in lower case.
func NewUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// SessionIDs describes a driver's session ids, for the checks every
// session operation makes before an id reaches a script or a path.
type SessionIDs struct {
	Driver string            // errors start with it
	Form   string            // what a valid id is, for errors: "a UUID"
	Valid  func(string) bool // whether an id has that form
}

// Check fails with ErrInvalidArgument unless id is valid.
func (s SessionIDs) Check(id string) error {
	if !s.Valid(id) {
		return fmt.Errorf("%w: %s session id %q is not %s", sandboxagent.ErrInvalidArgument, s.Driver, id, s.Form)
	}
	return nil
}

// NotFound is the error for a session the sandbox does not hold: an
// ErrPathNotFound.
func (s SessionIDs) NotFound(id string) error {
	return fmt.Errorf("%s: session %s: %w", s.Driver, id, sandboxagent.ErrPathNotFound)
}

// Exists is the error for a session id the sandbox already holds, when
// op (fork, load) would create it: an ErrDestinationExists.
func (s SessionIDs) Exists(op, id string) error {
	return fmt.Errorf("%s: %s: session %s: %w", s.Driver, op, id, sandboxagent.ErrDestinationExists)
}

// CheckDump fails with ErrInvalidArgument when d is another driver's
// dump or its SessionID is not valid.
func (s SessionIDs) CheckDump(d sandboxagent.SessionDump) error {
	if d.Driver != "" && d.Driver != s.Driver {
		return fmt.Errorf("%w: a %s session cannot be loaded into %s", sandboxagent.ErrInvalidArgument, d.Driver, s.Driver)
	}
	return s.Check(d.SessionID)
}

// DumpFile is the file name of dump d; ErrInvalidArgument when d has no
// such file.
func (s SessionIDs) DumpFile(d sandboxagent.SessionDump, name string) ([]byte, error) {
	b, ok := d.Files[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s session dump has no %s", sandboxagent.ErrInvalidArgument, s.Driver, name)
	}
	return b, nil
}

// Run checks id, then runs a session script with sh: id is $1, args
// follow. A script that exits ExitNoSession gives NotFound(id); otherwise
// Run returns stdout and the exit code (0, or ExitExists for the caller to
// interpret).
func (s SessionIDs) Run(ctx context.Context, c sandboxagent.ContainerOps, sh Shell, script, id string, args ...string) ([]byte, int, error) {
	if err := s.Check(id); err != nil {
		return nil, 0, err
	}
	out, code, err := sh.Run(ctx, c, nil, script, append([]string{id}, args...)...)
	if err == nil && code == ExitNoSession {
		err = s.NotFound(id)
	}
	return out, code, err
}

// Copy runs a fork script that copies session id ($1) into the new
// session newID ($2), exiting ExitNoSession when there is no $1 and
// ExitExists when $2 exists. It returns newID.
func (s SessionIDs) Copy(ctx context.Context, c sandboxagent.ContainerOps, sh Shell, script, id, newID string) (string, error) {
	_, code, err := s.Run(ctx, c, sh, script, id, newID)
	switch {
	case err != nil:
		return "", err
	case code == ExitExists:
		return "", s.Exists("fork", newID)
	}
	return newID, nil
}

// CheckAbsent fails with Exists("load", id) when find, a script that
// exits ExitNoSession when there is no session $1 and 0 when there is,
// finds session id.
func (s SessionIDs) CheckAbsent(ctx context.Context, c sandboxagent.ContainerOps, sh Shell, find, id string) error {
	if err := s.Check(id); err != nil {
		return err
	}
	_, code, err := sh.Run(ctx, c, nil, find, id)
	switch {
	case err != nil:
		return err
	case code == ExitNoSession:
		return nil
	}
	return s.Exists("load", id)
}
