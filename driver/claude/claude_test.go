package claude

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
)

func TestCommand(t *testing.T) {
	const key = "sk-unit-test-key"
	base := []string{"claude", "-p", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"}
	id := "2750e6ed-d28c-42fa-818e-4ce8c0fc7b97"
	cases := []struct {
		name    string
		o       Options
		turn    sandboxagent.Turn
		cmd     []string
		env     map[string]string // must be present
		noEnv   []string          // must be absent
		wantErr bool
	}{
		{
			name: "first turn, default model",
			o:    Options{BaseURL: "http://127.0.0.1:9", APIKey: key},
			turn: sandboxagent.Turn{Prompt: "-starts with a dash\nand spans lines", WorkDir: "/w"},
			cmd:  append(slices.Clone(base), "--model", "sonnet"),
			env: map[string]string{
				"ANTHROPIC_API_KEY": key, "ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "CLAUDE_CODE_MAX_RETRIES": "2",
				"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "IS_SANDBOX": "1",
			},
			noEnv: []string{"ANTHROPIC_AUTH_TOKEN"},
		},
		{
			name:  "continue, model, bearer, retries, max turns",
			o:     Options{APIKey: key, BearerAuth: true, MaxRetries: 7, MaxTurns: 4},
			turn:  sandboxagent.Turn{Prompt: "again", Model: "claude-opus-5-5", SessionID: id},
			cmd:   append(slices.Clone(base), "--model", "claude-opus-5-5", "--resume", id, "--max-turns", "4"),
			env:   map[string]string{"ANTHROPIC_AUTH_TOKEN": key, "CLAUDE_CODE_MAX_RETRIES": "7"},
			noEnv: []string{"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"},
		},
		{
			name:  "no retries",
			o:     Options{MaxRetries: -1},
			turn:  sandboxagent.Turn{Prompt: "p"},
			cmd:   append(slices.Clone(base), "--model", "sonnet"),
			env:   map[string]string{"CLAUDE_CODE_MAX_RETRIES": "0"},
			noEnv: []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"},
		},
		{name: "empty prompt", turn: sandboxagent.Turn{Prompt: " \n"}, wantErr: true},
		{name: "bad session id", turn: sandboxagent.Turn{Prompt: "p", SessionID: "../../etc"}, wantErr: true},
		{name: "model like a flag", turn: sandboxagent.Turn{Prompt: "p", Model: "--help"}, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inv, err := New(tc.o).Command(tc.turn)
			if tc.wantErr {
				if !errors.Is(err, sandboxagent.ErrInvalidArgument) {
					t.Fatalf("err %v, want ErrInvalidArgument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(inv.Cmd, tc.cmd) {
				t.Errorf("cmd\n got %q\nwant %q", inv.Cmd, tc.cmd)
			}
			drivertest.CheckInvocation(t, inv, tc.turn, tc.env, tc.noEnv, false, tc.o.APIKey)

			// The long-lived command: the same with --input-format
			// stream-json, and no stdin of its own.
			srv, err := New(tc.o).ServeCommand(tc.turn)
			if err != nil {
				t.Fatal(err)
			}
			want := append([]string{"claude", "-p", "--input-format", "stream-json"}, tc.cmd[2:]...)
			if !slices.Equal(srv.Cmd, want) {
				t.Errorf("serve cmd\n got %q\nwant %q", srv.Cmd, want)
			}
			if srv.Stdin != nil || srv.WorkDir != inv.WorkDir || !maps.Equal(srv.Env, inv.Env) {
				t.Errorf("serve invocation %+v, turn's %+v", srv, inv)
			}
		})
	}
	// A serving process needs no prompt, but the same valid session and
	// model.
	d := New(Options{})
	if _, err := d.ServeCommand(sandboxagent.Turn{}); err != nil {
		t.Errorf("serve without a prompt: %v", err)
	}
	for _, turn := range []sandboxagent.Turn{{SessionID: "../../etc"}, {Model: "--help"}} {
		if _, err := d.ServeCommand(turn); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("serve %+v: %v, want ErrInvalidArgument", turn, err)
		}
	}
}

func TestTurnInput(t *testing.T) {
	d := New(Options{})
	for _, tc := range []struct {
		turn sandboxagent.Turn
		want string
	}{
		{
			sandboxagent.Turn{Prompt: "hello"},
			`{"type":"user","message":{"role":"user","content":"hello"},"parent_tool_use_id":null,"session_id":""}` + "\n",
		},
		{
			// Newlines, CR and U+2028 escaped: one line, whatever the prompt.
			sandboxagent.Turn{Prompt: "-a \"q\"\r\nb\u2028c <&>", SessionID: sessA},
			`{"type":"user","message":{"role":"user","content":"-a \"q\"\r\nb\u2028c \u003c\u0026\u003e"},"parent_tool_use_id":null,"session_id":"` + sessA + `"}` + "\n",
		},
	} {
		got, err := d.TurnInput(tc.turn)
		if err != nil || string(got) != tc.want {
			t.Errorf("TurnInput(%q)\n got %s (%v)\nwant %s", tc.turn.Prompt, got, err, tc.want)
			continue
		}
		var m struct {
			Message struct{ Content string } `json:"message"`
		}
		if strings.Count(string(got), "\n") != 1 || json.Unmarshal(got, &m) != nil || m.Message.Content != tc.turn.Prompt {
			t.Errorf("TurnInput(%q) does not round-trip: %s", tc.turn.Prompt, got)
		}
	}
	for _, turn := range []sandboxagent.Turn{{Prompt: " \n"}, {Prompt: "p", SessionID: "x\ny"}} {
		if _, err := d.TurnInput(turn); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("TurnInput(%+v): %v, want ErrInvalidArgument", turn, err)
		}
	}
}

