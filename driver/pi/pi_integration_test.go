//go:build integration

package pi_test

import (
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/pi"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivertest"
)

// start runs the fake model with script and an agent of a fresh pi driver
// talking to it.
func start(t *testing.T, script fakemodel.Script) (*sandboxagent.Agent, *pi.Driver, *fakemodel.Server) {
	t.Helper()
	srv := drivertest.FakeModel(t, script)
	drv := pi.New(pi.Options{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key})
	return drivertest.StartAgent(t, drv, drivertest.AuditRoot(t)), drv, srv
}

func TestPiShellThenDone(t *testing.T) {
	t.Parallel()
	a, _, _ := start(t, drivertest.ShellThenDone(drivertest.ShellCommand))
	ctx := drivertest.Ctx(t)

	started := time.Now()
	res, err := a.Stream(ctx, "Create /tmp/out.txt containing hi, then answer DONE.", nil)
	t.Logf("turn took %v", time.Since(started))
	if err != nil {
		t.Fatalf("Ask: %v (events %+v)", err, res.Events)
	}
	drivertest.CheckShellTurn(t, a, res, drivertest.ShellWant{Tool: "bash"})
	drivertest.Capture(t, res, nil, "fake-shell-done")
}

// TestPiUnauthorized does not run in parallel with the other tests here:
// it measures the time to the error, which on a loaded 2-core machine
// grows several times over when four other pi processes start with it.
func TestPiUnauthorized(t *testing.T) {
	a, _, srv := start(t, drivertest.Unauthorized())
	b := drivertest.CheckBadKey(t, a, "pi", false)
	if evs := b.Res.Events; len(evs) > 0 {
		t.Logf("first output line after %v, last after %v", b.Took-time.Since(evs[0].Time), b.Took-time.Since(evs[len(evs)-1].Time))
	}
	// pi exits 0 in JSON mode; the 401 is in the assistant message.
	if de := b.DE; de.ExitCode != 0 || !strings.HasPrefix(de.Message, "401 ") {
		t.Errorf("DriverError %+v", de)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests for a rejected key, want 1 (no retry)", n)
	}
	drivertest.Capture(t, b.Res, b.Err, "fake-401")
}

func TestPiContinueRulesSkills(t *testing.T) {
	t.Parallel()
	// Turn 1 also checks that the commands the model runs do not see the key.
	script := fakemodel.Script{Responses: []fakemodel.Step{
		{Tool: fakemodel.ToolShell, Command: `echo "key=[$` + pi.KeyEnv + `]" > /tmp/key.txt`},
		{Text: "FIRST"}, {Text: "SECOND"},
	}}
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
	if got, err := a.Container().ReadFile(ctx, "/tmp/key.txt", 0); err != nil || string(got) != "key=[]\n" {
		t.Errorf("the model's shell saw %q (%v), want an empty key variable", got, err)
	}
	body := drivertest.RequestText(t, srv, 0)
	if !strings.Contains(body, rules) {
		t.Error("the rules did not reach the model")
	}
	if !strings.Contains(body, "<name>marker-skill</name>") || !strings.Contains(body, "SKILL-MARKER-3c9 explains markers") {
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
	if !strings.Contains(body, first) || !strings.Contains(body, "FIRST\n") || !strings.Contains(body, "SECOND-PROMPT") {
		t.Error("turn 2's request does not carry turn 1's prompt and reply: the session was not continued")
	}

	list, err := drv.ListSessions(ctx, a.Container())
	if err != nil || len(list) != 1 || list[0].ID != sid || list[0].Title != first {
		t.Errorf("ListSessions = %+v, %v; want %s", list, err, sid)
	}
	drivertest.NoKeyInHome(t, a)
}
