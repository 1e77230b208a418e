package sandboxagent

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// sessionDriver is fakeDriver with every optional interface.
type sessionDriver struct {
	fakeDriver
	calls []string
}

func (d *sessionDriver) Fork(_ context.Context, _ ContainerOps, id string) (string, error) {
	d.calls = append(d.calls, "fork "+id)
	return id + "-fork", nil
}

func (d *sessionDriver) InstallSkill(_ context.Context, _ ContainerOps, s Skill) error {
	d.calls = append(d.calls, "skill "+s.Name)
	return nil
}

func (d *sessionDriver) InstallRules(_ context.Context, _ ContainerOps, rules string) error {
	d.calls = append(d.calls, "rules "+rules)
	return nil
}

func (d *sessionDriver) ListSessions(context.Context, ContainerOps) ([]SessionInfo, error) {
	d.calls = append(d.calls, "list")
	return []SessionInfo{{ID: "s1"}}, nil
}

func (d *sessionDriver) DeleteSession(_ context.Context, _ ContainerOps, id string) error {
	d.calls = append(d.calls, "delete "+id)
	return nil
}

func (d *sessionDriver) DumpSession(_ context.Context, _ ContainerOps, id string) (SessionDump, error) {
	d.calls = append(d.calls, "dump "+id)
	return SessionDump{Driver: d.Name(), SessionID: id}, nil
}

func (d *sessionDriver) LoadSession(_ context.Context, _ ContainerOps, dump SessionDump) (string, error) {
	d.calls = append(d.calls, "load "+dump.SessionID)
	return dump.SessionID, nil
}

var (
	_ Forker         = (*sessionDriver)(nil)
	_ SkillInstaller = (*sessionDriver)(nil)
	_ RulesInstaller = (*sessionDriver)(nil)
	_ SessionStore   = (*sessionDriver)(nil)
)

func TestCapabilitiesOf(t *testing.T) {
	if got := CapabilitiesOf(&fakeDriver{}); got != (Capabilities{Continue: true}) {
		t.Errorf("plain driver: %+v", got)
	}
	want := Capabilities{Continue: true, Fork: true, Skills: true, Rules: true, Sessions: true}
	if got := CapabilitiesOf(&sessionDriver{}); got != want {
		t.Errorf("session driver: %+v", got)
	}
}

func TestAgentOptionalInterfaces(t *testing.T) {
	ctx := context.Background()
	out := func(string) (string, string, int) { return `{"session":"s1"}` + "\n" + `{"text":"ok"}` + "\n", "", 0 }
	skill := Skill{Name: "demo", Files: map[string][]byte{"SKILL.md": []byte("x")}}

	// A driver without the optional interfaces needs no stubs: every
	// operation is ErrUnsupported and names the missing interface.
	a, _ := startFake(t, cliRuntime(out), &fakeDriver{key: "k-123456"}, nil)
	if _, err := a.Ask(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	_, errFork := a.ForkSession(ctx, "")
	_, errList := a.ListSessions(ctx)
	_, errDump := a.DumpSession(ctx, "")
	_, errLoad := a.LoadSession(ctx, SessionDump{SessionID: "s1"})
	for iface, err := range map[string]error{
		"Forker":         errFork,
		"SkillInstaller": a.InstallSkill(ctx, skill),
		"RulesInstaller": a.InstallRules(ctx, "r"),
		"SessionStore":   errors.Join(errList, a.DeleteSession(ctx, "s1"), errDump, errLoad),
	} {
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "sandboxagent."+iface) {
			t.Errorf("%s: %v", iface, err)
		}
	}

	// A driver with them gets the calls.
	drv := &sessionDriver{fakeDriver: fakeDriver{key: "k-123456"}}
	b, _ := startFake(t, cliRuntime(out), drv, nil)
	if _, err := b.Ask(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if id, err := b.ForkSession(ctx, ""); err != nil || id != "s1-fork" {
		t.Errorf("fork %q %v", id, err)
	}
	if err := errors.Join(b.InstallSkill(ctx, skill), b.InstallRules(ctx, "r")); err != nil {
		t.Error(err)
	}
	if l, err := b.ListSessions(ctx); err != nil || len(l) != 1 {
		t.Errorf("list %v %v", l, err)
	}
	d, err := b.DumpSession(ctx, "")
	if err != nil || d.SessionID != "s1" {
		t.Errorf("dump %+v %v", d, err)
	}
	if err := b.DeleteSession(ctx, "s1"); err != nil || b.SessionID() != "" {
		t.Errorf("delete %v, session %q", err, b.SessionID())
	}
	if id, err := b.LoadSession(ctx, d); err != nil || id != "s1" || b.SessionID() != "s1" {
		t.Errorf("load %q %v", id, err)
	}
	want := "fork s1,skill demo,rules r,list,dump s1,delete s1,load s1"
	if got := strings.Join(drv.calls, ","); got != want {
		t.Errorf("calls %s, want %s", got, want)
	}
}
