//go:build integration

package codex_test

import (
	"slices"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/codex"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivertest"
)

// start runs the fake model with script and an agent of a fresh codex
// driver talking to it.
func start(t *testing.T, script fakemodel.Script) (*sandboxagent.Agent, *codex.Driver, *fakemodel.Server) {
	t.Helper()
	srv := drivertest.FakeModel(t, script)
	drv := codex.New(codex.Options{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key})
	return drivertest.StartAgent(t, drv, drivertest.AuditRoot(t)), drv, srv
}

func TestCodexShellThenDone(t *testing.T) {
	t.Parallel()
	a, _, _ := start(t, drivertest.ShellThenDone(drivertest.ShellCommand))
	ctx := drivertest.Ctx(t)

	res, err := a.Stream(ctx, "Create /tmp/out.txt containing hi, then answer DONE.", nil)
	if err != nil {
		t.Fatalf("Ask: %v (events %+v)", err, res.Events)
	}
	drivertest.CheckShellTurn(t, a, res, drivertest.ShellWant{Tool: "command_execution"})
}

func TestCodexUnauthorized(t *testing.T) {
	t.Parallel()
	a, _, _ := start(t, drivertest.Unauthorized())
	if b := drivertest.CheckBadKey(t, a, "codex", false); b.DE.ExitCode == 0 {
		t.Errorf("exit code %d", b.DE.ExitCode)
	}
}

func TestCodexContinueRulesSkills(t *testing.T) {
	t.Parallel()
	script := fakemodel.Script{Responses: []fakemodel.Step{{Text: "FIRST"}, {Text: "SECOND"}}}
	a, drv, srv := start(t, script)
	ctx := drivertest.Ctx(t)
	const rules = "RULES-MARKER-7d1: answer in one word."
	if err := drv.InstallRules(ctx, a.Container(), rules+"\n"); err != nil {
		t.Fatal(err)
	}
	skill := sandboxagent.Skill{Name: "marker-skill", Files: map[string][]byte{
		"SKILL.md":      []byte("---\nname: marker-skill\ndescription: SKILL-MARKER-3c9 explains markers\n---\n\n# Marker\nUse markers.\n"),
		"scripts/do.sh": []byte("#!/bin/sh\necho marker\n"),
	}}
	if err := drv.InstallSkill(ctx, a.Container(), skill); err != nil {
		t.Fatal(err)
	}

	const first = "FIRST-PROMPT-5e2 remember this"
	reply, err := a.Ask(ctx, first)
	if err != nil || reply != "FIRST" {
		t.Fatalf("turn 1: %q, %v", reply, err)
	}
	sid := a.SessionID()
	body := drivertest.RequestText(t, srv, 0)
	if !strings.Contains(body, rules) {
		t.Error("the rules did not reach the model")
	}
	if !strings.Contains(body, "marker-skill: SKILL-MARKER-3c9 explains markers") {
		t.Error("the skill is not listed in the request")
	}

	n := len(srv.Requests())
	reply, err = a.Ask(ctx, "SECOND-PROMPT what did I say?")
	if err != nil || reply != "SECOND" {
		t.Fatalf("turn 2: %q, %v", reply, err)
	}
	if a.SessionID() != sid {
		t.Errorf("session %s became %s", sid, a.SessionID())
	}
	body = drivertest.RequestText(t, srv, n)
	if !strings.Contains(body, first) || !strings.Contains(body, "SECOND-PROMPT") {
		t.Error("turn 2's request does not carry turn 1's prompt: the session was not continued")
	}

	list, err := drv.ListSessions(ctx, a.Container())
	if err != nil || !slices.ContainsFunc(list, func(s sandboxagent.SessionInfo) bool { return s.ID == sid }) {
		t.Errorf("ListSessions = %+v, %v; want %s", list, err, sid)
	}
	drivertest.NoKeyInHome(t, a)
}