func TestAbortInput(t *testing.T) {
	got := string(New(Options{}).AbortInput())
	if want := `{"type":"control_request","request_id":"sandbox-agent-interrupt","request":{"subtype":"interrupt"}}` + "\n"; got != want {
		t.Errorf("AbortInput %s, want %s", got, want)
	}
}

func TestDriverBasics(t *testing.T) {
	d := New(Options{APIKey: "sk-x-1234"})
	drivertest.CheckBasics(t, d, New(Options{}), "claude", "sk-x-1234")
	c := sandboxagent.CapabilitiesOf(d)
	if !c.Continue || !c.Fork || !c.Skills || !c.Rules || !c.Sessions || !c.Thinking || !c.Usage || c.Deltas || c.Abort != sandboxagent.AbortInterrupt {
		t.Errorf("capabilities %+v", c)
	}
}

func TestSetup(t *testing.T) {
	o := drivertest.NewHostOps(t)
	const key = "sk-never-in-a-file-123"
	d := New(Options{BaseURL: "http://127.0.0.1:1234", APIKey: key, Env: map[string]string{"ANTHROPIC_DEFAULT_HAIKU_MODEL": "small"}})
	if err := d.Setup(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	raw := o.Read(t, ".claude/settings.json")
	if strings.Contains(raw, key) {
		t.Error("settings.json holds the key")
	}
	var s struct {
		Env         map[string]string `json:"env"`
		Permissions struct {
			DefaultMode string `json:"defaultMode"`
		} `json:"permissions"`
	}
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		t.Fatal(err)
	}
	if s.Env["ANTHROPIC_BASE_URL"] != "http://127.0.0.1:1234" || s.Env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] != "1" ||
		s.Env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] != "small" || s.Permissions.DefaultMode != "bypassPermissions" {
		t.Errorf("settings %s", raw)
	}
	fi, err := os.Stat(filepath.Join(o.Home, ".claude/settings.json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("settings mode %v %v", fi.Mode(), err)
	}
	// A key smuggled through Env is refused.
	bad := New(Options{Env: map[string]string{"ANTHROPIC_API_KEY": "x"}})
	if err := bad.Setup(context.Background(), o); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("key in Env: %v", err)
	}
}

func TestRulesAndSkills(t *testing.T) {
	drivertest.CheckRulesAndSkills(t, New(Options{}), drivertest.NewHostOps(t), ".claude/CLAUDE.md", ".claude/skills")
}

const (
	sessA = "2750e6ed-d28c-42fa-818e-4ce8c0fc7b97"
	sessB = "11111111-2222-4333-8444-555555555555"
)

