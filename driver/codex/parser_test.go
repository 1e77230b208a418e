package codex

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
)

// parseFile runs a fresh parser over the capture testdata/name.jsonl (and
// name.stderr) of a turn that resumed session and exited with exit.
func parseFile(t *testing.T, name, session string, exit int) drivertest.Golden {
	t.Helper()
	return drivertest.ParseCase(t, New(Options{}), drivertest.ParserCase{Name: name, Resume: session, Exit: exit})
}

func TestParserGolden(t *testing.T) {
	drivertest.CheckGolden(t, New(Options{}), []drivertest.ParserCase{
		// Real CLI output from the reference run (python mock).
		{Name: "codex-stream"},
		{Name: "codex-stream-401", Exit: 1},
		{Name: "codex-stream-apply-patch"},
		{Name: "codex-stream-unknown-model"},
		// Real CLI output captured in the image against the fake model.
		{Name: "fake-shell-done"},
		{Name: "fake-multi"},
		{Name: "fake-401", Exit: 1},
		{Name: "fake-429", Exit: 1},
		{Name: "fake-500-recover"},
		{Name: "fake-missing-key", Exit: 1},
		{Name: "fake-resume", Resume: "01a226c8-667d-7f42-ab84-674eb9e97950"},
		{Name: "fake-resume-unknown", Resume: "01a226c1-0000-7000-8000-000000000000", Exit: 1},
	})
}

// TestParserSemantics states the key facts the golden files hold, so a
// careless -update cannot hide a regression.
func TestParserSemantics(t *testing.T) {
	g := parseFile(t, "fake-multi", "", 0)
	if g.Error != nil || g.Reply != "DONE" || g.SessionID != "01a226c2-2239-7773-8a9d-a6a55069ace8" {
		t.Fatalf("reply %q session %q err %+v", g.Reply, g.SessionID, g.Error)
	}
	kinds := map[sandboxagent.EventKind]int{}
	calls := map[string]bool{}
	for _, ev := range g.Events {
		kinds[ev.Kind]++
		switch ev.Kind {
		case sandboxagent.KindToolCall:
			if ev.Payload.Tool != "command_execution" || ev.Payload.CallID == "" || !json.Valid(ev.Payload.Input) {
				t.Errorf("tool_call %+v", ev.Payload)
			}
			calls[ev.Payload.CallID] = true
		case sandboxagent.KindToolResult:
			if !calls[ev.Payload.CallID] {
				t.Errorf("tool_result %s before its call", ev.Payload.CallID)
			}
			if ev.Payload.ExitCode == nil {
				t.Errorf("tool_result without exit code: %+v", ev.Payload)
			}
			if strings.Contains(ev.Payload.Command, "nonexistent") != ev.Payload.IsError {
				t.Errorf("is_error wrong: %+v", ev.Payload)
			}
		case sandboxagent.KindUsage:
			if !ev.Payload.Cumulative || ev.Payload.InputTokens == 0 || ev.Payload.ReasoningTokens != 11 {
				t.Errorf("usage %+v", ev.Payload)
			}
		case sandboxagent.KindRaw:
			t.Errorf("unexpected raw event %+v", ev.Payload)
		}
	}
	want := map[sandboxagent.EventKind]int{
		sandboxagent.KindSession: 1, sandboxagent.KindThinking: 2, sandboxagent.KindText: 2,
		sandboxagent.KindToolCall: 3, sandboxagent.KindToolResult: 3, sandboxagent.KindUsage: 1,
	}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("%d %s events, want %d", kinds[k], k, n)
		}
	}

	// No reasoning from the backend: no thinking event.
	g = parseFile(t, "fake-shell-done", "", 0)
	for _, ev := range g.Events {
		if ev.Kind == sandboxagent.KindThinking {
			t.Errorf("thinking event without reasoning: %+v", ev)
		}
	}

	// 401: a DriverError with the status, the retries as non-fatal errors.
	g = parseFile(t, "fake-401", "", 1)
	if g.Error == nil || g.Error.Status != 401 || g.Error.ExitCode != 1 || strings.Contains(g.Error.Message, "\n") {
		t.Fatalf("401 error %+v", g.Error)
	}
	if g.Error.Stderr != "Reading additional input from stdin..." {
		t.Errorf("stderr %q", g.Error.Stderr)
	}
	retries := 0
	for _, ev := range g.Events {
		if ev.Kind == sandboxagent.KindError && !ev.Payload.IsError {
			retries++
		}
	}
	if retries != 2 {
		t.Errorf("%d retry events, want 2", retries)
	}

	g = parseFile(t, "fake-429", "", 1)
	if g.Error == nil || g.Error.Status != 429 {
		t.Errorf("429 error %+v", g.Error)
	}

	// An unknown resume id: no JSON, the message comes from stderr.
	g = parseFile(t, "fake-resume-unknown", "01a226c1-0000-7000-8000-000000000000", 1)
	if g.Error == nil || !strings.Contains(g.Error.Message, "no rollout found") {
		t.Errorf("unknown resume error %+v", g.Error)
	}

	// `codex exec fork ID` without a prompt: only the new thread id.
	g = drivertest.Parse(t, newExecParser(sandboxagent.Turn{}), drivertest.Testdata(t, "fake-fork.jsonl"), 0, drivertest.Testdata(t, "fake-fork.stderr"))
	if len(g.Events) != 1 || g.Events[0].SessionID != "01a226c8-9e43-7590-8437-61d2114ad44a" {
		t.Errorf("fork output events %+v", g.Events)
	}

	// apply_patch: a file_change tool call with the path.
	g = parseFile(t, "codex-stream-apply-patch", "", 0)
	if ev := g.Events[1]; ev.Kind != sandboxagent.KindToolCall || ev.Payload.Path != "/workspace/hello.txt" || ev.Payload.Tool != "file_change" {
		t.Errorf("file_change call %+v", ev)
	}
}

