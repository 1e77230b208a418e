package opencode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/drivertest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden is what the parser made of one captured output.
type golden struct {
	Events    []sandboxagent.Event `json:"events"`
	Reply     string               `json:"reply"`
	SessionID string               `json:"session_id"`
	Error     *goldenError         `json:"error,omitempty"`
}

type goldenError struct {
	Message  string `json:"message"`
	ExitCode int    `json:"exit_code"`
	Status   int    `json:"status,omitempty"`
	Stderr   string `json:"stderr,omitempty"`
}

// parseFile feeds a raw stdout capture to a parser line by line, as the
// agent does, numbering the events' lines.
func parseFile(t *testing.T, name string, exit int, stderr []byte) golden {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{BaseURL: "http://x/v1"}).NewParser(sandboxagent.Turn{Prompt: "p"})
	var g golden
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	for i, l := range lines {
		for _, ev := range p.Parse([]byte(l)) {
			ev.Line = i + 1
			g.Events = append(g.Events, ev)
		}
	}
	out, err := p.Finish(exit, stderr)
	g.Reply, g.SessionID = out.Reply, out.SessionID
	if err != nil {
		var de *sandboxagent.DriverError
		if !errors.As(err, &de) {
			t.Fatalf("Finish error %T %v, want *DriverError", err, err)
		}
		g.Error = &goldenError{Message: de.Message, ExitCode: de.ExitCode, Status: de.Status, Stderr: de.Stderr}
	}
	return g
}

func TestParserGolden(t *testing.T) {
	stderrNoSession, err := os.ReadFile("testdata/fake-nosession.stderr")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		file   string
		exit   int
		stderr []byte
	}{
		{"ref-shell-done.jsonl", 0, nil},              // reference capture (mock, --thinking)
		{"ref-401.jsonl", 1, nil},                     // reference capture, bad key
		{"fake-shell-done.jsonl", 0, nil},             // our command against the fake model
		{"fake-401.jsonl", 1, nil},                    // our command, bad key
		{"fake-write-fail.jsonl", 0, nil},             // write tool, failing shell command, text
		{"fake-nosession.stdout", 1, stderrNoSession}, // unknown --session: no stdout, stderr only
		{"synthetic-odd.jsonl", 1, nil},               // hand-written: raw lines, tool error, multi-part reply
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			got := parseFile(t, c.file, c.exit, c.stderr)
			gotJSON, err := json.MarshalIndent(got, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			gotJSON = append(gotJSON, '\n')
			gf := filepath.Join("testdata", strings.TrimSuffix(c.file, filepath.Ext(c.file))+".golden.json")
			if *update {
				if err := os.WriteFile(gf, gotJSON, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(gf)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if !bytes.Equal(gotJSON, want) {
				t.Errorf("events differ from %s (go test -run TestParserGolden -update to accept):\n%s", gf, gotJSON)
			}
		})
	}
}

