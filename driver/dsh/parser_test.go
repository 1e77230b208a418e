package dsh

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
)

// exitLine is the wrapper's last line for dsh's stdout and exit code.
func exitLine(stdout string, code int) []byte {
	b, _ := json.Marshal(map[string]any{"type": exitType, "code": code, "stdout": stdout})
	return append(b, '\n')
}

// continuedSession is the session fake-continue.jsonl continued.
const continuedSession = "session-24229c78-c61a-4177-a978-156cef0900c2"

// parserCases are the captured turns: the wrapper's stdout
// (testdata/<name>.jsonl) or, for the reference captures made without the
// wrapper, the session log (<name>.session.jsonl) plus dsh's stdout
// (<name>.stdout); with the exit code and stderr (<name>.stderr).
func parserCases(t *testing.T) []drivertest.ParserCase {
	ref := func(name string, exit int) drivertest.ParserCase {
		out := append(drivertest.Testdata(t, name+".session.jsonl"), exitLine(string(drivertest.Testdata(t, name+".stdout")), exit)...)
		return drivertest.ParserCase{Name: name, Exit: exit, Stdout: out}
	}
	return []drivertest.ParserCase{
		// Reference captures (dsh run by hand, see /work/shared/reference).
		ref("ref-shell-done", 0),
		ref("ref-401", 1),
		// Captured from the driver's own wrapper in the real image against
		// the fake model (dsh_integration_test.go, -capture).
		{Name: "fake-shell-done"},
		{Name: "fake-401", Exit: 1},
		{Name: "fake-continue", Resume: continuedSession},
		{Name: "fake-500-recover"},
		{Name: "fake-write-thinking"},
		{Name: "fake-failing-command"},
	}
}

// output is a case's stdout.
func output(t *testing.T, c drivertest.ParserCase) []byte {
	if c.Stdout != nil {
		return c.Stdout
	}
	return drivertest.Testdata(t, c.Name+".jsonl")
}

// runCase runs a fresh parser over a case.
func runCase(t *testing.T, c drivertest.ParserCase) drivertest.Golden {
	t.Helper()
	return drivertest.ParseCase(t, New(Options{}), c)
}

func TestParserGolden(t *testing.T) {
	drivertest.CheckGolden(t, New(Options{}), parserCases(t))
}

// TestParserReference checks the reference capture's meaning directly, so
// the golden file cannot silently encode a wrong reading.
func TestParserReference(t *testing.T) {
	c := parserCases(t)[0]
	g := drivertest.Parse(t, New(Options{}).NewParser(sandboxagent.Turn{Prompt: "x"}), c.Stdout, 0, nil)
	if g.Error != nil {
		t.Fatalf("error %+v", g.Error)
	}
	if g.Reply != "DONE" || g.SessionID != "session-44afc5e6-ddfd-4bdc-98d0-2ab7856d202c" {
		t.Errorf("reply %q session %q", g.Reply, g.SessionID)
	}
	count := map[sandboxagent.EventKind]int{}
	var call, result *drivertest.GoldenEvent
	var text, thinking, deltaText string
	for i, ev := range g.Events {
		count[ev.Kind]++
		switch ev.Kind {
		case sandboxagent.KindToolCall:
			call = &g.Events[i]
		case sandboxagent.KindToolResult:
			result = &g.Events[i]
		case sandboxagent.KindText:
			if ev.Payload.Delta {
				deltaText += ev.Payload.Text
			} else {
				text += ev.Payload.Text
			}
		case sandboxagent.KindThinking:
			if !ev.Payload.Delta {
				thinking += ev.Payload.Text
			}
		case sandboxagent.KindRaw:
			t.Errorf("raw event for line %d: %.200s", ev.Line, ev.Payload.Raw)
		}
	}
	if g.Events[0].Kind != sandboxagent.KindSession || g.Events[0].SessionID != g.SessionID || g.Events[0].Line != 1 {
		t.Errorf("first event %+v", g.Events[0])
	}
	if call == nil || call.Payload.Tool != "bash" || call.Payload.Command != "echo hi > /tmp/out.txt" || call.Payload.CallID != "call_mock_1" {
		t.Fatalf("tool_call %+v", call)
	}
	var in map[string]string
	if err := json.Unmarshal(call.Payload.Input, &in); err != nil || in["description"] != "Write hi to /tmp/out.txt" {
		t.Errorf("input %s: %v", call.Payload.Input, err)
	}
	if result == nil || result.Payload.CallID != "call_mock_1" || result.Payload.Output != "(no output)" ||
		result.Payload.ExitCode == nil || *result.Payload.ExitCode != 0 || result.Payload.IsError || result.Line <= call.Line {
		t.Errorf("tool_result %+v", result)
	}
	if text != "DONE" || deltaText != "DONE" {
		t.Errorf("text %q, deltas %q", text, deltaText)
	}
	if thinking != "Thinking about the task.Thinking about the task." {
		t.Errorf("thinking %q", thinking)
	}
	if count[sandboxagent.KindUsage] != 2 || count[sandboxagent.KindError] != 0 {
		t.Errorf("counts %v", count)
	}
	for _, ev := range g.Events {
		if ev.Kind == sandboxagent.KindUsage && (ev.Payload.InputTokens == 0 || ev.Payload.OutputTokens != 10 || ev.Payload.CacheReadTokens != 20 || ev.Payload.ReasoningTokens != 3 || ev.Payload.Cumulative) {
			t.Errorf("usage %+v", ev.Payload)
		}
	}
}

