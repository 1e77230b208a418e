package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/store"
	"github.com/sandbox-agent/sandbox-agent/store/postgres"
	"github.com/sandbox-agent/sandbox-agent/store/sqlite"
)

// memoryState is the --state value of a store that lives as long as the
// process: serve then removes its sandboxes when it stops.
const memoryState = ":memory:"

// defaultStatePath is serve's SQLite file when neither --state nor the
// state key names one: $XDG_STATE_HOME/sandbox-agent/state.db.
func defaultStatePath() string {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "."
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "sandbox-agent", "state.db")
}

// isPostgres tells a Postgres URL from a file path.
func isPostgres(spec string) bool {
	return strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://")
}

// state is serve's open store.
type state struct {
	store.Store
	// name is for logs: no password.
	name string
	// exclusive: no other server may use it (a SQLite file, locked).
	exclusive bool
	unlock    func()
}

func (s *state) Close() error {
	err := s.Store.Close()
	if s.unlock != nil {
		s.unlock()
	}
	return err
}

// openState opens serve's store: a postgres:// URL, ":memory:", or a
// SQLite file (its folder made 0700 when missing). A SQLite state is
// locked (serve) for one server at a time: its leases are then a dead
// predecessor's, and two servers on one file would fight over the
// sandboxes; `serve token` only reads and writes tokens and takes no lock.
func openState(ctx context.Context, spec string, lock bool) (*state, error) {
	switch {
	case spec == "":
		spec = defaultStatePath()
	case isPostgres(spec):
		st, err := postgres.Open(ctx, spec)
		if err != nil {
			return nil, fmt.Errorf("state %s: %w", redactURL(spec), err)
		}
		return &state{Store: st, name: redactURL(spec)}, nil
	}
	s := &state{name: spec, exclusive: true}
	if spec != memoryState {
		if err := os.MkdirAll(filepath.Dir(spec), 0o700); err != nil {
			return nil, fmt.Errorf("state: %w", err)
		}
		// It holds the agents' model-proxy tokens: refused when others
		// may read it, as the token file is.
		if fi, err := os.Stat(spec); err == nil && fi.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("%w: state file %s has mode %v: want 0600 (chmod 600 %s)", sandboxagent.ErrInvalidArgument, spec, fi.Mode().Perm(), spec)
		}
		if lock {
			unlock, err := lockFile(spec + ".lock")
			if err != nil {
				return nil, fmt.Errorf("state %s: %w", spec, err)
			}
			s.unlock = unlock
		}
	}
	st, err := sqlite.Open(ctx, spec)
	if err != nil {
		if s.unlock != nil {
			s.unlock()
		}
		return nil, fmt.Errorf("state: %w", err)
	}
	s.Store = st
	return s, nil
}

// lockFile takes an exclusive lock on path (created 0600), or fails at
// once when another process holds it.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: another serve uses this state (%s is locked): use a Postgres state for several servers", sandboxagent.ErrInvalidArgument, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// redactURL drops a Postgres URL's passwords: the user's and a password
// parameter.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	if _, ok := p.User.Password(); ok {
		p.User = url.UserPassword(p.User.Username(), "xxx")
	}
	q := p.Query()
	for k := range q {
		if strings.EqualFold(k, "password") {
			q.Set(k, "xxx")
		}
	}
	p.RawQuery = q.Encode()
	return p.String()
}