func TestParserEdgeCases(t *testing.T) {
	p := newExecParser(sandboxagent.Turn{Prompt: "p"})
	check := func(line string, kind sandboxagent.EventKind, n int) []sandboxagent.Event {
		t.Helper()
		evs := p.Parse([]byte(line))
		if len(evs) != n || (n > 0 && evs[0].Kind != kind) {
			t.Fatalf("Parse(%s) = %+v, want %d %s", line, evs, n, kind)
		}
		return evs
	}
	check(`not json at all`, sandboxagent.KindRaw, 1)
	check(`{"type":"something.new","x":1}`, sandboxagent.KindRaw, 1)
	check(`{"no_type":true}`, sandboxagent.KindRaw, 1)
	check(`{"type":"item.completed","item":{"id":"i","type":"todo_list","items":[]}}`, sandboxagent.KindRaw, 1)
	check(``, "", 0)
	check(`{"type":"turn.started"}`, "", 0)
	check(`{"type":"item.completed","item":{"id":"r","type":"reasoning","text":""}}`, "", 0)
	evs := check(`{"type":"item.started","item":{"id":"m","type":"mcp_tool_call","server":"srv","tool":"look","arguments":{"q":1},"status":"in_progress"}}`, sandboxagent.KindToolCall, 1)
	if evs[0].Payload.Tool != "srv.look" || string(evs[0].Payload.Input) != `{"q":1}` {
		t.Errorf("mcp call %+v", evs[0].Payload)
	}
	evs = check(`{"type":"item.completed","item":{"id":"m","type":"mcp_tool_call","server":"srv","tool":"look","arguments":{"q":1},"result":{"content":[{"type":"text","text":"found"}]},"status":"completed"}}`, sandboxagent.KindToolResult, 1)
	if evs[0].Payload.Output != "found" || evs[0].Payload.IsError {
		t.Errorf("mcp result %+v", evs[0].Payload)
	}
	// A completed command never announced: call then result.
	evs = check(`{"type":"item.completed","item":{"id":"c","type":"command_execution","command":"ls","aggregated_output":"x","exit_code":0,"status":"completed"}}`, sandboxagent.KindToolCall, 2)
	if evs[1].Kind != sandboxagent.KindToolResult || evs[1].Payload.Output != "x" {
		t.Errorf("result %+v", evs[1])
	}
	check(`{"type":"item.completed","item":{"id":"w","type":"web_search","query":"go"}}`, sandboxagent.KindToolCall, 2)
	// Exit 0 without turn.completed is not a success.
	if _, err := p.Finish(0, nil); err == nil {
		t.Error("Finish without turn.completed succeeded")
	}

	// A resume that started another thread is an error.
	p = newExecParser(sandboxagent.Turn{Prompt: "p", SessionID: "01a226c8-667d-7f42-ab84-674eb9e97950"})
	p.Parse([]byte(`{"type":"thread.started","thread_id":"01a226c1-d5e3-7d71-a6ee-d20a7417ddc5"}`))
	p.Parse([]byte(`{"type":"turn.completed","usage":{"input_tokens":1}}`))
	if _, err := p.Finish(0, nil); err == nil || !strings.Contains(err.Error(), "new session") {
		t.Errorf("resume mismatch: %v", err)
	}

	// A crash: non-zero exit, stderr only.
	p = newExecParser(sandboxagent.Turn{Prompt: "p"})
	_, err := p.Finish(101, []byte("thread 'main' panicked at x.rs:1\nnote: run with RUST_BACKTRACE=1\n"))
	var de *sandboxagent.DriverError
	if !errors.As(err, &de) || de.ExitCode != 101 || de.Message != "note: run with RUST_BACKTRACE=1" {
		t.Errorf("crash: %#v", err)
	}
}