func TestParserReference401(t *testing.T) {
	g := runCase(t, parserCases(t)[1])
	if g.Error == nil {
		t.Fatal("no error")
	}
	e := g.Error
	if e.Status != 401 || e.ExitCode != 1 || e.Message != "AUTH: Incorrect API key provided: sk-bad. (mock)" ||
		e.Stderr != "dsh: AUTH: Incorrect API key provided: sk-bad. (mock)" {
		t.Errorf("error %+v", e)
	}
	if g.Reply != "" || g.SessionID != "session-207ebec6-cd72-491e-be52-4e0359ee50cb" {
		t.Errorf("reply %q session %q", g.Reply, g.SessionID)
	}
	var errs int
	for _, ev := range g.Events {
		if ev.Kind == sandboxagent.KindError {
			errs++
			if !strings.Contains(ev.Payload.Text, "AUTH") || !ev.Payload.IsError {
				t.Errorf("error event %+v", ev)
			}
		}
	}
	if errs != 1 {
		t.Errorf("%d error events", errs)
	}
}

func TestParserOddLines(t *testing.T) {
	p := New(Options{}).NewParser(sandboxagent.Turn{Prompt: "x"})
	for _, l := range []string{
		`not json`,
		`{"type":"future/thing","seq":3,"time":1,"data":{}}`,
		`{"type":"assistant/chunk","seq":4,"time":1,"data":{"chunk":{"type":"new-chunk"}}}`,
		`{"type":"tool/call","seq":5,"time":1,"data":{"name":""}}`,
		`{"type":"sandbox-agent/exit"}`,
		`[1,2]`,
	} {
		evs := p.Parse([]byte(l))
		if len(evs) != 1 || evs[0].Kind != sandboxagent.KindRaw || evs[0].Payload.Raw != l {
			t.Errorf("%s → %+v", l, evs)
		}
	}
	if evs := p.Parse([]byte(`{"type":"step/start","seq":6,"time":1,"data":{"turn":1,"step":1}}`)); len(evs) != 0 {
		t.Errorf("quiet line gave %+v", evs)
	}
	if evs := p.Parse(nil); len(evs) != 0 {
		t.Errorf("empty line gave %+v", evs)
	}
	// Broken tool arguments are kept as a JSON string.
	evs := p.Parse([]byte(`{"type":"tool/call","seq":7,"time":1,"data":{"callId":"c1","name":"write","arguments":"{\"file_path\": \"/x"}}`))
	if len(evs) != 1 || evs[0].Kind != sandboxagent.KindToolCall || string(evs[0].Payload.Input) != `"{\"file_path\": \"/x"` {
		t.Errorf("broken args → %+v", evs)
	}
	evs = p.Parse([]byte(`{"type":"tool/call","seq":8,"time":1,"data":{"callId":"c2","name":"write","arguments":"{\"file_path\":\"/tmp/a.py\",\"content\":\"x\"}"}}`))
	if len(evs) != 1 || evs[0].Payload.Path != "/tmp/a.py" || evs[0].Payload.Command != "" {
		t.Errorf("write → %+v", evs)
	}
}

func TestFinishCrash(t *testing.T) {
	// dsh died before writing a session (a boot failure): the wrapper's
	// exit line carries its code, stderr the reason.
	p := New(Options{}).NewParser(sandboxagent.Turn{Prompt: "x"})
	p.Parse([]byte(`{"type":"sandbox-agent/exit","code":1,"stdout":"","error":"dsh wrote no session log for session-x"}`))
	_, err := p.Finish(1, []byte("Error: something broke\n    at boot\n"))
	var de *sandboxagent.DriverError
	if !errors.As(err, &de) || de.ExitCode != 1 || de.Message != "Error: something broke" || de.Stderr != "Error: something broke\n    at boot" {
		t.Fatalf("%#v", err)
	}
	// Killed by a signal with no output at all.
	p = New(Options{}).NewParser(sandboxagent.Turn{Prompt: "x"})
	_, err = p.Finish(137, nil)
	if !errors.As(err, &de) || de.ExitCode != 137 || de.Message != "dsh exited before its turn ended" {
		t.Fatalf("%#v", err)
	}
	// A clean exit without a completed turn still fails.
	p = New(Options{}).NewParser(sandboxagent.Turn{Prompt: "x"})
	p.Parse([]byte(`{"type":"sandbox-agent/exit","code":0,"stdout":"hi\n","error":"dsh wrote no session log for session-x"}`))
	res, err := p.Finish(0, nil)
	if !errors.As(err, &de) || res.Reply != "hi" || !strings.Contains(de.Message, "no session log") {
		t.Fatalf("%#v %#v", res, err)
	}
	// A boot failure: Node's report of an uncaught error.
	p = New(Options{}).NewParser(sandboxagent.Turn{Prompt: "x"})
	_, err = p.Finish(1, drivertest.Testdata(t, "boot-failure.stderr"))
	if !errors.As(err, &de) || !strings.HasPrefix(de.Message, "plugin tree failed to load: ") || !strings.Contains(de.Message, "(mode 644)") {
		t.Fatalf("%#v", err)
	}
	p = New(Options{}).NewParser(sandboxagent.Turn{Prompt: "x"})
	_, err = p.Finish(1, []byte("file:///x.js:3\n  throw x\n\nTypeError: x is not a function\n    at y\n"))
	if !errors.As(err, &de) || de.Message != "TypeError: x is not a function" {
		t.Fatalf("%#v", err)
	}
	// dsh's own failure line wins over the rest of stderr.
	p = New(Options{}).NewParser(sandboxagent.Turn{Prompt: "x"})
	_, err = p.Finish(1, []byte("warning: x\ndsh: MISSING_CREDENTIAL: no key\n"))
	if !errors.As(err, &de) || de.Message != "MISSING_CREDENTIAL: no key" {
		t.Fatalf("%#v", err)
	}
}

