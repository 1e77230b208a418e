//go:build integration

package dsh_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/driver/dsh"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// newDriver is a dsh driver for the fake model srv.
func newDriver(srv *fakemodel.Server) *dsh.Driver {
	return dsh.New(dsh.Options{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key})
}

// lastChat is the body of the last chat-completions request that offered
// tools (not a title request).
func lastChat(t *testing.T, srv *fakemodel.Server) string {
	t.Helper()
	reqs := srv.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].API == fakemodel.APIChat && bytes.Contains(reqs[i].Body, []byte(`"tools"`)) {
			return string(reqs[i].Body)
		}
	}
	t.Fatal("the fake model got no chat request with tools")
	return ""
}

func TestDshShellThenDone(t *testing.T) {
	t.Parallel()
	a, _, _ := testenv.Start(t, drivertest.ShellThenDone(drivertest.ShellCommand), newDriver)
	ctx := drivertest.Ctx(t)
	_, call, result := drivertest.ShellTurn(t, a, drivertest.ShellWant{Tool: "bash", IDPrefix: "session-", Capture: "fake-shell-done"})
	if result.Line <= call.Line {
		t.Errorf("tool_result on line %d, its call on line %d", result.Line, call.Line)
	}

	// A dsh that dies at boot (it refuses a credentials file others can
	// read) ends the turn with a DriverError and leaves nothing running.
	if r, err := a.Container().Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c",
		`printf 'UNUSED: x\n' > "$HOME/.dsh/.credentials.yaml" && chmod 644 "$HOME/.dsh/.credentials.yaml"`}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("plant credentials: %v %s", err, r.Stderr)
	}
	a.SetSession("")
	begin := time.Now()
	_, err := a.Stream(ctx, "this boot fails", nil)
	var de *sandboxagent.DriverError
	if !errors.As(err, &de) || de.ExitCode == 0 || !strings.Contains(de.Message, "644") {
		t.Errorf("boot failure: %v", err)
	} else {
		t.Logf("boot failure → %v after %v", de, time.Since(begin))
	}
	r, err := a.Container().Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c",
		`for p in /proc/[0-9]*; do c=$(cat "$p/comm" 2>/dev/null) && case "$c" in node|dsh|tail) echo "$c";; esac; done; true`}})
	if err != nil || len(bytes.TrimSpace(r.Stdout)) != 0 {
		t.Errorf("processes left after the turns: %q %v", r.Stdout, err)
	}
}

func TestDshUnauthorized(t *testing.T) {
	t.Parallel()
	a, _, _ := testenv.Start(t, drivertest.Unauthorized(), newDriver)
	b := drivertest.CheckBadKey(t, a, "dsh")
	drivertest.Capture(t, b.Res, b.Err, "fake-401")
	if de := b.DE; de.ExitCode != 1 || !strings.Contains(de.Message, "AUTH") || !strings.Contains(de.Stderr, "dsh: AUTH") {
		t.Errorf("DriverError %+v", de)
	}
	if b.Res.AuditDir == "" {
		t.Error("no audit")
	}
}

// TestDshContinueCustomModel: a model the driver's settings do not list
// (dsh would refuse it) in a continued session; the capture of the
// parser's fake-continue. (Rules, skills and continuing in general:
// internal/conformance.)
func TestDshContinueCustomModel(t *testing.T) {
	t.Parallel()
	a, _, srv := testenv.Start(t, fakemodel.Script{Responses: []fakemodel.Step{{Text: "NOTED"}, {Text: "PINEAPPLE-42"}}}, newDriver, sandboxagent.WithModel("custom-model-1"))
	ctx := drivertest.Ctx(t)
	r1, err := a.Stream(ctx, "Remember the code word PINEAPPLE-42.", nil)
	if err != nil || r1.Reply != "NOTED" {
		t.Fatalf("turn 1: %q %v", r1.Reply, err)
	}
	r2, err := a.Stream(ctx, "What was the code word?", nil)
	drivertest.Capture(t, r2, err, "fake-continue")
	if err != nil || r2.Reply != "PINEAPPLE-42" || r2.SessionID != r1.SessionID {
		t.Fatalf("turn 2: %q %v, session %q then %q", r2.Reply, err, r1.SessionID, r2.SessionID)
	}
	body := lastChat(t, srv)
	for _, want := range []string{"Remember the code word PINEAPPLE-42.", "NOTED", "What was the code word?", `"model":"custom-model-1"`} {
		if !strings.Contains(body, want) {
			t.Errorf("turn 2's request lacks %q", want)
		}
	}
}

// TestDshShellEnvironment: what the model's commands see of the
// environment. dsh drops credential-shaped names (KEY, TOKEN, ...) from
// it.
func TestDshShellEnvironment(t *testing.T) {
	t.Parallel()
	a, _, _ := testenv.Start(t, fakemodel.Script{Responses: []fakemodel.Step{{Tool: fakemodel.ToolShell, Command: "env > /tmp/env.txt"}}}, newDriver)
	ctx := drivertest.Ctx(t)
	if _, err := a.Stream(ctx, "FIRST-PROMPT-alpha", nil); err != nil {
		t.Fatal(err)
	}
	if env, err := a.Container().ReadFile(ctx, "/tmp/env.txt", 1<<20); err != nil || !bytes.Contains(env, []byte("PATH=")) || bytes.Contains(env, []byte(drivertest.Key)) {
		t.Errorf("the model's shell environment (%v) holds the key or nothing:\n%s", err, env)
	}
}

// TestDshCaptureMore records more raw output for the parser's golden
// tests (only with -capture): a 500 that a retry gets past, a write with
// reasoning, a failing command.
func TestDshCaptureMore(t *testing.T) {
	if !drivertest.Capturing() {
		t.Skip("only with -capture")
	}
	t.Parallel()
	a, _, srv := testenv.Start(t, fakemodel.Script{}, newDriver)
	ctx := drivertest.Ctx(t)
	for _, c := range []struct {
		name   string
		script fakemodel.Script
	}{
		{"fake-500-recover", fakemodel.Script{Responses: []fakemodel.Step{{Error: 500, Message: "overloaded"}, {Text: "RECOVERED"}}}},
		{"fake-write-thinking", fakemodel.Script{Responses: []fakemodel.Step{
			{Tool: fakemodel.ToolWrite, Path: "/tmp/a.py", Content: "print(1)\n", Thinking: "I should write the file."},
			{Thinking: "Done writing.", Text: "WROTE"},
		}}},
		{"fake-failing-command", fakemodel.Script{Responses: []fakemodel.Step{{Tool: fakemodel.ToolShell, Command: "echo oops >&2; exit 3"}, {Text: "FAILED-AS-EXPECTED"}}}},
	} {
		script := c.script
		script.ExpectKey = drivertest.Key
		if err := srv.Reset(script); err != nil {
			t.Fatal(err)
		}
		a.SetSession("")
		res, err := a.Stream(ctx, "capture "+c.name, nil)
		drivertest.Capture(t, res, err, c.name)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
