package sandboxagent

import (
	"context"
	"fmt"
)

// The session operations below hold the agent's turn lock: they never run
// while a turn does (they wait for it until their context ends; see Hold). Each fails with ErrUnsupported when the driver does
// not implement the optional interface it needs (Forker, SkillInstaller,
// RulesInstaller, SessionStore).

func (a *Agent) unsupported(what, iface string) error {
	return fmt.Errorf("%s: %s: %w (it does not implement sandboxagent.%s)", a.drv.Name(), what, ErrUnsupported, iface)
}

// sessionStore is the driver as a SessionStore, or an ErrUnsupported
// error naming what.
func (a *Agent) sessionStore(what string) (SessionStore, error) {
	s, ok := a.drv.(SessionStore)
	if !ok {
		return nil, a.unsupported(what, "SessionStore")
	}
	return s, nil
}

// Fork copies the current session (or the one named) into a new, isolated
// session and returns its id. The agent keeps continuing the session it
// was on; SetSession(forkID) switches to the fork.
func (a *Agent) Fork(ctx context.Context, sessionID string) (string, error) {
	unlock, err := a.lockTurn(ctx)
	if err != nil {
		return "", err
	}
	defer unlock()
	f, ok := a.drv.(Forker)
	if !ok {
		return "", a.unsupported("fork", "Forker")
	}
	if sessionID == "" {
		sessionID = a.SessionID()
	}
	if sessionID == "" {
		return "", fmt.Errorf("%w: no session to fork yet", ErrInvalidArgument)
	}
	return f.Fork(ctx, a.sb, sessionID)
}

// InstallSkill installs a skill where the CLI reads skills; later turns
// see it.
func (a *Agent) InstallSkill(ctx context.Context, s Skill) error {
	if err := s.validate(); err != nil {
		return err
	}
	unlock, err := a.lockTurn(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	si, ok := a.drv.(SkillInstaller)
	if !ok {
		return a.unsupported("skills", "SkillInstaller")
	}
	return si.InstallSkill(ctx, a.sb, s)
}

// InstallRules installs instruction text where the CLI reads rules.
func (a *Agent) InstallRules(ctx context.Context, rules string) error {
	unlock, err := a.lockTurn(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	ri, ok := a.drv.(RulesInstaller)
	if !ok {
		return a.unsupported("rules", "RulesInstaller")
	}
	return ri.InstallRules(ctx, a.sb, rules)
}

// ListSessions lists the CLI's sessions in this sandbox.
func (a *Agent) ListSessions(ctx context.Context) ([]SessionInfo, error) {
	unlock, err := a.lockTurn(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	st, err := a.sessionStore("list sessions")
	if err != nil {
		return nil, err
	}
	return st.ListSessions(ctx, a.sb)
}

// DeleteSession deletes a session; the CLI can no longer resume it. If it
// was the current session, the next turn starts a new one.
func (a *Agent) DeleteSession(ctx context.Context, id string) error {
	unlock, err := a.lockTurn(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := a.sessionStore("delete session")
	if err != nil {
		return err
	}
	if err := st.DeleteSession(ctx, a.sb, id); err != nil {
		return err
	}
	a.mu.Lock()
	if a.session == id {
		a.session = ""
		a.sessionSet++
	}
	a.mu.Unlock()
	return nil
}

// DumpSession captures a session (the current one when id is "") as a
// portable value, e.g. to LoadSession it into another agent's container.
func (a *Agent) DumpSession(ctx context.Context, id string) (SessionDump, error) {
	unlock, err := a.lockTurn(ctx)
	if err != nil {
		return SessionDump{}, err
	}
	defer unlock()
	st, err := a.sessionStore("dump session")
	if err != nil {
		return SessionDump{}, err
	}
	if id == "" {
		id = a.SessionID()
	}
	if id == "" {
		return SessionDump{}, fmt.Errorf("%w: no session to dump yet", ErrInvalidArgument)
	}
	return st.DumpSession(ctx, a.sb, id)
}

// LoadSession installs a dumped session in this agent's container and
// makes it the current session, so the next turn continues it.
func (a *Agent) LoadSession(ctx context.Context, d SessionDump) (string, error) {
	unlock, err := a.lockTurn(ctx)
	if err != nil {
		return "", err
	}
	defer unlock()
	st, err := a.sessionStore("load session")
	if err != nil {
		return "", err
	}
	if d.Driver != "" && d.Driver != a.drv.Name() {
		return "", fmt.Errorf("%w: a %s session cannot be loaded into %s", ErrInvalidArgument, d.Driver, a.drv.Name())
	}
	id, err := st.LoadSession(ctx, a.sb, d)
	if err != nil {
		return "", err
	}
	a.SetSession(id)
	return id, nil
}
