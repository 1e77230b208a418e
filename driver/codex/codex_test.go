package codex

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
)

const testKey = "sk-unit-test-key-0123456789"

func TestDriverBasics(t *testing.T) {
	d := New(Options{APIKey: testKey})
	drivertest.CheckBasics(t, d, New(Options{}), "codex", testKey)
	c := sandboxagent.CapabilitiesOf(d)
	if !c.Continue || !c.Fork || !c.Skills || !c.Rules || !c.Sessions || !c.Thinking || !c.Usage || c.Deltas {
		t.Errorf("Capabilities %+v", c)
	}
}

func TestCommand(t *testing.T) {
	const id = "01a226c8-667d-7f42-ab84-674eb9e97950"
	flags := []string{"--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"}
	cmd := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	long := strings.Repeat("x", maxArgPrompt+1)
	cases := []struct {
		name    string
		opts    Options
		turn    sandboxagent.Turn
		cmd     []string
		stdin   string
		env     map[string]string
		wantErr error
	}{
		{
			name: "new session, default model",
			opts: Options{APIKey: testKey},
			turn: sandboxagent.Turn{Prompt: "hello", WorkDir: "/workspace"},
			cmd:  cmd([]string{"codex", "exec"}, flags, []string{"-m", DefaultModel, "--", "hello"}),
			env:  map[string]string{KeyEnv: testKey},
		},
		{
			name: "options model, codex home",
			opts: Options{APIKey: testKey, Model: "glm-5", CodexHome: "/home/agent/cx"},
			turn: sandboxagent.Turn{Prompt: "--looks like a flag"},
			cmd:  cmd([]string{"codex", "exec"}, flags, []string{"-m", "glm-5", "--", "--looks like a flag"}),
			env:  map[string]string{KeyEnv: testKey, "CODEX_HOME": "/home/agent/cx"},
		},
		{
			name: "continue",
			opts: Options{APIKey: testKey, Model: "ignored"},
			turn: sandboxagent.Turn{Prompt: "again", Model: "gpt-5.4", SessionID: id},
			cmd:  cmd([]string{"codex", "exec", "resume"}, flags, []string{"-m", "gpt-5.4", "--", id, "again"}),
			env:  map[string]string{KeyEnv: testKey},
		},
		{
			name:  "long prompt on stdin",
			opts:  Options{APIKey: testKey},
			turn:  sandboxagent.Turn{Prompt: long, SessionID: id},
			cmd:   cmd([]string{"codex", "exec", "resume"}, flags, []string{"-m", DefaultModel, "--", id, "-"}),
			stdin: long,
			env:   map[string]string{KeyEnv: testKey},
		},
		{
			name:  "dash prompt on stdin",
			opts:  Options{APIKey: testKey},
			turn:  sandboxagent.Turn{Prompt: "-"},
			cmd:   cmd([]string{"codex", "exec"}, flags, []string{"-m", DefaultModel, "--", "-"}),
			stdin: "-",
			env:   map[string]string{KeyEnv: testKey},
		},
		{name: "empty prompt", turn: sandboxagent.Turn{Prompt: " \n"}, wantErr: sandboxagent.ErrInvalidArgument},
		{name: "session id not a uuid", turn: sandboxagent.Turn{Prompt: "x", SessionID: "my-thread"}, wantErr: sandboxagent.ErrInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inv, err := New(tc.opts).Command(tc.turn)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(inv.Cmd, tc.cmd) {
				t.Errorf("Cmd\n got %q\nwant %q", trim(inv.Cmd), trim(tc.cmd))
			}
			if !reflect.DeepEqual(inv.Env, tc.env) {
				t.Errorf("Env %v, want %v", inv.Env, tc.env)
			}
			if string(inv.Stdin) != tc.stdin || (tc.stdin == "" && inv.Stdin != nil) {
				t.Errorf("Stdin %d bytes, want %d (nil when empty)", len(inv.Stdin), len(tc.stdin))
			}
			if inv.WorkDir != tc.turn.WorkDir {
				t.Errorf("WorkDir %q", inv.WorkDir)
			}
			if strings.Contains(strings.Join(inv.Cmd, " "), testKey) {
				t.Error("the key is on the command line")
			}
		})
	}
}

func trim(s []string) []string {
	out := make([]string, len(s))
	for i, a := range s {
		if len(a) > 40 {
			a = a[:40] + "..."
		}
		out[i] = a
	}
	return out
}

