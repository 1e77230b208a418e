package opencode

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
)

func TestServeCommand(t *testing.T) {
	d := New(Options{BaseURL: "http://127.0.0.1:1/v1", APIKey: "sk-1"})
	for _, tc := range []struct {
		name    string
		turn    sandboxagent.Turn
		declare bool
	}{
		{"new session, default model", sandboxagent.Turn{WorkDir: "/workspace"}, false},
		{"a session", sandboxagent.Turn{SessionID: "ses_1"}, false},
		{"another model of the custom provider", sandboxagent.Turn{Model: "big"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv, err := d.ServeCommand(tc.turn)
			if err != nil {
				t.Fatal(err)
			}
			if len(inv.Cmd) != 3 || inv.Cmd[0] != "sh" || !strings.Contains(inv.Cmd[2], "exec node ") || !strings.Contains(inv.Cmd[2], bridgeFile) {
				t.Errorf("cmd %q", inv.Cmd)
			}
			if inv.WorkDir != tc.turn.WorkDir || len(inv.Stdin) != 0 {
				t.Errorf("workdir %q stdin %q", inv.WorkDir, inv.Stdin)
			}
			if inv.Env[KeyEnv] != "sk-1" || inv.Env["OPENCODE_DISABLE_AUTOUPDATE"] != "1" || inv.Env["SANDBOX_AGENT_OPENCODE_MAX_RSS_MB"] != "1536" {
				t.Errorf("env %v", inv.Env)
			}
			if got := strings.Contains(inv.Env["OPENCODE_CONFIG_CONTENT"], `"big"`); got != tc.declare {
				t.Errorf("declared model: %v, want %v (%v)", got, tc.declare, inv.Env)
			}
		})
	}
	if _, err := d.ServeCommand(sandboxagent.Turn{SessionID: "--help"}); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("bad session: %v", err)
	}
}

func TestTurnInput(t *testing.T) {
	custom := New(Options{BaseURL: "http://x/v1"})
	real := New(Options{Provider: "zhipuai-coding-plan"})
	for _, tc := range []struct {
		name string
		d    *Driver
		turn sandboxagent.Turn
		want string
	}{
		{"new session", custom, sandboxagent.Turn{Prompt: "say \"hi\"\nnow"},
			`{"model":{"modelID":"fake-model","providerID":"sandbox"},"sessionID":"","text":"say \"hi\"\nnow","type":"prompt"}`},
		{"continue, a model with provider", custom, sandboxagent.Turn{Prompt: "p", SessionID: "ses_1", Model: "other/m/x"},
			`{"model":{"modelID":"m/x","providerID":"other"},"sessionID":"ses_1","text":"p","type":"prompt"}`},
		{"real provider, its default model", real, sandboxagent.Turn{Prompt: "p"},
			`{"sessionID":"","text":"p","type":"prompt"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.d.TurnInput(tc.turn)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasSuffix(b, []byte("\n")) || bytes.Count(b, []byte("\n")) != 1 {
				t.Fatalf("not one line: %q", b)
			}
			if got := strings.TrimSpace(string(b)); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
	for _, bad := range []sandboxagent.Turn{{Prompt: " \n"}, {Prompt: "p", SessionID: "-x"}} {
		if _, err := custom.TurnInput(bad); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	var abort map[string]string
	if err := json.Unmarshal(custom.AbortInput(), &abort); err != nil || abort["type"] != "abort" {
		t.Errorf("abort %q: %v", custom.AbortInput(), err)
	}
}

// TestBridgeParity: the bridge's lines for a turn (captured from the real
// opencode serve) give the events `opencode run` gives for the same fake
// model script, and the turn ends only at turn_end.
func TestBridgeParity(t *testing.T) {
	run := parseFile(t, "serve/run-tool-turn.jsonl", 0, nil)
	served := parseFile(t, "serve/bridge-tool-turn.jsonl", 0, nil)
	if served.Error != nil || served.Reply != "DONE: the file says hi" || run.Reply != served.Reply {
		t.Fatalf("reply %q (run %q), err %+v", served.Reply, run.Reply, served.Error)
	}
	if !strings.HasPrefix(served.SessionID, "ses_") {
		t.Errorf("session %q", served.SessionID)
	}
	strip := func(g drivertest.Golden) []sandboxagent.Payload {
		var out []sandboxagent.Payload
		for _, ev := range g.Events {
			if ev.Kind == sandboxagent.KindRaw {
				t.Errorf("raw event %+v", ev)
			}
			p := ev.Payload
			// The fake model counts the prompt's characters, and the
			// system prompts differ by a character or so.
			p.CallID, p.InputTokens = "", 0
			out = append(out, p)
		}
		return out
	}
	if r, s := strip(run), strip(served); len(r) != len(s) || len(r) < 6 {
		t.Fatalf("%d events per turn, %d served", len(r), len(s))
	} else {
		for i := range r {
			if run.Events[i].Kind != served.Events[i].Kind || !equalJSON(t, r[i], s[i]) {
				t.Errorf("event %d: run %s %+v, served %s %+v", i, run.Events[i].Kind, r[i], served.Events[i].Kind, s[i])
			}
		}
	}

	p := New(Options{BaseURL: "http://x/v1"}).NewParser(sandboxagent.Turn{Prompt: "p"}).(*Parser)
	lines := bytes.Split(bytes.TrimSpace(drivertest.Testdata(t, "serve/bridge-tool-turn.jsonl")), []byte("\n"))
	for i, l := range lines {
		evs := p.Parse(l)
		ended, settle := p.Ended()
		last := i == len(lines)-1
		if ended != last || settle != 0 {
			t.Fatalf("line %d: ended %v settle %v", i, ended, settle)
		}
		if last && len(evs) != 0 {
			t.Errorf("turn_end gave events %+v", evs)
		}
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	return bytes.Equal(ja, jb)
}
