package trajectory

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/fakemodel"
)

var update = flag.Bool("update", false, "rewrite the golden captures under testdata/golden")

const (
	cmdWant   = "echo hi > /tmp/out.txt"
	thinkWant = "I should run the shell command first."
	textWant  = "Running the command now, then I will check it."
	finalWant = "All done: /tmp/out.txt holds hi."
)

// cli is how one CLI talks to the model, with its captured requests.
type cli struct {
	name    string
	api     API
	first   capturedReq   // the first agent-loop request (offers tools)
	side    []capturedReq // side requests without tools (titles)
	header  map[string]string
	sent    string // the tool result the CLI sends the model
	printed string // the tool output the CLI prints
	command string // the command as the CLI prints it
}

func clis(t testing.TB) []cli {
	var out []cli
	for _, c := range []cli{
		{name: "claude", api: AnthropicMessages, header: map[string]string{"anthropic-version": "2023-06-01"},
			sent: "hi", printed: "hi", command: cmdWant},
		{name: "codex", api: OpenAIResponses,
			sent:    "Chunk ID: 9f2c1a\nWall time: 0.0011 seconds\nProcess exited with code 0\nOriginal token count: 1\nOutput:\nhi\n",
			printed: "hi\n", command: "/bin/bash -lc 'echo hi > /tmp/out.txt'"},
		{name: "opencode", api: OpenAIChat, sent: "(no output)", printed: "(no output)", command: cmdWant},
		{name: "pi", api: OpenAIChat, sent: "(no output)", printed: "", command: cmdWant},
		{name: "dsh", api: OpenAIChat, sent: "(no output)", printed: "(no output)", command: cmdWant},
	} {
		file := c.name + "-requests.jsonl"
		if c.name == "claude" || c.name == "codex" {
			file = c.name + "-request-1.json"
		}
		for _, q := range loadCaptured(t, file) {
			switch {
			case !q.hasTools():
				c.side = append(c.side, q)
			case c.first.Path == "":
				c.first = q
			}
		}
		out = append(out, c)
	}
	return out
}

// followUp is first's body with the model's call and the CLI's result
// appended, as the CLI's next request carries them, plus an old turn's
// result for a call this turn never made.
func followUp(t testing.TB, c cli, call ToolCall, stream bool) []byte {
	return setJSON(t, c.first.Body, func(m map[string]any) {
		m["stream"] = stream
		var args any
		_ = json.Unmarshal([]byte(call.Arguments), &args)
		switch c.api {
		case AnthropicMessages:
			msgs := m["messages"].([]any)
			msgs = append([]any{
				map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "toolu_old", "name": call.Name, "input": args}}},
				map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_old", "content": "old output"}}},
			}, msgs...)
			msgs = append(msgs,
				map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": call.ID, "name": call.Name, "input": args}}},
				map[string]any{"role": "user", "content": []any{
					map[string]any{"type": "tool_result", "tool_use_id": call.ID, "content": []any{map[string]any{"type": "text", "text": c.sent}}, "is_error": false},
				}})
			m["messages"] = msgs
		case OpenAIChat:
			m["messages"] = append(m["messages"].([]any),
				map[string]any{"role": "tool", "tool_call_id": "call_old", "content": "old output"},
				map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
					"id": call.ID, "type": "function", "function": map[string]any{"name": call.Name, "arguments": call.Arguments}}}},
				map[string]any{"role": "tool", "tool_call_id": call.ID, "content": c.sent})
		case OpenAIResponses:
			m["input"] = append(m["input"].([]any),
				map[string]any{"type": "function_call_output", "call_id": "call_old", "output": "old output"},
				map[string]any{"type": "function_call", "call_id": call.ID, "name": call.Name, "arguments": call.Arguments},
				map[string]any{"type": "function_call_output", "call_id": call.ID, "output": c.sent})
		}
	})
}