func TestConfig(t *testing.T) {
	d := New(Options{BaseURL: "http://127.0.0.1:9/v1/", APIKey: testKey, Retries: -1, ExtraConfig: `model_reasoning_effort = "low"`})
	cfg := d.Config()
	for _, want := range []string{
		`model = "gpt-5.5"`,
		`model_provider = "sandbox-agent"`,
		`approval_policy = "never"`,
		`sandbox_mode = "danger-full-access"`,
		`check_for_update_on_startup = false`,
		"model_reasoning_effort = \"low\"\n\n[analytics]",
		"[analytics]\nenabled = false",
		"[features]\nplugins = false",
		"[shell_environment_policy]\nexclude = [\"SANDBOX_AGENT_CODEX_API_KEY\"]",
		"[model_providers.sandbox-agent]",
		`base_url = "http://127.0.0.1:9/v1"`,
		`env_key = "SANDBOX_AGENT_CODEX_API_KEY"`,
		`wire_api = "responses"`,
		"request_max_retries = 0\nstream_max_retries = 0",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config.toml lacks %q:\n%s", want, cfg)
		}
	}
	if strings.Contains(cfg, testKey) {
		t.Error("config.toml holds the key")
	}
	cfg = New(Options{}).Config()
	for _, want := range []string{`base_url = "https://api.openai.com/v1"`, "request_max_retries = 2\nstream_max_retries = 2"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("default config.toml lacks %q", want)
		}
	}
	if got := tomlString("a\"b\\c\nd\x01"); got != `"a\"b\\c\nd\u0001"` {
		t.Errorf("tomlString %s", got)
	}
}

// stubCodex imitates the codex subcommands the session members use.
const stubCodex = `#!/bin/sh
H="${CODEX_HOME:-$HOME/.codex}"
case "$1 $2" in
"exec fork")
  for a; do id="$a"; done
  src=$(find "$H/sessions" -name "rollout-*-$id.jsonl" | head -n 1)
  [ -n "$src" ] || { echo "Error: thread/fork failed: no rollout found for thread id $id" >&2; exit 1; }
  new=01a226ff-0000-7000-8000-00000000f0a1
  mkdir -p "$H/sessions/2026/01/02"
  printf '{"type":"session_meta","payload":{"id":"%s","forked_from_id":"%s","history_base":{"thread_id":"%s"}}}\n' "$new" "$id" "$id" > "$H/sessions/2026/01/02/rollout-2026-01-02T00-00-00-$new.jsonl"
  printf '{"type":"thread.started","thread_id":"%s"}\n' "$new" ;;
"delete --force")
  id=$3
  if grep -rlF "\"forked_from_id\":\"$id\"" "$H/sessions" >/dev/null 2>&1 || [ -e "$H/unindexed-$id" ]; then
    echo "Error: failed to delete session" >&2; exit 1
  fi
  find "$H/sessions" -name "rollout-*-$id.jsonl" -delete; echo "Deleted session $id." ;;
*) echo "stub codex: unexpected $*" >&2; exit 2 ;;
esac
`

// newFakeOps is a fake sandbox with the stub codex on PATH (withCodex).
// At the end of the test it checks that the driver read only inside HOME
// and wrote nothing with WriteFile: the driver writes with Run so files
// belong to the CLI's user.
func newFakeOps(t *testing.T, withCodex bool) *drivertest.HostOps {
	t.Helper()
	for _, tool := range []string{"sh", "find", "grep", "head", "wc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("host lacks %s", tool)
		}
	}
	f := drivertest.NewHostOps(t)
	if withCodex {
		f.Install(t, "codex", stubCodex)
	}
	t.Cleanup(func() {
		for _, name := range f.Reads() {
			if !strings.HasPrefix(name, f.Home) {
				t.Errorf("ReadFile outside the fake home: %s", name)
			}
		}
		for _, name := range f.Writes() {
			t.Errorf("WriteFile(%s) called; the driver writes with Run so files belong to the CLI's user", name)
		}
	})
	return f
}

func TestSetup(t *testing.T) {
	ctx := context.Background()
	f := newFakeOps(t, true)
	d := New(Options{BaseURL: "http://127.0.0.1:1/v1", APIKey: testKey})
	if err := d.Setup(ctx, f); err != nil {
		t.Fatal(err)
	}
	if got := f.Read(t, ".codex/config.toml"); got != d.Config() {
		t.Errorf("config.toml:\n%s", got)
	}
	for _, r := range f.Runs() {
		if _, ok := r.Env[KeyEnv]; ok || strings.Contains(strings.Join(r.Cmd, " "), testKey) {
			t.Errorf("Setup passed the key: %+v", r)
		}
	}
	// Again (idempotent), with CODEX_HOME.
	d = New(Options{APIKey: testKey, CodexHome: filepath.Join(f.Home, "cx")})
	if err := d.Setup(ctx, f); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.Home, "cx", "config.toml")); err != nil {
		t.Error(err)
	}

	if err := New(Options{}).Setup(ctx, newFakeOps(t, false)); !errors.Is(err, sandboxagent.ErrCLIMissing) {
		t.Errorf("Setup without codex: %v", err)
	}
}

func TestRulesAndSkills(t *testing.T) {
	f := newFakeOps(t, true)
	d := New(Options{})
	drivertest.CheckRulesAndSkills(t, d, f, ".codex/AGENTS.md", ".codex/skills")
	// Scripts stay executable.
	s := sandboxagent.Skill{Name: "deploy", Files: map[string][]byte{
		"SKILL.md":      []byte("---\nname: deploy\ndescription: ships it\n---\nbody\n"),
		"scripts/go.sh": []byte("#!/bin/sh\necho go\n"),
	}}
	if err := d.InstallSkill(context.Background(), f, s); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(f.HomePath(".codex/skills/deploy/scripts/go.sh"))
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("script: %v %v", st, err)
	}
}