// transcript writes a small transcript of id in project.
func transcript(t *testing.T, o *drivertest.HostOps, project, id, prompt string) string {
	t.Helper()
	p := filepath.Join(o.Home, ".claude/projects", project, id+".jsonl")
	lines := `{"type":"user","sessionId":"` + id + `","message":{"role":"user","content":"` + prompt + `"}}` + "\n" +
		`{"type":"last-prompt","lastPrompt":"` + prompt + `","sessionId":"` + id + `"}` + "\n"
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSessionTitle: the title is the later of the last last-prompt record
// and the last queued prompt (a long-lived CLI writes last-prompt lazily:
// after its second turn the record may still name the first prompt).
func TestSessionTitle(t *testing.T) {
	o := drivertest.NewHostOps(t)
	p := filepath.Join(o.Home, ".claude/projects/-workspace", sessA+".jsonl")
	enqueue := func(prompt string) string {
		return `{"type":"queue-operation","operation":"enqueue","timestamp":"2026-12-01T14:39:10.598Z","sessionId":"` + sessA + `","content":"` + prompt + `"}` + "\n" +
			`{"type":"queue-operation","operation":"dequeue","timestamp":"2026-12-01T14:39:10.599Z","sessionId":"` + sessA + `"}` + "\n"
	}
	user := func(prompt string) string {
		return `{"type":"user","message":{"role":"user","content":"` + prompt + `"},"sessionId":"` + sessA + `"}` + "\n"
	}
	lastPrompt := func(prompt string) string {
		return `{"type":"last-prompt","lastPrompt":"` + prompt + `","sessionId":"` + sessA + `"}` + "\n"
	}
	for _, tc := range []struct{ name, transcript, want string }{
		{"per turn", enqueue("first  prompt") + user("first  prompt") + lastPrompt("first prompt") + enqueue("second\\nprompt") + user("second\\nprompt") + lastPrompt("second prompt"), "second prompt"},
		{"long-lived, second turn", enqueue("first") + user("first") + lastPrompt("first") + enqueue("second") + user("second"), "second"},
		{"prompt text quoting records", enqueue("first") + lastPrompt("first") + user(`say \"type\":\"last-prompt\",\"lastPrompt\":\"bad\" \"operation\":\"enqueue\"`), "first"},
		{"no record", user("x"), ""},
		{"prompt of blocks", `{"type":"queue-operation","operation":"enqueue","sessionId":"` + sessA + `","content":[{"type":"text","text":"x"}]}` + "\n", ""},
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(tc.transcript), 0o600); err != nil {
			t.Fatal(err)
		}
		list, err := New(Options{}).ListSessions(context.Background(), o)
		if err != nil || len(list) != 1 || list[0].Title != tc.want {
			t.Errorf("%s: %+v %v, want the title %q", tc.name, list, err, tc.want)
		}
	}
}