// TestFakeModelTurns drives the fake model with each CLI's real requests,
// streamed and not, feeds the bytes through a Record in random chunks and
// checks what it holds.
func TestFakeModelTurns(t *testing.T) {
	for _, c := range clis(t) {
		for _, stream := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stream=%v", c.name, stream), func(t *testing.T) {
				srv, err := fakemodel.New(fakemodel.Script{Responses: []fakemodel.Step{
					{Tool: fakemodel.ToolShell, Command: cmdWant, Thinking: thinkWant, Text: textWant},
					{Text: finalWant},
				}}, fakemodel.Options{})
				if err != nil {
					t.Fatal(err)
				}
				if err := srv.Start(""); err != nil {
					t.Fatal(err)
				}
				defer srv.Close()
				rng := rand.New(rand.NewPCG(uint64(len(c.name)), map[bool]uint64{true: 1}[stream]))
				golden := func(step string, w wire) {
					if *update {
						name := fmt.Sprintf("%s-%s-stream=%v.txt", c.name, step, stream)
						if err := os.WriteFile(filepath.Join("testdata", "golden", name), w.resp, 0o644); err != nil {
							t.Fatal(err)
						}
					}
				}

				var r Record
				w1 := post(t, srv.URL(), c.first.Path, setJSON(t, c.first.Body, func(m map[string]any) { m["stream"] = stream }), c.header)
				golden("call", w1)
				play(&r, w1, rng)

				calls := r.ToolCalls()
				if len(calls) != 1 {
					t.Fatalf("calls = %+v, want 1", calls)
				}
				call := calls[0]
				if call.ID == "" || call.Name == "" || !call.Complete || call.Exchange != 1 {
					t.Fatalf("call = %+v", call)
				}
				if got, ok := r.ToolCall(call.ID); !ok || got.Arguments != call.Arguments {
					t.Fatalf("ToolCall(%q) = %+v, %v", call.ID, got, ok)
				}
				if _, ok := r.FindToolCall(call.Name, call.Input()); !ok {
					t.Errorf("FindToolCall(%q, %s) missed", call.Name, call.Input())
				}
				if _, ok := r.FindToolCall(call.Name, json.RawMessage(`{"command":"rm -rf /"}`)); ok {
					t.Error("FindToolCall matched other arguments")
				}
				if _, ok := r.FindCommand(c.command); !ok {
					t.Errorf("FindCommand(%q) missed %s", c.command, call.Arguments)
				}
				if _, ok := r.FindCommand("echo pwned"); ok {
					t.Error("FindCommand matched a command never asked for")
				}
				if !r.HasText(textWant) || !r.HasText("the command now,") {
					t.Errorf("HasText(%q) = false", textWant)
				}
				if r.HasText("I ran rm -rf /") {
					t.Error("HasText matched text the model never sent")
				}
				if !r.HasReasoning(thinkWant) {
					t.Errorf("HasReasoning(%q) = false", thinkWant)
				}
				if a, ok := r.FinalAnswer(); ok {
					t.Errorf("FinalAnswer after a tool call = %q, true", a)
				}

				w2 := post(t, srv.URL(), c.first.Path, followUp(t, c, call, stream), c.header)
				golden("final", w2)
				play(&r, w2, rng)
				// A side request (title) finishing last must not become the answer.
				for _, q := range c.side {
					play(&r, post(t, srv.URL(), q.Path, setJSON(t, q.Body, func(m map[string]any) { m["stream"] = stream }), c.header), rng)
				}

				if res, ok := r.ToolResult(call.ID); !ok || res.Output != c.sent || res.Exchange != 2 {
					t.Errorf("ToolResult(%q) = %+v, %v; want %q", call.ID, res, ok, c.sent)
				}
				for _, old := range []string{"toolu_old", "call_old", "toolu_mock_c7e77bfe4f2243e0", "call_mock_b4376da47f78"} {
					if _, ok := r.ToolResult(old); ok {
						t.Errorf("ToolResult(%q): an older turn's result counted", old)
					}
				}
				if !r.ResultMatches(call.ID, c.printed) {
					t.Errorf("ResultMatches(%q, %q) = false (sent %q)", call.ID, c.printed, c.sent)
				}
				if r.ResultMatches(call.ID, "forged output") {
					t.Error("ResultMatches accepted a forged output")
				}
				if a, ok := r.FinalAnswer(); !ok || a != finalWant {
					t.Errorf("FinalAnswer = %q, %v; want %q", a, ok, finalWant)
				}
				s := r.Summary()
				want := Summary{Exchanges: 2 + len(c.side), Responses: 2 + len(c.side), ToolCalls: 1, ToolResults: 1, FinalAnswer: true}
				if s != want {
					t.Errorf("Summary = %+v, want %+v", s, want)
				}
				t.Logf("call %s %s %s; summary %+v", call.ID, call.Name, call.Arguments, s)
			})
		}
	}
}
