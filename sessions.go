package sandboxagent

import (
	"context"
	"fmt"
	"reflect"
)

// The session operations below hold the agent's turn lock: they never run
// while a turn does (they wait for it until their context ends; see Hold).
// Each fails with ErrUnsupported when the driver lacks the optional
// interface it needs (Forker, SkillInstaller, RulesInstaller, SessionStore).

// withDriver runs fn under the turn lock with the agent's driver as an I,
// or fails with ErrUnsupported naming what.
func withDriver[I, R any](ctx context.Context, a *Agent, what string, fn func(I) (R, error)) (R, error) {
	var zero R
	d, ok := a.drv.(I)
	if !ok {
		return zero, fmt.Errorf("%s: %s: %w (it does not implement sandboxagent.%s)", a.drv.Name(), what, ErrUnsupported, reflect.TypeFor[I]().Name())
	}
	unlock, err := a.lockTurn(ctx)
	if err != nil {
		return zero, err
	}
	defer unlock()
	return fn(d)
}

// ForkSession copies the current session (or the one named) into a new
// session in the same sandbox and returns its id; the files stay shared
// (Fork forks the whole sandbox). The agent keeps continuing the session
// it was on; SetSession(forkID) switches to the fork.
func (a *Agent) ForkSession(ctx context.Context, sessionID string) (string, error) {
	return withDriver(ctx, a, "fork", func(f Forker) (string, error) {
		if sessionID == "" {
			sessionID = a.SessionID()
		}
		if sessionID == "" {
			return "", fmt.Errorf("%w: no session to fork yet", ErrInvalidArgument)
		}
		return f.Fork(ctx, a.sb, sessionID)
	})
}

// InstallSkill installs a skill where the CLI reads skills; later turns
// see it.
func (a *Agent) InstallSkill(ctx context.Context, s Skill) error {
	if err := s.validate(); err != nil {
		return err
	}
	_, err := withDriver(ctx, a, "skills", func(si SkillInstaller) (any, error) {
		return nil, si.InstallSkill(ctx, a.sb, s)
	})
	a.sb.writes.Add(1) // a warmed CLI would not see it
	return err
}

// InstallRules installs instruction text where the CLI reads rules.
func (a *Agent) InstallRules(ctx context.Context, rules string) error {
	_, err := withDriver(ctx, a, "rules", func(ri RulesInstaller) (any, error) {
		return nil, ri.InstallRules(ctx, a.sb, rules)
	})
	a.sb.writes.Add(1) // a warmed CLI would not see them
	return err
}

// ListSessions lists the CLI's sessions in this sandbox.
func (a *Agent) ListSessions(ctx context.Context) ([]SessionInfo, error) {
	return withDriver(ctx, a, "list sessions", func(st SessionStore) ([]SessionInfo, error) {
		return st.ListSessions(ctx, a.sb)
	})
}

// DeleteSession deletes a session; the CLI can no longer resume it. If it
// was the current session, the next turn starts a new one.
func (a *Agent) DeleteSession(ctx context.Context, id string) error {
	_, err := withDriver(ctx, a, "delete session", func(st SessionStore) (any, error) {
		if err := st.DeleteSession(ctx, a.sb, id); err != nil {
			return nil, err
		}
		a.mu.Lock()
		if a.session == id {
			a.session = ""
			a.sessionSet++
		}
		a.mu.Unlock()
		return nil, nil
	})
	return err
}

// DumpSession captures a session (the current one when id is "") as a
// portable value, e.g. to LoadSession it into another agent's container.
func (a *Agent) DumpSession(ctx context.Context, id string) (SessionDump, error) {
	return withDriver(ctx, a, "dump session", func(st SessionStore) (SessionDump, error) {
		if id == "" {
			id = a.SessionID()
		}
		if id == "" {
			return SessionDump{}, fmt.Errorf("%w: no session to dump yet", ErrInvalidArgument)
		}
		return st.DumpSession(ctx, a.sb, id)
	})
}

// LoadSession installs a dumped session in this agent's container and
// makes it the current session, so the next turn continues it.
func (a *Agent) LoadSession(ctx context.Context, d SessionDump) (string, error) {
	return withDriver(ctx, a, "load session", func(st SessionStore) (string, error) {
		if d.Driver != "" && d.Driver != a.drv.Name() {
			return "", fmt.Errorf("%w: a %s session cannot be loaded into %s", ErrInvalidArgument, d.Driver, a.drv.Name())
		}
		id, err := st.LoadSession(ctx, a.sb, d)
		if err != nil {
			return "", err
		}
		a.SetSession(id)
		return id, nil
	})
}
