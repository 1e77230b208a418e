// Package drivertest is the test kit of agent drivers (package driver/*
// here, or a driver of your own for a CLI this project does not ship). It
// has two halves, and neither links a container engine's client:
//
// Unit fakes, no engine: HostOps, a fake sandbox whose commands run on
// the host in a private tree (the driver's real shell scripts with the
// host's sh); CheckRulesAndSkills, the rules and skills contract on
// HostOps; CheckGolden, the golden-file harness of a parser (go test
// -update rewrites the files).
//
// End to end, against the driver's real CLI in its real image and the
// fake model (package fakemodel) on the host's loopback: FakeModel,
// StartAgent and Start (on the sandboxagent.Runtime you pass: Docker,
// Podman, Kubernetes or your own engine), then the checks every driver
// passes: ShellTurn (a tool call, its result, the events, the audit, no
// key in the sandbox), CheckBadKey (a 401 is a one-line *DriverError
// without the key), CheckAuditLines, NoKeyInHome, RequestText (what
// reached the model), CheckCarried (which session a fork's turn
// carried). Put these tests behind a build tag (this project uses
// integration) so a plain go test needs no engine.
//
// Running the contract against your own driver:
//
//	//go:build integration
//
//	func TestShellTurn(t *testing.T) {
//		rt, err := docker.New(context.Background(), docker.Options{}) // or your engine
//		if err != nil {
//			t.Skip(err)
//		}
//		a, _, _ := drivertest.Start(t, rt, drivertest.ShellThenDone(drivertest.ShellCommand),
//			func(m *fakemodel.Server) *mycli.Driver {
//				return mycli.New(mycli.Options{BaseURL: m.URL() + "/v1", APIKey: drivertest.Key})
//			})
//		drivertest.ShellTurn(t, a, drivertest.ShellWant{Tool: "bash"})
//	}
//
// A missing image (or engine) fails the test under CI=true and skips it
// elsewhere.
package drivertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
)

// Key is the API key tests give drivers; the fake expects it, so a test
// can also give a wrong one and see a 401.
const Key = "sk-sandbox-agent-test-key-0123456789"

