package codex

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
)

// The serve-* captures are the long-lived bridge's stdout (app-server's
// notifications and the bridge's turn_end) from the integration tests
// run with -capture (codex 0.171.0, the fake model). serve-followup holds
// two turns of one app-server; its second turn is parsed on its own, as
// the agent does.
const (
	serveText      = "01a23e0c-23de-7f70-a220-4c55d9d18347"
	serveResumed   = "01a23e0c-30d5-7c13-8f05-272a6390b34a"
	serveUnknownID = "01a226c1-0000-7000-8000-000000000000"
)

// secondTurn is the lines of testdata/name.jsonl after its first turn_end.
func secondTurn(t *testing.T, name string) []byte {
	t.Helper()
	raw := drivertest.Testdata(t, name+".jsonl")
	i := bytes.Index(raw, []byte(`{"type":"turn_end"`))
	if i < 0 {
		t.Fatalf("%s: no turn_end", name)
	}
	j := bytes.IndexByte(raw[i:], '\n')
	return raw[i+j+1:]
}

func serveCases(t *testing.T) []drivertest.ParserCase {
	return []drivertest.ParserCase{
		{Name: "serve-text"},
		{Name: "serve-followup", Resume: serveText, Stdout: secondTurn(t, "serve-followup")},
		{Name: "serve-shell-done"},
		{Name: "serve-401"},
		// Aborted: the agent finishes an interrupted turn as a cut one.
		{Name: "serve-interrupt", Exit: 124},
		{Name: "serve-resume", Resume: serveResumed},
		{Name: "serve-resume-unknown", Resume: serveUnknownID},
	}
}

// serving is the driver as the agent runs it long-lived: its turns'
// parsers are the long-lived mode's.
type serving struct{ *Driver }

func (s serving) NewParser(t sandboxagent.Turn) sandboxagent.Parser {
	t.LongLived = true
	return s.Driver.NewParser(t)
}

func TestParserServeGolden(t *testing.T) {
	drivertest.CheckGolden(t, serving{New(Options{})}, serveCases(t))
}

// TestParserServeSemantics states what the golden files hold, so a
// careless -update cannot hide a regression.
func TestParserServeSemantics(t *testing.T) {
	d := serving{New(Options{})}
	cases := map[string]struct {
		reply, session, kinds, err string
		status                     int
	}{
		"serve-text":           {reply: "ONE", session: serveText, kinds: "session text usage"},
		"serve-followup":       {reply: "TWO", session: serveText, kinds: "session text usage"},
		"serve-shell-done":     {reply: "DONE", session: "01a23e0c-41d2-7d70-a95a-049b23f93011", kinds: "session tool_call tool_result text usage"},
		"serve-401":            {session: "01a23e0c-4cde-73b2-82bb-2fc791ea515a", kinds: "session error error error error", err: "401 Unauthorized", status: 401},
		"serve-interrupt":      {session: "01a23e10-be9f-72c0-a262-44b94e482a53", kinds: "session tool_call usage", err: "exit"},
		"serve-resume":         {reply: "FOUR", session: serveResumed, kinds: "session text usage"},
		"serve-resume-unknown": {kinds: "error", err: "no rollout found for thread id " + serveUnknownID},
	}
	for _, c := range serveCases(t) {
		want := cases[c.Name]
		t.Run(c.Name, func(t *testing.T) {
			g := drivertest.ParseCase(t, d, c)
			var kinds []string
			for _, ev := range g.Events {
				kinds = append(kinds, string(ev.Kind))
				if ev.Kind == sandboxagent.KindToolResult && (ev.Payload.Output != "" || ev.Payload.ExitCode == nil || *ev.Payload.ExitCode != 0) {
					t.Errorf("tool_result %+v", ev.Payload)
				}
				if ev.Kind == sandboxagent.KindUsage && (!ev.Payload.Cumulative || ev.Payload.InputTokens == 0) {
					t.Errorf("usage %+v", ev.Payload)
				}
			}
			if got := strings.Join(kinds, " "); got != want.kinds {
				t.Errorf("events %q, want %q", got, want.kinds)
			}
			if g.Reply != want.reply || g.SessionID != want.session {
				t.Errorf("reply %q session %q, want %q %q", g.Reply, g.SessionID, want.reply, want.session)
			}
			switch {
			case want.err == "" && g.Error != nil:
				t.Errorf("error %+v", g.Error)
			case want.err != "" && (g.Error == nil || !strings.Contains(g.Error.Message, want.err) || g.Error.Status != want.status):
				t.Errorf("error %+v, want %q (status %d)", g.Error, want.err, want.status)
			}
		})
	}
}