func TestSessions(t *testing.T) {
	ctx := context.Background()
	o := drivertest.NewHostOps(t)
	d := New(Options{})

	if list, err := d.ListSessions(ctx, o); err != nil || len(list) != 0 {
		t.Fatalf("empty list: %v %v", list, err)
	}
	pa := transcript(t, o, "-workspace", sessA, "first prompt")
	transcript(t, o, "-other", sessB, "second prompt")
	if err := os.MkdirAll(filepath.Join(o.Home, ".claude/projects/-workspace/memory"), 0o755); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(o.Home, ".claude/projects/-workspace", sessA, "subagents")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "agent-1.jsonl"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	list, err := d.ListSessions(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("list %+v", list)
	}
	byID := map[string]sandboxagent.SessionInfo{}
	for _, s := range list {
		byID[s.ID] = s
	}
	if a := byID[sessA]; a.Title != "first prompt" || a.Path != pa || a.Updated == "" {
		t.Errorf("session A %+v", a)
	}

	// Fork: a new id, the history copied with the id replaced, the
	// original untouched.
	before := o.Read(t, ".claude/projects/-workspace/"+sessA+".jsonl")
	fid, err := d.Fork(ctx, o, sessA)
	if err != nil {
		t.Fatal(err)
	}
	if !validID(fid) || fid == sessA {
		t.Fatalf("fork id %q", fid)
	}
	forked := o.Read(t, ".claude/projects/-workspace/"+fid+".jsonl")
	if strings.Contains(forked, sessA) || !strings.Contains(forked, fid) || !strings.Contains(forked, "first prompt") {
		t.Errorf("fork transcript %s", forked)
	}
	if o.Read(t, ".claude/projects/-workspace/"+fid+"/subagents/agent-1.jsonl") != "{}\n" {
		t.Error("fork lost the session folder")
	}
	if o.Read(t, ".claude/projects/-workspace/"+sessA+".jsonl") != before {
		t.Error("fork changed the original")
	}
	drivertest.CheckSessionGone(t, d, o, "99999999-2222-4333-8444-555555555555")

	// Dump, then load into another "sandbox".
	dump, err := d.DumpSession(ctx, o, sessA)
	if err != nil {
		t.Fatal(err)
	}
	if dump.Driver != "claude" || dump.SessionID != sessA || string(dump.Files["transcript.jsonl"]) != before ||
		string(dump.Files["files/subagents/agent-1.jsonl"]) != "{}\n" || dump.Meta["project"] != "-workspace" {
		t.Errorf("dump %+v", dump)
	}
	// The dump survives JSON (how a caller would store it).
	js, err := json.Marshal(dump)
	if err != nil {
		t.Fatal(err)
	}
	var back sandboxagent.SessionDump
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	o2 := drivertest.NewHostOps(t)
	id, err := d.LoadSession(ctx, o2, back)
	if err != nil || id != sessA {
		t.Fatalf("load: %q %v", id, err)
	}
	if o2.Read(t, ".claude/projects/-workspace/"+sessA+".jsonl") != before ||
		o2.Read(t, ".claude/projects/-workspace/"+sessA+"/subagents/agent-1.jsonl") != "{}\n" {
		t.Error("loaded files differ")
	}
	if _, err := d.LoadSession(ctx, o2, back); !errors.Is(err, sandboxagent.ErrDestinationExists) {
		t.Errorf("second load: %v", err)
	}
	// Without a project, the working directory's slug is used.
	o3 := drivertest.NewHostOps(t)
	back.Meta = nil
	if _, err := d.LoadSession(ctx, o3, back); err != nil {
		t.Fatal(err)
	}
	if o3.Read(t, ".claude/projects/"+slug(o3.Work)+"/"+sessA+".jsonl") != before {
		t.Error("load without project")
	}
	for _, bad := range []sandboxagent.SessionDump{
		{Driver: "codex", SessionID: sessA, Files: back.Files},
		{Driver: "claude", SessionID: "x/../y", Files: back.Files},
		{Driver: "claude", SessionID: sessB},
		{Driver: "claude", SessionID: sessB, Files: map[string][]byte{"transcript.jsonl": nil, "files/../../x": nil}},
		{Driver: "claude", SessionID: sessB, Files: map[string][]byte{"transcript.jsonl": nil}, Meta: map[string]string{"project": ".."}},
	} {
		if _, err := d.LoadSession(ctx, drivertest.NewHostOps(t), bad); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("load %+v: %v", bad.SessionID, err)
		}
	}

	// Delete.
	if err := d.DeleteSession(ctx, o, sessA); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pa); !os.IsNotExist(err) {
		t.Errorf("transcript survived: %v", err)
	}
	if _, err := os.Stat(filepath.Join(o.Home, ".claude/projects/-workspace", sessA)); !os.IsNotExist(err) {
		t.Errorf("session folder survived: %v", err)
	}
	drivertest.CheckSessionGone(t, d, o, sessA)
	list, _ = d.ListSessions(ctx, o)
	if len(list) != 2 || slices.ContainsFunc(list, func(s sandboxagent.SessionInfo) bool { return s.ID == sessA }) {
		t.Errorf("list after delete %+v", list)
	}
	for _, bad := range []string{"", "../x", sessA + "x"} {
		if err := d.DeleteSession(ctx, o, bad); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("delete %q: %v", bad, err)
		}
	}
}