func TestSessionMembers(t *testing.T) {
	ctx := context.Background()
	f := newFakeOps(t, true)
	d := New(Options{APIKey: testKey})
	const parent = "01a22689-2083-7030-b84e-8a1641694d77" // testdata/codex-session-rollout.jsonl
	const fork = "01a226ff-0000-7000-8000-00000000f0a1"   // what the stub forks to
	rolloutData, err := os.ReadFile("testdata/codex-session-rollout.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	rel := "sessions/2026/11/29/rollout-2026-11-29T09-00-50-" + parent + ".jsonl"

	if list, err := d.ListSessions(ctx, f); err != nil || len(list) != 0 {
		t.Fatalf("empty ListSessions = %v, %v", list, err)
	}
	// Load a dump taken elsewhere.
	id, err := d.LoadSession(ctx, f, sandboxagent.SessionDump{Driver: "codex", SessionID: parent, Files: map[string][]byte{rel: rolloutData}})
	if err != nil || id != parent {
		t.Fatalf("LoadSession = %q, %v", id, err)
	}
	if got := f.Read(t, ".codex/"+rel); got != string(rolloutData) {
		t.Error("loaded rollout differs")
	}
	list, err := d.ListSessions(ctx, f)
	if err != nil || len(list) != 1 || list[0].ID != parent || !strings.HasSuffix(list[0].Path, rel) || list[0].Updated == "" {
		t.Fatalf("ListSessions = %+v, %v", list, err)
	}

	// Fork, then dump the fork: its parent comes along.
	got, err := d.Fork(ctx, f, parent)
	if err != nil || got != fork {
		t.Fatalf("Fork = %q, %v", got, err)
	}
	if r := f.LastRun(); r.Env[KeyEnv] != testKey || r.Cmd[0] != "codex" || r.Cmd[2] != "fork" {
		t.Errorf("fork run %+v", r)
	}
	dump, err := d.DumpSession(ctx, f, fork)
	if err != nil {
		t.Fatal(err)
	}
	if dump.Driver != "codex" || dump.SessionID != fork || len(dump.Files) != 2 || string(dump.Files[rel]) != string(rolloutData) || dump.Meta["forked_from"] != parent {
		t.Errorf("dump %+v meta %v", dump.SessionID, dump.Meta)
	}
	pd, err := d.DumpSession(ctx, f, parent)
	if err != nil || len(pd.Files) != 1 || pd.Meta["cwd"] != "/workspace" || pd.Meta["cli_version"] != "0.171.0" {
		t.Errorf("parent dump %v %v", pd.Meta, err)
	}

	// The parent cannot go while the fork needs it.
	if err := d.DeleteSession(ctx, f, parent); err == nil || !strings.Contains(err.Error(), "forks depend") {
		t.Errorf("delete parent with fork: %v", err)
	}
	if err := d.DeleteSession(ctx, f, fork); err != nil {
		t.Fatal(err)
	}
	// codex's index does not know a loaded session: the file is removed.
	if err := os.WriteFile(filepath.Join(f.Home, ".codex", "unindexed-"+parent), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteSession(ctx, f, parent); err != nil {
		t.Fatal(err)
	}
	if list, err := d.ListSessions(ctx, f); err != nil || len(list) != 0 {
		t.Errorf("after delete: %+v, %v", list, err)
	}
	if err := d.DeleteSession(ctx, f, parent); !errors.Is(err, ErrSessionNotFound) {
		t.Errorf("delete again: %v", err)
	}
	if _, err := d.DumpSession(ctx, f, parent); !errors.Is(err, ErrSessionNotFound) {
		t.Errorf("dump deleted: %v", err)
	}
	if _, err := d.Fork(ctx, f, parent); err == nil {
		t.Error("fork of a deleted session succeeded")
	}

	// Bad input.
	for _, bad := range []sandboxagent.SessionDump{
		{Driver: "claude", SessionID: parent, Files: map[string][]byte{rel: nil}},
		{SessionID: "x", Files: map[string][]byte{rel: nil}},
		{SessionID: parent, Files: map[string][]byte{"../../.bashrc": nil, rel: nil}},
		{SessionID: parent, Files: map[string][]byte{"sessions/a/rollout-1-" + fork + ".jsonl": nil}},
		{SessionID: parent, Files: map[string][]byte{"config.toml": nil}},
	} {
		if _, err := d.LoadSession(ctx, f, bad); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("LoadSession(%v): %v", bad.Files, err)
		}
	}
	for _, badID := range []string{"", "x; rm -rf /", "../" + parent} {
		if err := d.DeleteSession(ctx, f, badID); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("DeleteSession(%q): %v", badID, err)
		}
		if _, err := d.Fork(ctx, f, badID); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("Fork(%q): %v", badID, err)
		}
	}
}
