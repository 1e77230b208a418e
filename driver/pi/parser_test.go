package pi

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
)

// TestParserGolden: ref-* are the reference study's captures (pi 0.73.1 against its Python
// mock); fake-* were captured from pi 0.73.1 in its image against the
// project's fake model (the integration test rewrites fake-shell-done
// and fake-401 with -capture).
func TestParserGolden(t *testing.T) {
	drivertest.CheckGolden(t, New(Options{}), []drivertest.ParserCase{
		{Name: "ref-stream"},
		{Name: "ref-401"},
		{Name: "fake-shell-done"},
		{Name: "fake-401"},
		{Name: "fake-thinking-toolerror-retry"},
		{Name: "fake-500-exhausted"},
		{Name: "fake-no-session", Exit: 1}, // with fake-no-session.stderr
	})
}

func kinds(g drivertest.Golden, k sandboxagent.EventKind) []drivertest.GoldenEvent {
	var out []drivertest.GoldenEvent
	for _, e := range g.Events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// TestParserShellDone asserts the facts that matter on the real CLI's
// output, independently of the golden files.
func TestParserShellDone(t *testing.T) {
	for _, file := range []string{"fake-shell-done.jsonl", "ref-stream.jsonl"} {
		t.Run(file, func(t *testing.T) {
			g := drivertest.ParseFile(t, New(Options{}), file, 0, nil)
			if g.Error != nil {
				t.Fatalf("error %+v", g.Error)
			}
			if g.Reply != "DONE" {
				t.Errorf("reply %q", g.Reply)
			}
			if g.SessionID == "" || g.Events[0].Kind != sandboxagent.KindSession || g.Events[0].SessionID != g.SessionID {
				t.Errorf("session: %q, first event %+v", g.SessionID, g.Events[0])
			}
			calls := kinds(g, sandboxagent.KindToolCall)
			results := kinds(g, sandboxagent.KindToolResult)
			if len(calls) != 1 || len(results) != 1 {
				t.Fatalf("%d tool calls, %d results", len(calls), len(results))
			}
			c, r := calls[0].Payload, results[0].Payload
			if c.Tool != "bash" || c.Command != "echo hi > /tmp/out.txt" || c.CallID == "" {
				t.Errorf("tool call %+v", c)
			}
			var in map[string]any
			if err := json.Unmarshal(c.Input, &in); err != nil || in["command"] != "echo hi > /tmp/out.txt" {
				t.Errorf("tool input %s (%v)", c.Input, err)
			}
			if r.CallID != c.CallID || r.IsError || r.ExitCode == nil || *r.ExitCode != 0 || r.Output != "(no output)" {
				t.Errorf("tool result %+v", r)
			}
			if calls[0].Line >= results[0].Line {
				t.Errorf("tool call on line %d, result on line %d", calls[0].Line, results[0].Line)
			}
			usage := kinds(g, sandboxagent.KindUsage)
			// One usage event, at agent_end (the last line), summing
			// both model calls of the turn.
			if len(usage) != 1 || usage[0].Payload.InputTokens < 100 || usage[0].Payload.OutputTokens == 0 || usage[0].Payload.Cumulative {
				t.Errorf("usage %+v", usage)
			} else if last := g.Events[len(g.Events)-1]; last.Kind != sandboxagent.KindUsage || last.Line != bytes.Count(drivertest.Testdata(t, file), []byte("\n")) {
				t.Errorf("last event %+v is not the usage of the last line", last)
			}
			var deltas, whole strings.Builder
			for _, e := range kinds(g, sandboxagent.KindText) {
				if e.Payload.Delta {
					deltas.WriteString(e.Payload.Text)
				} else {
					whole.WriteString(e.Payload.Text)
				}
			}
			if deltas.String() != "DONE" || whole.String() != "DONE" {
				t.Errorf("text deltas %q, whole %q", deltas.String(), whole.String())
			}
			if raws := kinds(g, sandboxagent.KindRaw); len(raws) != 0 {
				t.Errorf("raw events %+v", raws)
			}
		})
	}
}

func TestParserThinking(t *testing.T) {
	// ref-stream: the mock sent reasoning; fake-shell-done: it sent none.
	if th := kinds(drivertest.ParseFile(t, New(Options{}), "fake-shell-done.jsonl", 0, nil), sandboxagent.KindThinking); len(th) != 0 {
		t.Errorf("thinking events without reasoning: %+v", th)
	}
	g := drivertest.ParseFile(t, New(Options{}), "ref-stream.jsonl", 0, nil)
	var whole []string
	for _, e := range kinds(g, sandboxagent.KindThinking) {
		if e.Payload.Text == "" {
			t.Errorf("empty thinking event on line %d", e.Line)
		}
		if !e.Payload.Delta {
			whole = append(whole, e.Payload.Text)
		}
	}
	if len(whole) != 2 || whole[0] != "Thinking about the task." {
		t.Errorf("whole thinking %q", whole)
	}
}

func TestParser401(t *testing.T) {
	for _, file := range []string{"fake-401.jsonl", "ref-401.jsonl"} {
		t.Run(file, func(t *testing.T) {
			g := drivertest.ParseFile(t, New(Options{}), file, 0, nil) // pi exits 0 in JSON mode
			if g.Error == nil {
				t.Fatal("no error for a 401")
			}
			if g.Error.Status != 401 || !strings.HasPrefix(g.Error.Message, "401 ") || strings.Contains(g.Error.Message, "\n") {
				t.Errorf("error %+v", g.Error)
			}
			if g.Reply != "" {
				t.Errorf("reply %q", g.Reply)
			}
		})
	}
}

func TestParserRetries(t *testing.T) {
	g := drivertest.ParseFile(t, New(Options{}), "fake-thinking-toolerror-retry.jsonl", 0, nil)
	if g.Error != nil || g.Reply != "FINISHED" {
		t.Fatalf("reply %q, error %+v (a retry that succeeded is no failure)", g.Reply, g.Error)
	}
	r := kinds(g, sandboxagent.KindToolResult)
	if len(r) != 1 || !r[0].Payload.IsError || r[0].Payload.ExitCode == nil || *r[0].Payload.ExitCode != 3 {
		t.Errorf("tool result %+v", r)
	}
	if strings.Contains(r[0].Payload.Output, "sk-") {
		t.Errorf("the shell saw the key: %q", r[0].Payload.Output)
	}
	var retry bool
	for _, e := range kinds(g, sandboxagent.KindError) {
		if !e.Payload.IsError && strings.Contains(e.Payload.Text, "retrying (attempt 1 of 2") {
			retry = true
		}
	}
	if !retry {
		t.Errorf("no retry event: %+v", kinds(g, sandboxagent.KindError))
	}

	g = drivertest.ParseFile(t, New(Options{}), "fake-500-exhausted.jsonl", 0, nil)
	if g.Error == nil || g.Error.Status != 500 || g.Error.Message != "500 upstream exploded" {
		t.Errorf("error %+v", g.Error)
	}
}

func TestParserExitCode(t *testing.T) {
	g := drivertest.ParseFile(t, New(Options{}), "fake-no-session.jsonl", 1, []byte("No session found matching 'x'\n"))
	if g.Error == nil || g.Error.ExitCode != 1 || g.Error.Message != "No session found matching 'x'" || g.Error.Stderr != "No session found matching 'x'" {
		t.Errorf("error %+v", g.Error)
	}
}

func TestParserOddLines(t *testing.T) {
	p := New(Options{}).NewParser(sandboxagent.Turn{})
	for _, tc := range []struct {
		line string
		kind sandboxagent.EventKind // "" = no event
	}{
		{``, ""},
		{`not json`, sandboxagent.KindRaw},
		{`Session found in different project: /workspace`, sandboxagent.KindRaw},
		{`{"no":"type"}`, sandboxagent.KindRaw},
		{`{"type":"something_new"}`, sandboxagent.KindRaw},
		{`{"type":"message_end","message":{"role":"alien"}}`, sandboxagent.KindRaw},
		{`{"type":"message_end"}`, sandboxagent.KindRaw},
		{`{"type":"message_update"}`, sandboxagent.KindRaw},
		{`{"type":"agent_start"}`, ""},
		{`{"type":"queue_update","steering":[],"followUp":[]}`, ""},
		{`{"type":"compaction_end","reason":"threshold","errorMessage":"too big"}`, sandboxagent.KindError},
		{`{"type":"extension_error","error":"boom"}`, sandboxagent.KindError},
		{`{"type":"message_update","assistantMessageEvent":{"type":"toolcall_delta","delta":"{\"co"}}`, ""},
	} {
		evs := p.Parse([]byte(tc.line))
		switch {
		case tc.kind == "" && len(evs) != 0:
			t.Errorf("%s: events %+v", tc.line, evs)
		case tc.kind != "" && (len(evs) != 1 || evs[0].Kind != tc.kind):
			t.Errorf("%s: events %+v, want one %s", tc.line, evs, tc.kind)
		case tc.kind == sandboxagent.KindRaw && evs[0].Payload.Raw != tc.line:
			t.Errorf("%s: raw %q", tc.line, evs[0].Payload.Raw)
		}
	}
	// Exit 0 without any assistant message (pi asked its y/N question and
	// read EOF) is a failure, not an empty success.
	p = New(Options{}).NewParser(sandboxagent.Turn{})
	p.Parse([]byte(`Session found in different project: /workspace`))
	p.Parse([]byte(`Fork this session into current directory? [y/N] `))
	_, err := p.Finish(0, nil)
	var de *sandboxagent.DriverError
	if !errors.As(err, &de) || !strings.Contains(de.Message, "Fork this session") {
		t.Errorf("Finish: %v", err)
	}
}

func TestToolPayloads(t *testing.T) {
	for _, tc := range []struct {
		block         string
		command, path string
	}{
		{`{"type":"toolCall","id":"a","name":"bash","arguments":{"command":"ls -l","timeout":5}}`, "ls -l", ""},
		{`{"type":"toolCall","id":"b","name":"read","arguments":{"path":"/etc/hosts"}}`, "", "/etc/hosts"},
		{`{"type":"toolCall","id":"c","name":"write","arguments":{"path":"a.py","content":"x"}}`, "", "a.py"},
		{`{"type":"toolCall","id":"d","name":"edit","arguments":{"path":"b.go","edits":[]}}`, "", "b.go"},
		{`{"type":"toolCall","id":"e","name":"custom","arguments":{"file_path":"c.txt"}}`, "", "c.txt"},
	} {
		var b block
		if err := json.Unmarshal([]byte(tc.block), &b); err != nil {
			t.Fatal(err)
		}
		ev := toolCall(b)
		if ev.Payload.Command != tc.command || ev.Payload.Path != tc.path || ev.Payload.CallID != b.ID || ev.Payload.Tool != b.Name {
			t.Errorf("%s: %+v", tc.block, ev.Payload)
		}
		if !bytes.Equal(ev.Payload.Input, b.Arguments) {
			t.Errorf("input %s", ev.Payload.Input)
		}
	}
}
