package opencode

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
)

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
	drivertest.CheckBasics(t, d, New(Options{Provider: "p"}), "opencode", "sk-1")
	want := sandboxagent.Capabilities{Continue: true, Fork: true, Skills: true, Rules: true, Sessions: true, Thinking: true, Usage: true, Abort: sandboxagent.AbortInterrupt}
	if sandboxagent.CapabilitiesOf(d) != want {
		t.Errorf("%+v", sandboxagent.CapabilitiesOf(d))
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
	if got := ops.Read(t, ".config/"+bridgeFile); got != string(bridgeJS) || len(got) < 1000 {
		t.Errorf("bridge not installed (%d bytes)", len(got))
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
	ops := newFakeOps(t, nil)
	drivertest.CheckRulesAndSkills(t, New(Options{BaseURL: "http://x"}), ops, ".config/opencode/AGENTS.md", ".config/opencode/skills")
	// opencode writes through ContainerOps: the old folder goes with one rm.
	rm := []string{"rm", "-rf", "--", ops.HomePath(".config/opencode/skills/demo")}
	if !slices.ContainsFunc(ops.Runs(), func(r sandboxagent.ExecRequest) bool { return reflect.DeepEqual(r.Cmd, rm) }) {
		t.Errorf("old skill not removed with %q: %v", rm, ops.Runs())
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
