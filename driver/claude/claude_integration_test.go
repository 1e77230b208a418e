//go:build integration

package claude_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/claude"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivertest"
)

// start runs the fake model with script and an agent of a fresh claude
// driver talking to it.
func start(t *testing.T, script fakemodel.Script) (*sandboxagent.Agent, *claude.Driver, *fakemodel.Server) {
	t.Helper()
	srv := drivertest.FakeModel(t, script)
	drv := claude.New(claude.Options{BaseURL: srv.URL(), APIKey: drivertest.Key})
	return drivertest.StartAgent(t, drv, drivertest.AuditRoot(t)), drv, srv
}

// lastMessages is the body of the last Messages API request the fake got.
func lastMessages(t *testing.T, srv *fakemodel.Server) string {
	t.Helper()
	reqs := srv.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].API == fakemodel.APIMessages {
			return string(reqs[i].Body)
		}
	}
	t.Fatal("the fake model got no Messages request")
	return ""
}

func TestClaudeShellThenDone(t *testing.T) {
	t.Parallel()
	a, _, srv := start(t, drivertest.ShellThenDone(drivertest.ShellCommand))
	ctx := drivertest.Ctx(t)
	t0 := time.Now()
	res, err := a.Stream(ctx, "Create /tmp/out.txt containing hi, then answer DONE.", nil)
	t.Logf("turn took %v", time.Since(t0))
	if err != nil {
		t.Fatalf("Stream: %v\nevents: %+v", err, res.Events)
	}
	drivertest.Capture(t, res, nil, "fake-shell-done")
	drivertest.CheckShellTurn(t, a, res, drivertest.ShellWant{Tool: "Bash"})
	if srv.Remaining() != 0 {
		t.Errorf("%d script steps unused", srv.Remaining())
	}
	for _, r := range srv.Requests() {
		if r.Path != "/v1/messages" && r.Method == "POST" {
			t.Logf("unexpected request %s %s", r.Method, r.Path)
		}
	}
}

func TestClaudeUnauthorized(t *testing.T) {
	t.Parallel()
	a, _, _ := start(t, drivertest.Unauthorized())
	b := drivertest.CheckBadKey(t, a, "claude", false)
	drivertest.Capture(t, b.Res, b.Err, "fake-401-agent")
	if b.DE.ExitCode == 0 || b.Res.AuditDir == "" {
		t.Errorf("exit code %d, audit %q", b.DE.ExitCode, b.Res.AuditDir)
	}
	retries := 0
	for _, ev := range b.Res.Events {
		if ev.Kind == sandboxagent.KindError && !ev.Payload.IsError {
			retries++
		}
	}
	if retries != claude.DefaultMaxRetries {
		t.Errorf("%d retry events, want %d", retries, claude.DefaultMaxRetries)
	}
}

func TestClaudeContinue(t *testing.T) {
	t.Parallel()
	a, _, srv := start(t, fakemodel.Script{Responses: []fakemodel.Step{{Text: "NOTED"}, {Text: "PINEAPPLE-42"}}})
	ctx := drivertest.Ctx(t)
	r1, err := a.Stream(ctx, "Remember the code word PINEAPPLE-42.", nil)
	if err != nil || r1.Reply != "NOTED" {
		t.Fatalf("turn 1: %q %v", r1.Reply, err)
	}
	r2, err := a.Stream(ctx, "What was the code word?", nil)
	if err != nil || r2.Reply != "PINEAPPLE-42" {
		t.Fatalf("turn 2: %q %v", r2.Reply, err)
	}
	if r1.SessionID == "" || r2.SessionID != r1.SessionID {
		t.Errorf("sessions %q then %q", r1.SessionID, r2.SessionID)
	}
	body := lastMessages(t, srv)
	for _, want := range []string{"Remember the code word PINEAPPLE-42.", "NOTED", "What was the code word?"} {
		if !strings.Contains(body, want) {
			t.Errorf("turn 2's request lacks %q", want)
		}
	}
	// Both turns in one audit folder, lines numbered on.
	if r2.AuditDir != r1.AuditDir {
		t.Errorf("audit folders %s, %s", r1.AuditDir, r2.AuditDir)
	}
	maxLine := 0
	for _, ev := range r2.Events {
		maxLine = max(maxLine, ev.Line)
	}
	if got := drivertest.AuditFiles(t, r2.AuditDir, drivertest.Key); got != maxLine {
		t.Errorf("session.jsonl has %d lines, turn 2's events point up to %d", got, maxLine)
	}
}

func TestClaudeRulesAndSkills(t *testing.T) {
	t.Parallel()
	a, drv, srv := start(t, fakemodel.Script{})
	ctx := drivertest.Ctx(t)
	const rules = "RULES-MARKER-7: answer briefly."
	if err := drv.InstallRules(ctx, a.Container(), rules+"\n"); err != nil {
		t.Fatal(err)
	}
	skill := sandboxagent.Skill{Name: "demo-skill", Files: map[string][]byte{
		"SKILL.md":      []byte("---\nname: demo-skill\ndescription: SKILL-MARKER-9 demo for tests\n---\nRun scripts/hi.sh.\n"),
		"scripts/hi.sh": []byte("echo hi\n"),
	}}
	if err := drv.InstallSkill(ctx, a.Container(), skill); err != nil {
		t.Fatal(err)
	}
	res, err := a.Stream(ctx, "Say hello.", nil)
	if err != nil {
		t.Fatal(err)
	}
	body := lastMessages(t, srv)
	if !strings.Contains(body, rules) {
		t.Error("the rules did not reach the model")
	}
	if !strings.Contains(body, "demo-skill: SKILL-MARKER-9 demo for tests") {
		t.Error("the skill is not offered to the model")
	}
	raw, err := os.ReadFile(filepath.Join(res.AuditDir, "session.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var init struct {
		Skills []string `json:"skills"`
	}
	if err := json.Unmarshal(bytes.SplitN(raw, []byte("\n"), 2)[0], &init); err != nil || !slices.Contains(init.Skills, "demo-skill") {
		t.Errorf("init lists skills %q (%v)", init.Skills, err)
	}
	list, err := drv.ListSessions(ctx, a.Container())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != res.SessionID || list[0].Title != "Say hello." {
		t.Errorf("sessions %+v, want %s", list, res.SessionID)
	}
}