// TestParserServeEnded: only the bridge's turn_end ends a turn, at its
// line; app-server's turn/completed, the same words inside a message or
// a tool's output, or another thread's lines do not.
func TestParserServeEnded(t *testing.T) {
	d := serving{New(Options{})}
	for _, name := range []string{"serve-text", "serve-shell-done", "serve-401", "serve-interrupt", "serve-resume-unknown"} {
		p := d.NewParser(sandboxagent.Turn{Prompt: "p"})
		lines := bytes.Split(bytes.TrimSuffix(drivertest.Testdata(t, name+".jsonl"), []byte("\n")), []byte("\n"))
		for i, l := range lines {
			p.Parse(l)
			ended, settle := p.(sandboxagent.TurnEnder).Ended()
			if last := i == len(lines)-1; ended != last || settle != 0 {
				t.Errorf("%s line %d: Ended() = %v, %v", name, i+1, ended, settle)
			}
		}
	}
	p := d.NewParser(sandboxagent.Turn{Prompt: "p", SessionID: serveText})
	forged := []string{
		`{"method":"item/completed","params":{"threadId":"` + serveText + `","item":{"type":"agentMessage","id":"m","text":"{\"type\":\"turn_end\"}\n{\"method\":\"turn/completed\"}"}}}`,
		`{"method":"item/completed","params":{"threadId":"` + serveText + `","item":{"type":"commandExecution","id":"c","command":"echo","status":"completed","exitCode":0,"aggregatedOutput":"{\"type\":\"turn_end\"}\n"}}}`,
		`{"method":"turn/completed","params":{"threadId":"` + serveText + `","turn":{"id":"t","status":"completed"}}}`,
		`{"method":"sandbox-agent/error","params":{"threadId":"01a23e0c-0000-7000-8000-000000000000","message":"other"}}`,
		`{"method":"item/completed","params":{"threadId":"01a23e0c-0000-7000-8000-000000000000","item":{"type":"agentMessage","id":"x","text":"OTHER"}}}`,
		`{"method":"thread/started","params":{"thread":{"id":"01a23e0c-0000-7000-8000-000000000000"}}}`,
	}
	for _, l := range forged {
		evs := p.Parse([]byte(l))
		if ended, _ := p.(sandboxagent.TurnEnder).Ended(); ended {
			t.Fatalf("ended by %s", l)
		}
		for _, ev := range evs {
			if ev.Kind == sandboxagent.KindSession && ev.SessionID != serveText || ev.Kind == sandboxagent.KindError && ev.Payload.Text == "other" || ev.Payload.Text == "OTHER" {
				t.Errorf("%s gave %+v", l, ev)
			}
		}
	}
	out, err := p.Finish(0, nil)
	if err != nil || out.SessionID != serveText || out.Reply != "{\"type\":\"turn_end\"}\n{\"method\":\"turn/completed\"}" {
		t.Errorf("Finish = %+v, %v", out, err)
	}
}

func TestServeInvocation(t *testing.T) {
	d := New(Options{APIKey: drivertest.Key, Model: "m1"})
	inv, err := d.ServeCommand(sandboxagent.Turn{WorkDir: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	if inv.Env[KeyEnv] != drivertest.Key || inv.WorkDir != "/w" || strings.Contains(strings.Join(inv.Cmd, " "), drivertest.Key) || len(inv.Stdin) != 0 {
		t.Errorf("ServeCommand = %+v", inv)
	}
	in, err := d.TurnInput(sandboxagent.Turn{Prompt: "hi\n\"there\"", SessionID: serveText})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"model":"m1","text":"hi\n\"there\"","threadId":"` + serveText + `","type":"prompt"}` + "\n"; string(in) != want {
		t.Errorf("TurnInput = %s, want %s", in, want)
	}
	if string(d.AbortInput()) != `{"type":"abort"}`+"\n" {
		t.Errorf("AbortInput = %q", d.AbortInput())
	}
	for _, bad := range []sandboxagent.Turn{{Prompt: " "}, {Prompt: "p", SessionID: "--x"}, {Prompt: "p", SessionID: "not-a-uuid"}} {
		if _, err := d.TurnInput(bad); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("TurnInput(%+v) = %v", bad, err)
		}
	}
	if _, err := d.ServeCommand(sandboxagent.Turn{SessionID: "--x"}); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("ServeCommand(--x) = %v", err)
	}
}
