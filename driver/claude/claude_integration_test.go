//go:build integration

package claude_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/claude"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivertest"
)

// newDriver is a claude driver for the fake model srv.
func newDriver(srv *fakemodel.Server) *claude.Driver {
	return claude.New(claude.Options{BaseURL: srv.URL(), APIKey: drivertest.Key})
}

func TestClaudeShellThenDone(t *testing.T) {
	t.Parallel()
	a, _, srv := drivertest.Start(t, drivertest.ShellThenDone(drivertest.ShellCommand), newDriver)
	drivertest.ShellTurn(t, a, drivertest.ShellWant{Tool: "Bash", Capture: "fake-shell-done"})
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
	a, _, _ := drivertest.Start(t, drivertest.Unauthorized(), newDriver)
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

// TestClaudeSkillInInit: claude's init line lists an installed skill.
// (Rules, skills and continuing in general: internal/conformance.)
func TestClaudeSkillInInit(t *testing.T) {
	t.Parallel()
	a, drv, _ := drivertest.Start(t, fakemodel.Script{}, newDriver)
	ctx := drivertest.Ctx(t)
	skill := sandboxagent.Skill{Name: "demo-skill", Files: map[string][]byte{
		"SKILL.md": []byte("---\nname: demo-skill\ndescription: SKILL-MARKER-9 demo for tests\n---\nRun scripts/hi.sh.\n"),
	}}
	if err := drv.InstallSkill(ctx, a.Container(), skill); err != nil {
		t.Fatal(err)
	}
	res, err := a.Stream(ctx, "Say hello.", nil)
	if err != nil {
		t.Fatal(err)
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
}
