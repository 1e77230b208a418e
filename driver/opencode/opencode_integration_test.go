//go:build integration

package opencode_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/driver/opencode"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// askTimeout replaces drivertest's 2 minutes: one opencode turn costs
// about 10 CPU-seconds (a Bun binary loading its bundle on every start),
// which on a busy 2-core machine stretches to minutes.
const askTimeout = 5 * time.Minute

// config is the test configuration with audit under auditRoot.
func config(auditRoot string) sandboxagent.Config {
	cfg := testenv.Config()
	cfg.AuditRoot = auditRoot
	cfg.Timeouts.Ask = askTimeout
	return cfg
}

// start runs the fake model with script and an opencode agent talking to it.
func start(t *testing.T, script fakemodel.Script) (*sandboxagent.Agent, *opencode.Driver, *fakemodel.Server) {
	t.Helper()
	return testenv.Start(t, script, func(srv *fakemodel.Server) *opencode.Driver {
		return opencode.New(opencode.Options{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key})
	}, sandboxagent.WithConfig(config(drivertest.AuditRoot(t))))
}

// longCtx bounds a test of several turns.
func longCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// chatRequests are the recorded chat-completion requests that offered
// tools (opencode's turns; title requests offer none).
func chatRequests(srv *fakemodel.Server) []fakemodel.Request {
	var out []fakemodel.Request
	for _, r := range srv.Requests() {
		if r.API == fakemodel.APIChat && strings.Contains(string(r.Body), `"tools"`) {
			out = append(out, r)
		}
	}
	return out
}

// Shell tool, then DONE; then a second turn continues the session.
func TestShellThenDoneAndContinue(t *testing.T) {
	t.Parallel()
	script := drivertest.ShellThenDone(drivertest.ShellCommand)
	script.Responses = append(script.Responses, fakemodel.Step{Text: "SECOND"})
	a, _, srv := start(t, script)
	ctx := longCtx(t)
	res, _, _ := drivertest.ShellTurn(t, a, drivertest.ShellWant{Tool: "bash", IDPrefix: "ses_", AllowThinking: true, KeyDirs: []string{"/tmp"}})

	// Turn 2 continues the session: opencode re-sends turn 1.
	n1 := len(chatRequests(srv))
	t0 := time.Now()
	r2, err := a.Stream(ctx, "now say SECOND", nil)
	t.Logf("turn 2: %v", time.Since(t0))
	if err != nil {
		t.Fatalf("turn 2: %v", err)
	}
	if r2.Reply != "SECOND" || r2.SessionID != res.SessionID {
		t.Errorf("turn 2: reply %q session %q (turn 1 %q)", r2.Reply, r2.SessionID, res.SessionID)
	}
	reqs := chatRequests(srv)
	if len(reqs) <= n1 {
		t.Fatalf("no request for turn 2")
	}
	body := string(reqs[len(reqs)-1].Body)
	if !strings.Contains(body, "echo hi \\u003e /tmp/out.txt") && !strings.Contains(body, "echo hi > /tmp/out.txt") || !strings.Contains(body, "now say SECOND") {
		t.Errorf("turn 2 request lacks turn 1's prompt: %.2000s", body)
	}
	if r2.AuditDir != res.AuditDir {
		t.Errorf("turn 2 audit %q, turn 1 %q", r2.AuditDir, res.AuditDir)
	}
	maxLine := 0
	for _, ev := range r2.Events {
		maxLine = max(maxLine, ev.Line)
	}
	drivertest.CheckAuditLines(t, r2.AuditDir, maxLine)
}

// A rejected key is a DriverError carrying the HTTP status, after one
// request: no retry loop (the time it took is logged, not judged).
func TestUnauthorized(t *testing.T) {
	a, _, srv := start(t, drivertest.Unauthorized())
	b := drivertest.CheckBadKey(t, a, "opencode")
	// opencode run exits 1; the long-lived server lives on.
	if want := map[bool]int{true: 1, false: 0}[testenv.Config().PerTurn]; b.DE.ExitCode != want {
		t.Errorf("DriverError %+v", b.DE)
	}
	// No retry of a 401 (and no title request: --title).
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests to the model, want 1", n)
	}
	if b.Res.AuditDir == "" {
		t.Error("no audit")
	}
}

// serverPID is the pid of the sandbox's opencode process ("" if none).
func serverPID(t *testing.T, a *sandboxagent.Agent) string {
	t.Helper()
	script := `for d in /proc/[0-9]*; do [ "$(cat "$d/comm" 2>/dev/null)" = opencode ] && echo "${d#/proc/}"; done; true`
	res, err := a.Container().Exec(context.Background(), []string{"sh", "-c", script})
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// A long-lived server past its memory bound is replaced after the turn;
// the next turn continues the session on the new one.
func TestServerMemoryBoundRestarts(t *testing.T) {
	t.Parallel()
	// Turn 2's tool looks for the server it runs under: the proof that
	// the scan of serverPID would have seen one.
	const scan = `for d in /proc/[0-9]*; do [ "$(cat "$d/comm" 2>/dev/null)" = opencode ] && echo found-the-server; done; true`
	script := fakemodel.Script{Responses: []fakemodel.Step{{Text: "ONE"}, {Tool: "shell", Command: scan}, {Text: "TWO"}}}
	a, _, srv := testenv.Start(t, script, func(srv *fakemodel.Server) *opencode.Driver {
		return opencode.New(opencode.Options{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key, ServerMemoryMB: 1})
	}, sandboxagent.WithConfig(config(drivertest.AuditRoot(t))))
	ctx := longCtx(t)
	r1, err := a.Stream(ctx, "MEMORY-ONE say one", nil)
	if err != nil || r1.Reply != "ONE" {
		t.Fatalf("turn 1: %q %v", r1.Reply, err)
	}
	// The bridge stops the server after the turn.
	gone := func(when string) {
		deadline := time.Now().Add(time.Minute)
		for serverPID(t, a) != "" && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if pid := serverPID(t, a); pid != "" {
			t.Fatalf("opencode serve (pid %s) still runs %s, past its memory bound", pid, when)
		}
	}
	gone("after turn 1")
	n := len(chatRequests(srv))
	r2, err := a.Stream(ctx, "MEMORY-TWO say two", nil)
	found := false
	for _, ev := range r2.Events {
		found = found || ev.Kind == sandboxagent.KindToolResult && strings.Contains(ev.Payload.Output, "found-the-server")
	}
	if !found {
		t.Errorf("turn 2's tool saw no opencode process: %+v", r2.Events)
	}
	if err != nil || r2.Reply != "TWO" || r2.SessionID != r1.SessionID {
		t.Fatalf("turn 2: %q %v, session %q then %q", r2.Reply, err, r1.SessionID, r2.SessionID)
	}
	if reqs := chatRequests(srv); len(reqs) <= n || !strings.Contains(string(reqs[len(reqs)-1].Body), "MEMORY-ONE") {
		t.Errorf("turn 2 did not continue turn 1's session")
	}
	gone("after turn 2")
}