// TestParserSemantics asserts what the golden files are expected to hold,
// so an -update cannot quietly accept a regression.
func TestParserSemantics(t *testing.T) {
	t.Run("shell", func(t *testing.T) {
		for _, f := range []string{"ref-shell-done.jsonl", "fake-shell-done.jsonl"} {
			g := parseFile(t, f, 0, nil)
			if g.Reply != "DONE" || g.Error != nil || !strings.HasPrefix(g.SessionID, "ses_") {
				t.Fatalf("%s: reply %q session %q err %+v", f, g.Reply, g.SessionID, g.Error)
			}
			kinds := map[sandboxagent.EventKind]int{}
			var call, result *sandboxagent.Event
			for i := range g.Events {
				ev := &g.Events[i]
				kinds[ev.Kind]++
				switch ev.Kind {
				case sandboxagent.KindToolCall:
					call = ev
				case sandboxagent.KindToolResult:
					result = ev
				case sandboxagent.KindRaw:
					t.Errorf("%s: raw event %+v", f, ev)
				}
			}
			if kinds[sandboxagent.KindSession] != 1 || kinds[sandboxagent.KindThinking] != 2 || kinds[sandboxagent.KindText] != 1 || kinds[sandboxagent.KindUsage] != 2 {
				t.Errorf("%s: kinds %v", f, kinds)
			}
			if call == nil || result == nil {
				t.Fatalf("%s: no tool call/result", f)
			}
			if call.Payload.Tool != "bash" || call.Payload.Command != "echo hi > /tmp/out.txt" || call.Payload.CallID == "" ||
				!json.Valid(call.Payload.Input) || !strings.Contains(string(call.Payload.Input), `"command"`) {
				t.Errorf("%s: call %+v", f, call.Payload)
			}
			if result.Payload.CallID != call.Payload.CallID || result.Payload.ExitCode == nil || *result.Payload.ExitCode != 0 ||
				result.Payload.IsError || result.Payload.Output != "(no output)" {
				t.Errorf("%s: result %+v", f, result.Payload)
			}
		}
		g := parseFile(t, "ref-shell-done.jsonl", 0, nil)
		for _, ev := range g.Events {
			if ev.Kind == sandboxagent.KindUsage {
				p := ev.Payload
				if p.InputTokens != 82 && p.InputTokens != 83 || p.OutputTokens != 7 || p.ReasoningTokens != 3 || p.CacheReadTokens != 20 || p.Cumulative {
					t.Errorf("usage %+v", p)
				}
			}
		}
	})
	t.Run("401", func(t *testing.T) {
		for _, f := range []string{"ref-401.jsonl", "fake-401.jsonl"} {
			g := parseFile(t, f, 1, []byte("  \n"))
			if g.Error == nil || g.Error.Status != 401 || g.Error.ExitCode != 1 || !strings.Contains(g.Error.Message, "APIError") || strings.Contains(g.Error.Message, "\n") {
				t.Errorf("%s: error %+v", f, g.Error)
			}
			if len(g.Events) != 2 || g.Events[0].Kind != sandboxagent.KindSession || g.Events[1].Kind != sandboxagent.KindError || !g.Events[1].Payload.IsError {
				t.Errorf("%s: events %+v", f, g.Events)
			}
		}
	})
	t.Run("write-fail", func(t *testing.T) {
		g := parseFile(t, "fake-write-fail.jsonl", 0, nil)
		if g.Reply != "ALL DONE" || g.Error != nil {
			t.Fatalf("reply %q err %+v", g.Reply, g.Error)
		}
		var paths, codes []string
		for _, ev := range g.Events {
			if ev.Kind == sandboxagent.KindToolCall && ev.Payload.Path != "" {
				paths = append(paths, ev.Payload.Tool+":"+ev.Payload.Path)
			}
			if ev.Kind == sandboxagent.KindToolResult && ev.Payload.ExitCode != nil {
				codes = append(codes, fmt.Sprint(*ev.Payload.ExitCode))
			}
		}
		if !reflect.DeepEqual(paths, []string{"write:/tmp/a.py"}) || !reflect.DeepEqual(codes, []string{"2"}) {
			t.Errorf("paths %v codes %v", paths, codes)
		}
	})
	t.Run("no-session", func(t *testing.T) {
		stderr, _ := os.ReadFile("testdata/fake-nosession.stderr")
		g := parseFile(t, "fake-nosession.stdout", 1, stderr)
		if g.Error == nil || g.Error.Message != "Error: Session not found" || g.Error.ExitCode != 1 || strings.Contains(g.Error.Stderr, "\x1b") {
			t.Errorf("error %+v", g.Error)
		}
	})
	t.Run("odd", func(t *testing.T) {
		g := parseFile(t, "synthetic-odd.jsonl", 1, nil)
		var raws []string
		for _, ev := range g.Events {
			if ev.Kind == sandboxagent.KindRaw {
				raws = append(raws, ev.Payload.Raw)
			}
			if ev.Kind == sandboxagent.KindThinking {
				t.Errorf("empty reasoning gave %+v", ev)
			}
			if ev.Kind == sandboxagent.KindToolResult && (!ev.Payload.IsError || ev.Payload.Output != "Error: permission denied" || ev.Payload.Path != "/etc/shadow") {
				t.Errorf("tool error %+v", ev.Payload)
			}
		}
		if len(raws) != 2 || raws[0] != "this line is not JSON" || !strings.Contains(raws[1], "something_new") {
			t.Errorf("raw %q", raws)
		}
		if g.Reply != "part one\npart two" {
			t.Errorf("reply %q", g.Reply)
		}
		if g.Error == nil || g.Error.Message != "Unexpected server error. Check server logs for details." || g.Error.Status != 0 {
			t.Errorf("error %+v", g.Error)
		}
	})
}

func TestExitWithoutError(t *testing.T) {
	p := New(Options{BaseURL: "http://x"}).NewParser(sandboxagent.Turn{SessionID: "ses_given"})
	out, err := p.Finish(137, []byte("\x1b[91mkilled\x1b[0m\n"))
	var de *sandboxagent.DriverError
	if !errors.As(err, &de) || de.ExitCode != 137 || de.Message != "killed" || de.Stderr != "killed" {
		t.Fatalf("%+v", err)
	}
	if out.SessionID != "ses_given" {
		t.Errorf("session %q", out.SessionID)
	}
	if _, err := New(Options{BaseURL: "http://x"}).NewParser(sandboxagent.Turn{}).Finish(0, nil); err != nil {
		t.Errorf("clean exit: %v", err)
	}
}

