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
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// newDriver is a claude driver for the fake model srv.
func newDriver(srv *fakemodel.Server) *claude.Driver {
	return claude.New(claude.Options{BaseURL: srv.URL(), APIKey: drivertest.Key})
}

func TestClaudeShellThenDone(t *testing.T) {
	t.Parallel()
	a, _, srv := testenv.Start(t, drivertest.ShellThenDone(drivertest.ShellCommand), newDriver)
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

// perTurn is the agent option of a CLI per turn (the driver's other mode).
func perTurn(t *testing.T) sandboxagent.AgentOption {
	cfg := testenv.Config()
	cfg.AuditRoot = drivertest.AuditRoot(t)
	cfg.Timeouts.Ask = 4 * time.Minute
	cfg.PerTurn = true
	return sandboxagent.WithConfig(cfg)
}

func TestClaudeUnauthorized(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"long-lived", "per-turn"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var opts []sandboxagent.AgentOption
			if mode == "per-turn" {
				opts = append(opts, perTurn(t))
			}
			a, _, _ := testenv.Start(t, drivertest.Unauthorized(), newDriver, opts...)
			b := drivertest.CheckBadKey(t, a, "claude")
			if mode == "per-turn" {
				drivertest.Capture(t, b.Res, b.Err, "fake-401-agent")
			}
			// A CLI run per turn exits 1; the long-lived one reports the
			// failure in its result line and lives on (exit code 0: none).
			if (b.DE.ExitCode == 0) != (mode == "long-lived") || b.Res.AuditDir == "" {
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
		})
	}
}

// cliProcs lists the pids of the long-lived CLI processes in the sandbox
// (from /proc: not every image has procps).
func cliProcs(t *testing.T, a *sandboxagent.Agent) []string {
	t.Helper()
	scan := `for p in /proc/[0-9]*; do c=$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null) || continue; case "$c" in "claude -p --input-format stream-json "*) echo "${p#/proc/}";; esac; done`
	out, err := a.Container().Exec(drivertest.Ctx(t), []string{"sh", "-c", scan})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out.Stdout))
}

// TestClaudeLongLived: follow-up turns run on the one CLI process and
// continue its session; while it serves the session, the session's title
// is already the last prompt (the CLI writes its last-prompt record
// lazily: ListSessions also reads the queued prompts).
func TestClaudeLongLived(t *testing.T) {
	t.Parallel()
	a, drv, srv := testenv.Start(t, fakemodel.Script{Responses: []fakemodel.Step{{Text: "ONE"}, {Text: "TWO"}, {Text: "THREE"}}}, newDriver)
	ctx := drivertest.Ctx(t)
	var procs []string
	var session string
	for i, prompt := range []string{"LL-FIRST-1a", "LL-SECOND-2b", "LL-THIRD-3c"} {
		n := len(srv.Requests())
		res, err := a.Stream(ctx, prompt, nil)
		if err != nil || res.Reply != []string{"ONE", "TWO", "THREE"}[i] {
			t.Fatalf("turn %d: %q, %v", i+1, res.Reply, err)
		}
		if session == "" {
			session = res.SessionID
		}
		if res.SessionID != session {
			t.Errorf("turn %d on session %s, want %s", i+1, res.SessionID, session)
		}
		if i > 0 && !strings.Contains(drivertest.RequestText(t, srv, n), "LL-FIRST-1a") {
			t.Errorf("turn %d's request lacks turn 1: the session was not continued", i+1)
		}
		for _, ev := range res.Events {
			if ev.Kind == sandboxagent.KindRaw {
				t.Errorf("turn %d: raw event %.300s", i+1, ev.Payload.Raw)
			}
		}
		p := cliProcs(t, a)
		if len(p) != 1 || procs != nil && !slices.Equal(p, procs) {
			t.Errorf("after turn %d, CLI processes %v (after turn 1: %v)", i+1, p, procs)
		}
		procs = p
		list, err := drv.ListSessions(ctx, a.Container())
		if err != nil || len(list) != 1 || list[0].ID != session || list[0].Title != prompt {
			t.Errorf("after turn %d: ListSessions = %+v, %v; want %s titled %q", i+1, list, err, session, prompt)
		}
	}
}

// TestClaudeExitRecords pins what the long-lived CLI writes to its
// session's file when it is stopped (the agent moves to another session):
// its exit bookkeeping, a cost-state record and, when not yet written,
// the last-prompt record; nothing of the new session's turn. Such a write
// lands after a Fork of the session; it changes no history.
func TestClaudeExitRecords(t *testing.T) {
	t.Parallel()
	a, drv, _ := testenv.Start(t, fakemodel.Script{Responses: []fakemodel.Step{{Text: "ONE"}, {Text: "TWO"}, {Text: "THREE"}}}, newDriver)
	ctx := drivertest.Ctx(t)
	for _, prompt := range []string{"EXIT-FIRST-4d", "EXIT-SECOND-5e"} {
		if _, err := a.Ask(ctx, prompt); err != nil {
			t.Fatal(err)
		}
	}
	origin := a.SessionID()
	before, err := drv.DumpSession(ctx, a.Container(), origin)
	if err != nil {
		t.Fatal(err)
	}
	a.SetSession("") // the next turn stops the process serving origin
	if _, err := a.Ask(ctx, "EXIT-OTHER-6f"); err != nil {
		t.Fatal(err)
	}
	if a.SessionID() == origin {
		t.Fatal("the new turn continued the old session")
	}
	after, err := drv.DumpSession(ctx, a.Container(), origin)
	if err != nil {
		t.Fatal(err)
	}
	old, now := before.Files["transcript.jsonl"], after.Files["transcript.jsonl"]
	if !bytes.HasPrefix(now, old) {
		t.Fatalf("the transcript changed, not only grew:\nbefore %d bytes, after %d", len(old), len(now))
	}
	types := map[string]int{}
	for _, l := range bytes.Split(bytes.TrimSuffix(now[len(old):], []byte("\n")), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var r struct {
			Type       string `json:"type"`
			SessionID  string `json:"sessionId"`
			LastPrompt string `json:"lastPrompt"`
		}
		if err := json.Unmarshal(l, &r); err != nil || r.SessionID != origin || bytes.Contains(l, []byte("EXIT-OTHER-6f")) ||
			r.Type != "cost-state" && (r.Type != "last-prompt" || r.LastPrompt != "EXIT-SECOND-5e") {
			t.Errorf("the stopped CLI appended %.300s", l)
		}
		types[r.Type]++
	}
	t.Logf("appended at exit: %v", types)
	if len(after.Files) != len(before.Files) {
		t.Errorf("files %d, before %d", len(after.Files), len(before.Files))
	}
	list, err := drv.ListSessions(ctx, a.Container())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.ID == origin && s.Title != "EXIT-SECOND-5e" {
			t.Errorf("the stopped session's title %q", s.Title)
		}
	}
}

// TestClaudeSkillInInit: claude's init line lists an installed skill.
// (Rules, skills and continuing in general: internal/conformance.)
func TestClaudeSkillInInit(t *testing.T) {
	t.Parallel()
	a, drv, _ := testenv.Start(t, fakemodel.Script{}, newDriver)
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