// TestParserFakeCaptures checks the meaning of the captures made with the
// driver's own wrapper against the fake model.
func TestParserFakeCaptures(t *testing.T) {
	find := func(g drivertest.Golden, kind sandboxagent.EventKind, delta bool) []drivertest.GoldenEvent {
		var out []drivertest.GoldenEvent
		for _, ev := range g.Events {
			if ev.Kind == kind && ev.Payload.Delta == delta {
				out = append(out, ev)
			}
		}
		return out
	}
	byName := map[string]drivertest.ParserCase{}
	for _, c := range parserCases(t) {
		byName[c.Name] = c
	}
	run := func(name string) drivertest.Golden {
		c := byName[name]
		return runCase(t, c)
	}

	g := run("fake-401")
	if g.Error == nil || g.Error.Status != 401 || g.Error.ExitCode != 1 || !strings.HasPrefix(g.Error.Message, "AUTH: 401") || !strings.HasPrefix(g.Error.Stderr, "dsh: AUTH: 401") {
		t.Errorf("401: %+v", g.Error)
	}
	if n := len(find(g, sandboxagent.KindUsage, false)); n != 0 {
		t.Errorf("401: %d usage events for a failed request", n)
	}

	g = run("fake-500-recover")
	errs := find(g, sandboxagent.KindError, false)
	if g.Error != nil || g.Reply != "RECOVERED" || len(errs) != 1 || !strings.Contains(errs[0].Payload.Text, "SERVER: 500") || !strings.Contains(errs[0].Payload.Text, "retry 1/5") || errs[0].Payload.IsError {
		t.Errorf("500 then ok: %+v %q %+v", g.Error, g.Reply, errs)
	}

	g = run("fake-write-thinking")
	calls, results := find(g, sandboxagent.KindToolCall, false), find(g, sandboxagent.KindToolResult, false)
	think := find(g, sandboxagent.KindThinking, false)
	if len(calls) != 1 || calls[0].Payload.Tool != "write" || calls[0].Payload.Path != "/tmp/a.py" || len(results) != 1 || results[0].Payload.CallID != calls[0].Payload.CallID || results[0].Payload.ExitCode != nil {
		t.Errorf("write: %+v %+v", calls, results)
	}
	if len(think) != 2 || think[0].Payload.Text != "I should write the file." || g.Reply != "WROTE" {
		t.Errorf("thinking %+v reply %q", think, g.Reply)
	}

	g = run("fake-failing-command")
	results = find(g, sandboxagent.KindToolResult, false)
	if len(results) != 1 || results[0].Payload.ExitCode == nil || *results[0].Payload.ExitCode != 3 || !results[0].Payload.IsError || !strings.Contains(results[0].Payload.Output, "oops") {
		t.Errorf("failing command: %+v", results)
	}

	g = run("fake-continue")
	sessions := find(g, sandboxagent.KindSession, false)
	if g.Error != nil || g.Reply != "PINEAPPLE-42" || g.SessionID != continuedSession || len(sessions) != 1 || sessions[0].SessionID != continuedSession {
		t.Errorf("continue: %+v %q %q %+v", g.Error, g.Reply, g.SessionID, sessions)
	}

	// Every capture: no raw events, the last line announces the session.
	for _, c := range parserCases(t) {
		g := runCase(t, c)
		for _, ev := range g.Events {
			if ev.Kind == sandboxagent.KindRaw {
				t.Errorf("%s: raw line %d: %.120s", c.Name, ev.Line, ev.Payload.Raw)
			}
		}
		if c.Stdout == nil { // the wrapper's output
			last := g.Events[len(g.Events)-1]
			if n := bytes.Count(output(t, c), []byte("\n")); last.Kind != sandboxagent.KindSession || last.Line != n {
				t.Errorf("%s: last event %+v, %d lines", c.Name, last, n)
			}
		}
	}
}