// FakeModel starts the fake model on host loopback with script (whose
// expect_key is set to Key when empty) and stops it at cleanup.
func FakeModel(t testing.TB, script fakemodel.Script) *fakemodel.Server {
	t.Helper()
	if script.ExpectKey == "" {
		script.ExpectKey = Key
	}
	srv, err := fakemodel.New(script, fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// ShellThenDone is the script "call the shell tool with command, then
// answer DONE".
func ShellThenDone(command string) fakemodel.Script {
	return fakemodel.Script{Responses: []fakemodel.Step{
		{Tool: fakemodel.ToolShell, Command: command},
		{Text: "DONE"},
	}}
}

// Unauthorized is a script whose every request fails with 401.
func Unauthorized() fakemodel.Script {
	return fakemodel.Script{Responses: []fakemodel.Step{{Error: 401, Message: "invalid api key"}}}
}

// AuditRoot is a fresh audit root for one test.
func AuditRoot(t testing.TB) string { return filepath.Join(t.TempDir(), "audit") }

// StartAgent starts drv's CLI in its image on rt, with the default
// boundary (no network; the model proxy forwards to the fake model on
// 127.0.0.1) and the audit under auditRoot, and closes it at cleanup. The
// agent's configuration is sandboxagent.DefaultConfig with that audit
// root and a generous turn timeout; opts come after it (a WithConfig
// replaces it whole: set its AuditRoot). A missing image fails the test
// under CI=true and skips it elsewhere.
func StartAgent(t testing.TB, rt sandboxagent.Runtime, drv sandboxagent.Driver, auditRoot string, opts ...sandboxagent.AgentOption) *sandboxagent.Agent {
	t.Helper()
	if rt == nil {
		t.Fatal("drivertest.StartAgent: no Runtime")
	}
	cfg := sandboxagent.DefaultConfig()
	cfg.AuditRoot = auditRoot
	// Generous: a CLI starting on a loaded 2-core CI machine can take a minute.
	cfg.Timeouts.Ask = 4 * time.Minute
	all := append([]sandboxagent.AgentOption{sandboxagent.WithConfig(cfg)}, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, err := sandboxagent.Start(ctx, rt, drv, all...)
	if errors.Is(err, sandboxagent.ErrImageNotFound) {
		prereq.Missing(t, "image for %s missing (build it with .ci/build_docker.sh %s): %v", drv.Name(), drv.Name(), err)
	}
	if err != nil {
		t.Fatalf("Start %s: %v", drv.Name(), err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// AuditFiles checks that dir holds the three audit files with one event
// per event and one raw line per stdout line, and that secret appears in
// none of them. It returns the raw line count.
func AuditFiles(t testing.TB, dir, secret string) int {
	t.Helper()
	if dir == "" {
		t.Fatal("no audit folder")
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("audit: %v", err)
		}
		if secret != "" && strings.Contains(string(b), secret) {
			t.Errorf("audit %s contains the API key", name)
		}
		return string(b)
	}
	raw := read("session.jsonl")
	read("events.jsonl")
	read("status.json")
	return strings.Count(raw, "\n")
}

// turnEndLine starts the line the opencode bridge ends a long-lived turn
// with; it gives no event.
const turnEndLine = `{"type":"turn_end"`

// CheckAuditLines checks the audit folder dir (as AuditFiles) and that its
// session.jsonl holds exactly the lines the events point up to (maxLine,
// the highest Event.Line), or those and a long-lived turn's end line.
func CheckAuditLines(t testing.TB, dir string, maxLine int) {
	t.Helper()
	got := AuditFiles(t, dir, Key)
	if got == maxLine {
		return
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "session.jsonl"))
	lines := strings.SplitAfter(string(raw), "\n")
	if got != maxLine+1 || !strings.HasPrefix(lines[maxLine], turnEndLine) {
		t.Errorf("session.jsonl has %d lines, the events point up to line %d", got, maxLine)
	}
}

// Ctx is a context bounded for one end-to-end turn.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// capture makes Capture copy end-to-end turns' output into testdata.
var capture = flag.Bool("capture", false, "copy the raw output (and stderr) of the end-to-end turns into testdata/ for the parser's golden tests")

// Capture, when the test runs with -capture, copies a turn's raw output
// (the audit's session.jsonl) to testdata/<name>.jsonl and, when the turn
// failed with a DriverError that kept stderr, that to
// testdata/<name>.stderr: the layout CheckGolden reads.
func Capture(t testing.TB, res sandboxagent.TurnResult, err error, name string) {
	t.Helper()
	if !*capture || res.AuditDir == "" {
		return
	}
	b, rerr := os.ReadFile(filepath.Join(res.AuditDir, "session.jsonl"))
	if rerr == nil {
		rerr = os.WriteFile(filepath.Join("testdata", name+".jsonl"), b, 0o644)
	}
	var de *sandboxagent.DriverError
	if rerr == nil && errors.As(err, &de) && de.Stderr != "" {
		rerr = os.WriteFile(filepath.Join("testdata", name+".stderr"), []byte(de.Stderr), 0o644)
	}
	if rerr != nil {
		t.Error(rerr)
	}
}

// Capturing reports whether the test runs with -capture.
func Capturing() bool { return *capture }

// RequestText is every string inside the JSON bodies of the model
// requests the fake got from index from on (decoded, so escaping does not
// matter), one per line. It fails the test when there was none.
func RequestText(t testing.TB, srv *fakemodel.Server, from int) string {
	t.Helper()
	var b strings.Builder
	n := 0
	for _, r := range srv.Requests()[from:] {
		if r.API == "" {
			continue
		}
		var v any
		if err := json.Unmarshal(r.Body, &v); err != nil {
			t.Fatalf("request body: %v", err)
		}
		jsonStrings(v, &b)
		n++
	}
	if n == 0 {
		t.Fatalf("the fake model got no model request after #%d", from)
	}
	return b.String()
}

// CheckCarried checks the model requests of the turn marked by marker
// (a forked or restored session's): at least one, each carrying every
// want (the base session's markers) and none of avoid (another branch's).
func CheckCarried(t testing.TB, srv *fakemodel.Server, marker string, want, avoid []string) {
	t.Helper()
	n := 0
	for _, r := range srv.Requests() {
		body := string(r.Body)
		if r.API == "" || !strings.Contains(body, marker) {
			continue
		}
		n++
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("a model request of turn %s lacks %s (the base session): request %d", marker, w, r.Seq)
			}
		}
		for _, x := range avoid {
			if strings.Contains(body, x) {
				t.Errorf("a model request of turn %s carries %s (another branch's turn): request %d", marker, x, r.Seq)
			}
		}
	}
	if n == 0 {
		t.Errorf("no model request carried %s", marker)
	}
}

// jsonStrings writes every string inside a JSON value to out.
func jsonStrings(v any, out *strings.Builder) {
	switch x := v.(type) {
	case string:
		out.WriteString(x)
		out.WriteByte('\n')
	case []any:
		for _, e := range x {
			jsonStrings(e, out)
		}
	case map[string]any:
		for _, e := range x {
			jsonStrings(e, out)
		}
	}
}

// NoKeyInHome fails when Key is in any file (binary ones too) of the
// sandbox user's home or of the extra folders.
func NoKeyInHome(t testing.TB, a *sandboxagent.Agent, extra ...string) {
	t.Helper()
	cmd := append([]string{"sh", "-c", `k=$1; shift; grep -rlaF -- "$k" "$HOME" "$@"; test $? -eq 1`, "sh", Key}, extra...)
	res, err := a.Container().Run(Ctx(t), sandboxagent.ExecRequest{Cmd: cmd})
	if err != nil || res.ExitCode != 0 {
		t.Errorf("API key found in the sandbox's files (exit %d, %v): %s %s", res.ExitCode, err, res.Stdout, res.Stderr)
	}
}

// ShellCommand is the command of the shell turns: ShellThenDone(ShellCommand).
const ShellCommand = "echo hi > /tmp/out.txt"

// ShellWant is what differs between the drivers' shell turns.
type ShellWant struct {
	Tool          string   // the name of the CLI's shell tool
	IDPrefix      string   // every session id starts with it
	AllowThinking bool     // the CLI reports thinking although the model sent none
	KeyDirs       []string // folders besides the home to search for the key
	Capture       string   // the name -capture keeps the turn's output under
}

// ShellTurn runs the first turn of agent a, whose fake model runs the
// script ShellThenDone(ShellCommand), and checks: reply DONE and the file
// written; a tool_call of the shell tool running the command (call id,
// JSON input) and, after it, its tool_result with exit code 0; every
// event in the turn's session and turn 1, the first a session event, the
// last done with DONE; session, text, usage events and no raw (nor
// thinking) event; the audit files without the key, one raw line per
// stdout line and one line of events.jsonl per event; the key in no file
// of the sandbox's home. It returns the turn, the call and the result.
func ShellTurn(t testing.TB, a *sandboxagent.Agent, want ShellWant) (res sandboxagent.TurnResult, call, result sandboxagent.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	res, err := a.Stream(ctx, "Create /tmp/out.txt containing hi, then answer DONE.", nil)
	t.Logf("turn took %v", time.Since(start))
	if want.Capture != "" {
		Capture(t, res, err, want.Capture)
	}
	if err != nil {
		t.Fatalf("Stream: %v (events %+v)", err, res.Events)
	}
	if res.Reply != "DONE" {
		t.Errorf("reply %q, want DONE", res.Reply)
	}
	if out, err := a.Container().ReadFile(Ctx(t), "/tmp/out.txt", 1<<10); err != nil || string(out) != "hi\n" {
		t.Errorf("/tmp/out.txt = %q, %v", out, err)
	}
	if res.SessionID == "" || !strings.HasPrefix(res.SessionID, want.IDPrefix) {
		t.Errorf("session id %q, want the prefix %q", res.SessionID, want.IDPrefix)
	}
	callAt := slices.IndexFunc(res.Events, func(ev sandboxagent.Event) bool {
		return ev.Kind == sandboxagent.KindToolCall && strings.Contains(ev.Payload.Command, ShellCommand)
	})
	if callAt < 0 {
		t.Fatalf("no tool_call running %q in %+v", ShellCommand, res.Events)
	}
	call = res.Events[callAt]
	if p := call.Payload; p.CallID == "" || p.Tool != want.Tool || !json.Valid(p.Input) {
		t.Errorf("tool_call payload %+v, want the tool %s", p, want.Tool)
	}
	resultAt := slices.IndexFunc(res.Events, func(ev sandboxagent.Event) bool {
		return ev.Kind == sandboxagent.KindToolResult && ev.Payload.CallID == call.Payload.CallID
	})
	if resultAt <= callAt {
		t.Errorf("tool_result for %s at %d, call at %d", call.Payload.CallID, resultAt, callAt)
	} else if result = res.Events[resultAt]; result.Line < call.Line || result.Payload.IsError || result.Payload.ExitCode == nil || *result.Payload.ExitCode != 0 {
		t.Errorf("tool_result %+v (line %d, call line %d)", result.Payload, result.Line, call.Line)
	}
	maxLine := 0
	kinds := map[sandboxagent.EventKind]int{}
	for _, ev := range res.Events {
		maxLine = max(maxLine, ev.Line)
		kinds[ev.Kind]++
		if ev.SessionID != res.SessionID || ev.Turn != 1 {
			t.Errorf("event %+v: session/turn", ev)
		}
		if ev.Kind == sandboxagent.KindRaw {
			t.Errorf("raw event: %.300s", ev.Payload.Raw)
		}
	}
	for _, k := range []sandboxagent.EventKind{sandboxagent.KindSession, sandboxagent.KindText, sandboxagent.KindUsage, sandboxagent.KindDone} {
		if kinds[k] == 0 {
			t.Errorf("no %s event", k)
		}
	}
	if kinds[sandboxagent.KindThinking] != 0 && !want.AllowThinking {
		t.Errorf("thinking events without reasoning: %v", kinds)
	}
	if first := res.Events[0]; first.Kind != sandboxagent.KindSession {
		t.Errorf("first event %+v", first)
	}
	if last := res.Events[len(res.Events)-1]; last.Kind != sandboxagent.KindDone || last.Payload.Text != "DONE" {
		t.Errorf("last event %+v", last)
	}
	CheckAuditLines(t, res.AuditDir, maxLine)
	evs, err := os.ReadFile(filepath.Join(res.AuditDir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range bytes.Split(bytes.TrimSuffix(evs, []byte("\n")), []byte("\n")) {
		n++
		var ev sandboxagent.Event
		if err := json.Unmarshal(l, &ev); err != nil {
			t.Errorf("events.jsonl line %d: %v", n, err)
		}
	}
	if n != len(res.Events) {
		t.Errorf("events.jsonl has %d events, the turn %d", n, len(res.Events))
	}
	NoKeyInHome(t, a, want.KeyDirs...)
	return res, call, result
}

// BadKeyTurn is a turn the model answered with 401.
type BadKeyTurn struct {
	Res  sandboxagent.TurnResult
	Err  error // a *DriverError: DE
	DE   *sandboxagent.DriverError
	Took time.Duration
}

// CheckBadKey runs a turn of agent a, whose fake model runs the script
// Unauthorized, and checks what every driver does with the 401: a
// *DriverError of the driver with status 401 and a one-line message,
// without the key; no reply; the audit files without the key. The time
// it took is in Took, for the caller to log: only Ctx's deadline bounds
// it (a guard against a hang; a retry loop shows in the fake model's
// requests, which the caller can count).
func CheckBadKey(t testing.TB, a *sandboxagent.Agent, driver string) BadKeyTurn {
	t.Helper()
	start := time.Now()
	res, err := a.Stream(Ctx(t), "hello", nil)
	b := BadKeyTurn{Res: res, Err: err, Took: time.Since(start)}
	t.Logf("401 → %v after %v", err, b.Took)
	if !errors.As(err, &b.DE) {
		t.Fatalf("err %T %v, want *DriverError", err, err)
	}
	if de := b.DE; de.Status != 401 || de.Driver != driver || de.Message == "" || strings.Contains(de.Message, "\n") {
		t.Errorf("DriverError %+v", de)
	}
	if strings.Contains(b.DE.Error(), Key) || strings.Contains(b.DE.Stderr, Key) {
		t.Error("the error holds the key")
	}
	if res.Reply != "" {
		t.Errorf("reply %q on error", res.Reply)
	}
	if res.AuditDir != "" {
		AuditFiles(t, res.AuditDir, Key)
	}
	return b
}

// Start starts the fake model with script (see FakeModel) and an agent
// on rt (see StartAgent) of the driver newDriver makes for it.
func Start[D sandboxagent.Driver](t testing.TB, rt sandboxagent.Runtime, script fakemodel.Script, newDriver func(*fakemodel.Server) D, opts ...sandboxagent.AgentOption) (*sandboxagent.Agent, D, *fakemodel.Server) {
	t.Helper()
	srv := FakeModel(t, script)
	drv := newDriver(srv)
	return StartAgent(t, rt, drv, AuditRoot(t), opts...), drv, srv
}

// EndlessCommand is a shell tool call that never ends by itself (not
// sleep: claude refuses a long sleep in its shell tool).
const EndlessCommand = "tail -f /dev/null"

// EndlessRunning counts the EndlessCommand processes in the sandbox of a
// ("0", "1", …; an exec error's text). It reads /proc, not ps: not every
// image has procps.
func EndlessRunning(ctx context.Context, a *sandboxagent.Agent) string {
	scan := `for p in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$p"; echo; done 2>/dev/null | grep -c '^` + EndlessCommand + `' || true`
	out, err := a.Container().Exec(ctx, []string{"sh", "-c", scan})
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(string(out.Stdout))
}