func TestHelpers(t *testing.T) {
	if slug("/workspace") != "-workspace" || slug("/home/u/my.proj") != "-home-u-my-proj" {
		t.Error("slug")
	}
	id, err := newID()
	if err != nil || !validID(id) || id[14] != '4' {
		t.Errorf("newID %q %v", id, err)
	}
	for _, s := range []string{"", "2750e6ed-d28c-42fa-818e-4ce8c0fc7b9", "2750e6ed_d28c-42fa-818e-4ce8c0fc7b97", "2750e6ed-d28c-42fa-818e-4ce8c0fc7b9g"} {
		if validID(s) {
			t.Errorf("validID(%q)", s)
		}
	}
	if got := parseList([]byte("1795946453.5\t/h/.claude/projects/-w/" + sessA + ".jsonl\t{\"lastPrompt\":\"x\"}\n1795946454\t/h/.claude/projects/-w/" + sessB + ".jsonl\t\nbad line\n1\t/h/notauuid.jsonl\t\n")); len(got) != 2 || got[0].ID != sessB || got[1].Title != "x" {
		t.Errorf("parseList %+v", got)
	}
}

func TestExitRecordsOnly(t *testing.T) {
	const id = "0b9a4b6e-1111-4222-8333-444455556666"
	before := []byte(`{"type":"user","sessionId":"` + id + `"}` + "\n")
	rec := func(typ, sid string) string { return `{"type":"` + typ + `","sessionId":"` + sid + `"}` + "\n" }
	for _, tc := range []struct {
		name  string
		after string
		want  bool
	}{
		{"cost-state and last-prompt", string(before) + rec("cost-state", id) + rec("last-prompt", id), true},
		{"unchanged", string(before), false}, // the caller compares equal files itself
		{"a user record", string(before) + rec("user", id), false},
		{"another session's record", string(before) + rec("cost-state", "other"), false},
		{"history rewritten", rec("user", "x") + rec("cost-state", id), false},
		{"a cut-off line", string(before) + `{"type":"cost-state","sessionId":"` + id + `"}`, false},
		{"not JSON", string(before) + "junk\n", false},
	} {
		if got := ExitRecordsOnly(before, []byte(tc.after), id); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestWarmSteps: each step is one control request line, and its Done
// recognises the CLI's answer to it (testdata/serve/warm.jsonl, real
// 2.1.332 output: initialize, then get_context_usage refused and
// answered), success or refusal, and nothing else.
func TestWarmSteps(t *testing.T) {
	steps := New(Options{}).WarmSteps(sandboxagent.Turn{})
	if len(steps) != 2 {
		t.Fatalf("%d steps", len(steps))
	}
	for i, st := range steps {
		var req struct {
			Type      string         `json:"type"`
			RequestID string         `json:"request_id"`
			Request   map[string]any `json:"request"`
		}
		if st.Turn || !strings.HasSuffix(string(st.Input), "}\n") || strings.Count(string(st.Input), "\n") != 1 ||
			json.Unmarshal(st.Input, &req) != nil || req.Type != "control_request" || req.RequestID == "" {
			t.Errorf("step %d: %q", i+1, st.Input)
		}
	}
	if !strings.Contains(string(steps[1].Input), `"detail":"summary"`) {
		// "full" asks the model's token-count API.
		t.Errorf("step 2 may reach the model: %s", steps[1].Input)
	}
	b, err := os.ReadFile(filepath.Join("testdata", "serve", "warm.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	cases := []struct {
		name string
		line string
		done []bool // per step
	}{
		{"initialize answered", lines[0], []bool{true, false}},
		{"context usage refused", lines[1], []bool{false, true}},
		{"context usage answered", lines[2], []bool{false, true}},
		{"interrupt answered", `{"type":"control_response","response":{"subtype":"success","request_id":"sandbox-agent-interrupt"}}`, []bool{false, false}},
		{"a request of the CLI's", `{"type":"control_request","request_id":"sandbox-agent-warm","request":{"subtype":"can_use_tool"}}`, []bool{false, false}},
		{"init line", `{"type":"system","subtype":"init","session_id":"x"}`, []bool{false, false}},
		{"not JSON", `sandbox-agent-warm-context`, []bool{false, false}},
	}
	for _, c := range cases {
		for i, st := range steps {
			done, err := st.Done([]byte(c.line))
			if err != nil || done != c.done[i] {
				t.Errorf("%s: step %d: done %v %v, want %v", c.name, i+1, done, err, c.done[i])
			}
		}
	}
}