func TestCommand(t *testing.T) {
	custom := New(Options{BaseURL: "http://127.0.0.1:9/v1", APIKey: "sk-k"})
	real := New(Options{Provider: "zhipuai-coding-plan", APIKey: "sk-z"})
	base := []string{"opencode", "run", "--format", "json", "--thinking", "--auto"}
	cases := []struct {
		name    string
		d       *Driver
		turn    sandboxagent.Turn
		args    []string
		declare string // model id expected in OPENCODE_CONFIG_CONTENT
	}{
		{"default model", custom, sandboxagent.Turn{Prompt: "hi there"}, []string{"-m", "sandbox/fake-model", "--title"}, ""},
		{"bare model", custom, sandboxagent.Turn{Prompt: "p", Model: "glm-4.6"}, []string{"-m", "sandbox/glm-4.6", "--title"}, "glm-4.6"},
		{"prefixed model", custom, sandboxagent.Turn{Prompt: "p", Model: "sandbox/openai/gpt-x"}, []string{"-m", "sandbox/openai/gpt-x", "--title"}, "openai/gpt-x"},
		{"continue", custom, sandboxagent.Turn{Prompt: "p", SessionID: "ses_abc", WorkDir: "/w"}, []string{"-m", "sandbox/fake-model", "--session", "ses_abc"}, ""},
		{"real provider", real, sandboxagent.Turn{Prompt: "p", Model: "zhipuai-coding-plan/glm-5.3"}, []string{"-m", "zhipuai-coding-plan/glm-5.3", "--title"}, ""},
		{"real provider bare", real, sandboxagent.Turn{Prompt: "p", Model: "glm-5.3"}, []string{"-m", "zhipuai-coding-plan/glm-5.3", "--title"}, ""},
		{"real provider default", real, sandboxagent.Turn{Prompt: "p"}, []string{"--title"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inv, err := c.d.Command(c.turn)
			if err != nil {
				t.Fatal(err)
			}
			if want := append(append([]string{}, base...), c.args...); !reflect.DeepEqual(inv.Cmd, want) {
				t.Errorf("cmd %q\nwant %q", inv.Cmd, want)
			}
			if string(inv.Stdin) != c.turn.Prompt {
				t.Errorf("stdin %q", inv.Stdin)
			}
			if inv.WorkDir != c.turn.WorkDir {
				t.Errorf("workdir %q", inv.WorkDir)
			}
			if inv.Env[KeyEnv] != c.d.o.APIKey || inv.Env["OPENCODE_DISABLE_AUTOUPDATE"] != "1" || inv.Env["OPENCODE_DISABLE_MODELS_FETCH"] != "1" {
				t.Errorf("env %v", inv.Env)
			}
			for _, a := range inv.Cmd {
				if strings.Contains(a, c.d.o.APIKey) {
					t.Errorf("key in argv: %q", inv.Cmd)
				}
			}
			cc, ok := inv.Env["OPENCODE_CONFIG_CONTENT"]
			if c.declare == "" {
				if ok {
					t.Errorf("unexpected OPENCODE_CONFIG_CONTENT %s", cc)
				}
				return
			}
			var cfg struct {
				Provider map[string]struct {
					Models map[string]json.RawMessage `json:"models"`
				} `json:"provider"`
			}
			if err := json.Unmarshal([]byte(cc), &cfg); err != nil {
				t.Fatal(err)
			}
			if _, ok := cfg.Provider["sandbox"].Models[c.declare]; !ok {
				t.Errorf("model %q not declared: %s", c.declare, cc)
			}
		})
	}
	for _, bad := range []sandboxagent.Turn{{Prompt: "  "}, {Prompt: "p", SessionID: "--help"}} {
		if _, err := custom.Command(bad); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

func TestCapabilitiesAndSecrets(t *testing.T) {
	d := New(Options{BaseURL: "http://x", APIKey: "sk-1"})
	if d.Name() != "opencode" || d.Image() != "" {
		t.Error(d.Name(), d.Image())
	}
	want := sandboxagent.Capabilities{Continue: true, Fork: true, Skills: true, Rules: true, Sessions: true, Thinking: true, Usage: true}
	if d.Capabilities() != want {
		t.Errorf("%+v", d.Capabilities())
	}
	if !reflect.DeepEqual(d.Secrets(), []string{"sk-1"}) || New(Options{Provider: "p"}).Secrets() != nil {
		t.Error("secrets")
	}
}

// newFakeOps is a fake sandbox whose commands fn answers, but for the
// driver's query for its config directory, which runs on the host (so
// do all commands when fn is nil).
func newFakeOps(t *testing.T, fn func(req sandboxagent.ExecRequest) sandboxagent.ExecResult) *drivertest.HostOps {
	ops := drivertest.NewHostOps(t)
	if fn != nil {
		ops.Intercept = func(req sandboxagent.ExecRequest) (*sandboxagent.ExecResult, error) {
			if len(req.Cmd) == 3 && req.Cmd[0] == "sh" && strings.Contains(req.Cmd[2], "XDG_CONFIG_HOME") {
				return nil, nil
			}
			res := fn(req)
			return &res, nil
		}
	}
	return ops
}

// configFile is the file rel of opencode's config directory in ops.
func configFile(t *testing.T, ops *drivertest.HostOps, rel string) []byte {
	t.Helper()
	return []byte(ops.Read(t, ".config/opencode/"+rel))
}

func TestSetup(t *testing.T) {
	ctx := context.Background()
	ops := newFakeOps(t, nil)
	d := New(Options{BaseURL: "http://127.0.0.1:1234/v1", APIKey: "sk-secret-value"})
	if err := d.Setup(ctx, ops); err != nil {
		t.Fatal(err)
	}
	data := configFile(t, ops, "opencode.json")
	if strings.Contains(string(data), "sk-secret-value") {
		t.Fatal("key written into the config file")
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg["autoupdate"] != false || cfg["share"] != "disabled" || cfg["snapshot"] != false || cfg["model"] != "sandbox/fake-model" || cfg["small_model"] != "sandbox/fake-model" {
		t.Errorf("config %s", data)
	}
	prov := cfg["provider"].(map[string]any)["sandbox"].(map[string]any)
	opts := prov["options"].(map[string]any)
	if prov["npm"] != "@ai-sdk/openai-compatible" || opts["baseURL"] != "http://127.0.0.1:1234/v1" || opts["apiKey"] != "{env:"+KeyEnv+"}" {
		t.Errorf("provider %v", prov)
	}
	if _, ok := prov["models"].(map[string]any)["fake-model"]; !ok {
		t.Errorf("no default model: %v", prov)
	}

	// A real provider: only its key reference.
	ops = newFakeOps(t, nil)
	if err := New(Options{Provider: "zhipuai-coding-plan", APIKey: "k"}).Setup(ctx, ops); err != nil {
		t.Fatal(err)
	}
	cfg = nil
	_ = json.Unmarshal(configFile(t, ops, "opencode.json"), &cfg)
	prov = cfg["provider"].(map[string]any)["zhipuai-coding-plan"].(map[string]any)
	if _, ok := prov["npm"]; ok || cfg["model"] != nil || prov["options"].(map[string]any)["apiKey"] != "{env:"+KeyEnv+"}" {
		t.Errorf("real provider config %v", cfg)
	}

	if err := New(Options{}).Setup(ctx, newFakeOps(t, nil)); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("no provider: %v", err)
	}
}

func TestRulesAndSkills(t *testing.T) {
	ctx := context.Background()
	ops := newFakeOps(t, nil)
	d := New(Options{BaseURL: "http://x"})
	if err := d.InstallRules(ctx, ops, "be brief"); err != nil {
		t.Fatal(err)
	}
	if got := string(configFile(t, ops, "AGENTS.md")); got != "be brief" {
		t.Errorf("rules %q", got)
	}
	sk := sandboxagent.Skill{Name: "demo", Files: map[string][]byte{"SKILL.md": []byte("---\nname: demo\n---\n"), "scripts/x.sh": []byte("echo")}}
	if err := d.InstallSkill(ctx, ops, sk); err != nil {
		t.Fatal(err)
	}
	for n, want := range sk.Files {
		if got := configFile(t, ops, "skills/demo/"+n); string(got) != string(want) {
			t.Errorf("%s: %q", n, got)
		}
	}
	last := ops.LastRun().Cmd
	if !reflect.DeepEqual(last, []string{"rm", "-rf", "--", ops.HomePath(".config/opencode/skills/demo")}) {
		t.Errorf("old skill not removed first: %q", last)
	}
	if err := d.InstallSkill(ctx, ops, sandboxagent.Skill{Name: "../x", Files: sk.Files}); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("bad skill: %v", err)
	}
}

func TestSessionMembers(t *testing.T) {
	ctx := context.Background()
	d := New(Options{BaseURL: "http://x"})
	exported := `{"info":{"id":"ses_abc","directory":"/workspace","title":"t"},"messages":[]}`
	ops := newFakeOps(t, func(req sandboxagent.ExecRequest) sandboxagent.ExecResult {
		switch {
		case reflect.DeepEqual(req.Cmd, []string{"opencode", "session", "list", "--format", "json"}):
			return sandboxagent.ExecResult{Stdout: []byte(`[{"id":"ses_b","title":"two\n","updated":1795946575325,"created":1,"projectId":"global","directory":"/workspace"},{"id":"ses_a","title":"one","updated":0}]`)}
		case len(req.Cmd) == 4 && req.Cmd[1] == "session" && req.Cmd[2] == "delete":
			if req.Cmd[3] == "ses_missing" {
				return sandboxagent.ExecResult{ExitCode: 1, Stderr: []byte("\x1b[91m\x1b[1mError: \x1b[0mSession not found: ses_missing\n")}
			}
			return sandboxagent.ExecResult{Stdout: []byte("Session deleted\n")}
		case reflect.DeepEqual(req.Cmd, []string{"opencode", "export", "ses_abc"}):
			return sandboxagent.ExecResult{Stdout: []byte(exported), Stderr: []byte("Exporting session: ses_abc\n")}
		case len(req.Cmd) == 3 && req.Cmd[1] == "import":
			return sandboxagent.ExecResult{Stdout: []byte("Imported session: ses_abc\n")}
		case req.Cmd[0] == "sh" && len(req.Cmd) == 5 && req.Cmd[3] == "opencode-fork":
			if req.Env["OPENCODE_SERVER_PASSWORD"] == "" {
				return sandboxagent.ExecResult{ExitCode: 9}
			}
			return sandboxagent.ExecResult{Stdout: []byte(`{"id":"ses_forked","title":"t (fork #1)"}`)}
		}
		return sandboxagent.ExecResult{}
	})

	list, err := d.ListSessions(ctx, ops)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "ses_b" || list[0].Title != "two" || list[0].Updated == "" || list[1].Updated != "" {
		t.Errorf("list %+v", list)
	}
	if err := d.DeleteSession(ctx, ops, "ses_abc"); err != nil {
		t.Error(err)
	}
	var de *sandboxagent.DriverError
	if err := d.DeleteSession(ctx, ops, "ses_missing"); !errors.As(err, &de) || de.Message != "Error: Session not found: ses_missing" {
		t.Errorf("delete missing: %v", err)
	}
	if err := d.DeleteSession(ctx, ops, "-rf"); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("bad id: %v", err)
	}
	id, err := d.Fork(ctx, ops, "ses_abc")
	if err != nil || id != "ses_forked" {
		t.Errorf("fork %q %v", id, err)
	}
	dump, err := d.DumpSession(ctx, ops, "ses_abc")
	if err != nil {
		t.Fatal(err)
	}
	if dump.Driver != "opencode" || dump.SessionID != "ses_abc" || string(dump.Files["export.json"]) != exported || dump.Meta["directory"] != "/workspace" {
		t.Errorf("dump %+v", dump)
	}
	// Round trip through JSON, as a user would store it.
	b, _ := json.Marshal(dump)
	var back sandboxagent.SessionDump
	_ = json.Unmarshal(b, &back)
	id, err = d.LoadSession(ctx, ops, back)
	if err != nil || id != "ses_abc" {
		t.Fatalf("load %q %v", id, err)
	}
	var imported string
	for _, name := range ops.Writes() {
		if strings.HasPrefix(name, "/tmp/sandbox-agent-opencode-import-") {
			b, _ := os.ReadFile(filepath.Join(ops.Root, name))
			imported = string(b)
		}
	}
	if imported != exported {
		t.Errorf("import file %q", imported)
	}
	if _, err := d.LoadSession(ctx, ops, sandboxagent.SessionDump{Driver: "pi", Files: dump.Files}); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("pi dump: %v", err)
	}
	if _, err := d.LoadSession(ctx, ops, sandboxagent.SessionDump{Driver: "opencode", Files: map[string][]byte{"export.json": []byte("{}")}}); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("empty dump: %v", err)
	}
	empty, err := parseSessionList([]byte("\n"))
	if err != nil || len(empty) != 0 {
		t.Errorf("empty list %v %v", empty, err)
	}
}
