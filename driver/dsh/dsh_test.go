package dsh

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
)

func TestCapabilities(t *testing.T) {
	d := New(Options{})
	drivertest.CheckBasics(t, New(Options{APIKey: "k-123"}), d, "dsh", "k-123")
	c := sandboxagent.CapabilitiesOf(d)
	if !c.Continue || !c.Fork || !c.Skills || !c.Rules || !c.Sessions || !c.Thinking || !c.Usage || !c.Deltas {
		t.Errorf("%+v", c)
	}
}

func TestCommand(t *testing.T) {
	const sid = "session-0b3c4d5e-6f70-4182-9a3b-4c5d6e7f8091"
	cases := []struct {
		name    string
		o       Options
		turn    sandboxagent.Turn
		env     map[string]string // must be set to these values
		absent  []string
		wantErr bool
	}{
		{
			name: "generic route, new session",
			o:    Options{BaseURL: "http://127.0.0.1:9/v1", APIKey: "sk-1"},
			turn: sandboxagent.Turn{Prompt: "hello", WorkDir: "/workspace"},
			env: map[string]string{
				envKey: "sk-1", envProvider: Provider, "DSH_PERMISSION_MODE": "danger-full-access",
				"DSH_TELEMETRY_DISABLED": "1",
			},
			absent: []string{envResume, envModel, envDeepSeekKey, envDeepSeekBase, "DSH_HOME"},
		},
		{
			name: "model and continue",
			o:    Options{BaseURL: "http://127.0.0.1:9/v1", APIKey: "sk-1"},
			turn: sandboxagent.Turn{Prompt: "again", Model: "glm-9", SessionID: sid},
			env:  map[string]string{envModel: "glm-9", envSession: sid, envResume: "1"},
		},
		{
			name:   "deepseek adapter",
			o:      Options{DeepSeek: true, BaseURL: "https://gw.example/v1", APIKey: "sk-2"},
			turn:   sandboxagent.Turn{Prompt: "hello"},
			env:    map[string]string{envDeepSeekKey: "sk-2", envDeepSeekBase: "https://gw.example/v1", envProvider: DeepSeekProvider},
			absent: []string{envKey},
		},
		{
			name:   "deepseek real endpoint",
			o:      Options{APIKey: "sk-3"},
			turn:   sandboxagent.Turn{Prompt: "hello"},
			env:    map[string]string{envDeepSeekKey: "sk-3", envProvider: DeepSeekProvider},
			absent: []string{envKey, envDeepSeekBase},
		},
		{name: "empty prompt", turn: sandboxagent.Turn{Prompt: " \n"}, wantErr: true},
		{name: "bad session id", turn: sandboxagent.Turn{Prompt: "x", SessionID: "../x"}, wantErr: true},
		{name: "session id without prefix", turn: sandboxagent.Turn{Prompt: "x", SessionID: "0b3c4d5e-6f70-4182-9a3b-4c5d6e7f8091"}, wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inv, err := New(c.o).Command(c.turn)
			if c.wantErr {
				if !errors.Is(err, sandboxagent.ErrInvalidArgument) {
					t.Fatalf("err %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(inv.Cmd, " ") != `sh -c exec node "${DSH_HOME:-$HOME/.dsh}/sandbox-agent/run.mjs"` {
				t.Errorf("cmd %q", inv.Cmd)
			}
			drivertest.CheckInvocation(t, inv, c.turn, c.env, c.absent, false, c.o.APIKey)
			if c.turn.SessionID == "" && !validID(inv.Env[envSession]) {
				t.Errorf("new session id %q", inv.Env[envSession])
			}
		})
	}
	// Every new turn gets its own session.
	a, _ := New(Options{}).Command(sandboxagent.Turn{Prompt: "x"})
	b, _ := New(Options{}).Command(sandboxagent.Turn{Prompt: "x"})
	if a.Env[envSession] == b.Env[envSession] {
		t.Error("two new turns share a session id")
	}
}

func TestSetup(t *testing.T) {
	h := drivertest.NewHostOps(t)
	d := New(Options{BaseURL: "http://127.0.0.1:18080/v1", APIKey: "sk-secret-0123", Model: "mock-model"})
	if err := d.Setup(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	var settings map[string]any
	if err := json.Unmarshal([]byte(h.Read(t, ".dsh/settings.yaml")), &settings); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"llm-pi-ai": map[string]any{"providers": map[string]any{"sandbox-agent": map[string]any{
			"displayName": "sandbox-agent",
			"apiKeyEnv":   "SANDBOX_AGENT_DSH_API_KEY",
			"api":         "openai-completions",
			"baseURL":     "http://127.0.0.1:18080/v1",
			"compat":      map[string]any{"supportsDeveloperRole": false, "maxTokensField": "max_tokens"},
			"models":      []any{map[string]any{"id": "mock-model", "name": "mock-model", "contextWindow": 128000.0, "maxTokens": 8192.0}},
		}}},
		"agent-default-model": map[string]any{"provider": "sandbox-agent", "model": "mock-model"},
	}
	if !reflect.DeepEqual(settings, want) {
		t.Errorf("settings.yaml = %v\nwant %v", settings, want)
	}
	patch := h.Read(t, ".dsh/cordis.patch.yml")
	for _, want := range []string{"compression: none", "packChunks: false", "writeBatchMaxDelayMs: 20", "root: !!js dshHomePath('sessions')"} {
		if !strings.Contains(patch, want) {
			t.Errorf("cordis.patch.yml lacks %q", want)
		}
	}
	hp := h.Read(t, ".dsh/sandbox-agent/headless.patch.yml")
	if !strings.Contains(hp, `name: "file://`+h.Home+`/.dsh/sandbox-agent/runner.mjs"`) || !strings.Contains(hp, "- id: headless-runner\n  disabled: true\n") {
		t.Errorf("headless.patch.yml:\n%s", hp)
	}
	if h.Read(t, ".dsh/sandbox-agent/runner.mjs") != string(runnerJS) || h.Read(t, ".dsh/sandbox-agent/run.mjs") != string(wrapperJS) {
		t.Error("helper scripts differ")
	}
	for _, f := range []string{"settings.yaml", "cordis.patch.yml", "sandbox-agent/run.mjs"} {
		st, err := os.Stat(filepath.Join(h.Home, ".dsh", f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", f, st.Mode(), err)
		}
		if strings.Contains(h.Read(t, ".dsh/"+f), "sk-secret-0123") {
			t.Errorf("%s holds the key", f)
		}
	}
	if st, err := os.Stat(filepath.Join(h.Home, ".dsh")); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("~/.dsh: %v %v", st.Mode(), err)
	}
	for _, c := range h.Runs() {
		if strings.Contains(strings.Join(c.Cmd, " "), "sk-secret-0123") {
			t.Errorf("key in a command: %q", c.Cmd)
		}
	}

	// The DeepSeek adapter: only the base URL and the default model.
	h = drivertest.NewHostOps(t)
	if err := New(Options{DeepSeek: true, BaseURL: "https://gw.example/v1"}).Setup(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	ds := h.Read(t, ".dsh/settings.yaml")
	if strings.Contains(ds, "llm-pi-ai") || !strings.Contains(ds, `"llm-deepseek": {
    "baseURL": "https://gw.example/v1"
  }`) || !strings.Contains(ds, `"provider": "deepseek-official"`) || !strings.Contains(ds, `"model": "deepseek-v4-flash"`) {
		t.Errorf("settings.yaml:\n%s", ds)
	}
	// A base URL that is not one.
	if err := New(Options{BaseURL: "127.0.0.1:80"}).Setup(context.Background(), drivertest.NewHostOps(t)); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("bad URL: %v", err)
	}
}

func TestRulesAndSkills(t *testing.T) {
	drivertest.CheckRulesAndSkills(t, New(Options{}), drivertest.NewHostOps(t), ".dsh/AGENTS.md", ".dsh/skills")
}

// sessionLog is a small session log as dsh writes it.
func sessionLog(id, cwd, title string) string {
	return `{"type":"session","version":0,"id":"` + id + `","createdAt":1795944129628,"cwd":"` + cwd + `","delegationDepth":0}
{"type":"turn/start","seq":0,"time":1795944129633,"data":{"turn":1}}
{"type":"session/title","seq":1,"time":1795944129687,"data":{"title":"` + title + `","messageSeqs":[7],"source":{"kind":"fallback"}}}
{"type":"user/message","seq":2,"time":1795944129685,"data":{"content":[{"type":"text","text":"mention ` + id + `"}],"source":{"kind":"user"},"role":"user","id":"u1"}}
`
}

func TestSessions(t *testing.T) {
	const id = "session-0b3c4d5e-6f70-4182-9a3b-4c5d6e7f8091"
	ctx := context.Background()
	d := New(Options{})
	h := drivertest.NewHostOps(t)
	dir := filepath.Join(h.Home, ".dsh/sessions/--workspace--", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	orig := sessionLog(id, "/workspace", "Make a file")
	if err := os.WriteFile(filepath.Join(dir, "session.jsonl"), []byte(orig), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "artifact.txt"), []byte("art"), 0o600); err != nil {
		t.Fatal(err)
	}

	list, err := d.ListSessions(ctx, h)
	if err != nil || len(list) != 1 || list[0].ID != id || list[0].Title != "Make a file" || list[0].Updated == "" ||
		list[0].Path != filepath.Join(dir, "session.jsonl") {
		t.Fatalf("list %+v %v", list, err)
	}

	// Fork: a new folder, new header id, everything else byte for byte.
	fid, err := d.Fork(ctx, h, id)
	if err != nil || !validID(fid) || fid == id {
		t.Fatalf("fork %q %v", fid, err)
	}
	forked := h.Read(t, ".dsh/sessions/--workspace--/"+fid+"/session.jsonl")
	if want := strings.Replace(orig, `"id":"`+id+`"`, `"id":"`+fid+`"`, 1); forked != want {
		t.Errorf("fork log:\n%s\nwant\n%s", forked, want)
	}
	if h.Read(t, ".dsh/sessions/--workspace--/"+fid+"/artifact.txt") != "art" {
		t.Error("fork lost a file")
	}
	if h.Read(t, ".dsh/sessions/--workspace--/"+id+"/session.jsonl") != orig {
		t.Error("fork changed the original")
	}
	drivertest.CheckSessionGone(t, d, h, "session-00000000-0000-4000-8000-000000000000")

	// Dump, delete, load elsewhere.
	dump, err := d.DumpSession(ctx, h, id)
	if err != nil {
		t.Fatal(err)
	}
	if dump.Driver != "dsh" || dump.SessionID != id || string(dump.Files["session.jsonl"]) != orig ||
		string(dump.Files["files/artifact.txt"]) != "art" || dump.Meta["cwd"] != "/workspace" || dump.Meta["project"] != "--workspace--" {
		t.Errorf("dump %+v", dump)
	}
	if err := d.DeleteSession(ctx, h, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("delete left %v", err)
	}
	drivertest.CheckSessionGone(t, d, h, id)
	if list, _ := d.ListSessions(ctx, h); len(list) != 1 || list[0].ID != fid {
		t.Errorf("list after delete %+v", list)
	}

	h2 := drivertest.NewHostOps(t)
	got, err := d.LoadSession(ctx, h2, dump)
	if err != nil || got != id {
		t.Fatalf("load %q %v", got, err)
	}
	if h2.Read(t, ".dsh/sessions/--workspace--/"+id+"/session.jsonl") != orig || h2.Read(t, ".dsh/sessions/--workspace--/"+id+"/artifact.txt") != "art" {
		t.Error("loaded files differ")
	}
	st, err := os.Stat(filepath.Join(h2.Home, ".dsh/sessions/--workspace--", id))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("session dir mode %v %v", st.Mode(), err)
	}
	if _, err := d.LoadSession(ctx, h2, dump); !errors.Is(err, sandboxagent.ErrDestinationExists) {
		t.Errorf("second load: %v", err)
	}
	for name, bad := range map[string]sandboxagent.SessionDump{
		"other driver": {Driver: "pi", SessionID: id, Files: dump.Files},
		"bad id":       {SessionID: "../../x", Files: dump.Files},
		"no log":       {SessionID: id},
		"id mismatch":  {SessionID: fid, Files: dump.Files},
		"escape":       {SessionID: id, Files: map[string][]byte{"session.jsonl": dump.Files["session.jsonl"], "files/../../x": nil}},
	} {
		if _, err := d.LoadSession(ctx, drivertest.NewHostOps(t), bad); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, f := range []func() error{
		func() error { _, err := d.Fork(ctx, h, "x; rm -rf /"); return err },
		func() error { return d.DeleteSession(ctx, h, "../..") },
		func() error { _, err := d.DumpSession(ctx, h, ""); return err },
	} {
		if err := f(); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("bad id: %v", err)
		}
	}
}

func TestProjectKey(t *testing.T) {
	for in, want := range map[string]string{
		"/workspace":       "--workspace--",
		"/repo/sub":        "--repo-sub--",
		"/":                "--root--",
		"/a//b/":           "--a-b---",
		"/tmp/with space~": "--tmp-with~0020space~007E--",
		"/x/é":             "--x-~00E9--",
		"C:\\Users\\a":     "--C-Users-a--",
	} {
		if got := projectKey(in); got != want {
			t.Errorf("projectKey(%q) = %q, want %q", in, got, want)
		}
	}
}
