package claude

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
)

func TestParserGolden(t *testing.T) {
	drivertest.CheckGolden(t, New(Options{}), []drivertest.ParserCase{
		{Name: "ref-stream"},
		{Name: "ref-stream-401", Exit: 1},
		{Name: "ref-stream-partial"},
		{Name: "ref-stream-permission-denied"},
		{Name: "fake-shell-done"}, // captured by the integration test (-capture)
		{Name: "fake-401-agent", Exit: 1},
		{Name: "fake-shell-write-done"},
		{Name: "fake-401", Exit: 1},
		{Name: "fake-connrefused", Exit: 1},
		{Name: "fake-resume"},
		{Name: "fake-resume-unknown", Exit: 1}, // with fake-resume-unknown.stderr
	})
}

// The golden files are reviewed by hand; these assertions pin what matters
// so a careless -update cannot bless a regression.
func TestParserShellWriteDone(t *testing.T) {
	g := drivertest.ParseFile(t, New(Options{}), "fake-shell-write-done.jsonl", 0, nil)
	if g.Error != nil || g.Reply != "DONE" {
		t.Fatalf("reply %q error %+v", g.Reply, g.Error)
	}
	if g.Events[0].Kind != sandboxagent.KindSession || g.Events[0].SessionID == "" || g.SessionID != g.Events[0].SessionID {
		t.Fatalf("first event %+v, session %q", g.Events[0], g.SessionID)
	}
	var kinds []string
	calls := map[string]sandboxagent.Payload{}
	for _, ev := range g.Events {
		kinds = append(kinds, string(ev.Kind))
		switch ev.Kind {
		case sandboxagent.KindToolCall:
			calls[ev.Payload.CallID] = ev.Payload
		case sandboxagent.KindToolResult:
			call, ok := calls[ev.Payload.CallID]
			if !ok {
				t.Errorf("tool_result %s before its call", ev.Payload.CallID)
			}
			if call.Tool == "Bash" && ev.Payload.ExitCode == nil {
				t.Errorf("Bash result without exit code: %+v", ev.Payload)
			}
		case sandboxagent.KindThinking:
			if ev.Payload.Text != "Let me run the command first." {
				t.Errorf("thinking %q", ev.Payload.Text)
			}
		}
	}
	want := "session thinking text tool_call tool_result tool_call tool_result tool_call tool_result text usage"
	if got := strings.Join(kinds, " "); got != want {
		t.Errorf("kinds\n got %s\nwant %s", got, want)
	}
	var shell, fail, write *drivertest.GoldenEvent
	for i := range g.Events {
		ev := &g.Events[i]
		switch {
		case ev.Kind == sandboxagent.KindToolCall && ev.Payload.Command == "echo hi > /tmp/out.txt":
			shell = ev
		case ev.Kind == sandboxagent.KindToolResult && ev.Payload.IsError:
			fail = ev
		case ev.Kind == sandboxagent.KindToolCall && ev.Payload.Tool == "Write":
			write = ev
		}
	}
	if shell == nil || shell.Payload.Tool != "Bash" || !json.Valid(shell.Payload.Input) || !strings.Contains(string(shell.Payload.Input), `"command"`) {
		t.Errorf("shell call %+v", shell)
	}
	if fail == nil || fail.Payload.ExitCode == nil || *fail.Payload.ExitCode != 2 || !strings.Contains(fail.Payload.Output, "No such file") {
		t.Errorf("failed shell result %+v", fail)
	}
	if write == nil || write.Payload.Path != "/tmp/a.py" {
		t.Errorf("write call %+v", write)
	}
	last := g.Events[len(g.Events)-1].Payload
	if last.InputTokens == 0 || last.OutputTokens == 0 || last.CostUSD == 0 || last.Cumulative {
		t.Errorf("usage %+v", last)
	}
}

func TestParser401(t *testing.T) {
	for _, f := range []string{"fake-401.jsonl", "ref-stream-401.jsonl"} {
		g := drivertest.ParseFile(t, New(Options{}), f, 1, []byte("  \n"))
		if g.Error == nil || g.Error.Status != 401 || g.Error.ExitCode != 1 || g.Error.Message == "" || strings.Contains(g.Error.Message, "\n") {
			t.Errorf("%s: error %+v", f, g.Error)
		}
		if g.Reply != "" {
			t.Errorf("%s: reply %q on error", f, g.Reply)
		}
		retries := 0
		for _, ev := range g.Events {
			if ev.Kind == sandboxagent.KindError && !ev.Payload.IsError {
				retries++
			}
			if ev.Kind == sandboxagent.KindText {
				t.Errorf("%s: the synthetic error message became text: %+v", f, ev)
			}
		}
		if retries == 0 {
			t.Errorf("%s: no retry events", f)
		}
	}
}

func TestParserErrors(t *testing.T) {
	// Unknown session: the result line's errors, the stderr.
	stderr, _ := os.ReadFile("testdata/fake-resume-unknown.stderr")
	g := drivertest.ParseFile(t, New(Options{}), "fake-resume-unknown.jsonl", 1, stderr)
	if g.Error == nil || !strings.Contains(g.Error.Message, "No conversation found") || g.Error.Stderr == "" {
		t.Errorf("unknown session: %+v", g.Error)
	}
	// Connection refused: no HTTP status.
	g = drivertest.ParseFile(t, New(Options{}), "fake-connrefused.jsonl", 1, nil)
	if g.Error == nil || g.Error.Status != 0 || !strings.Contains(g.Error.Message, "ECONNREFUSED") {
		t.Errorf("connection refused: %+v", g.Error)
	}

	p := New(Options{}).NewParser(sandboxagent.Turn{})
	// Garbage and unknown lines are kept as raw events.
	for _, l := range []string{"not json", `{"type":"mystery","x":1}`, `{"type":"system","subtype":"compact_boundary"}`, `{"type":"assistant","message":{"content":[{"type":"hologram"}]}}`} {
		evs := p.Parse([]byte(l))
		if len(evs) == 0 || evs[len(evs)-1].Kind != sandboxagent.KindRaw || evs[len(evs)-1].Payload.Raw != l {
			t.Errorf("%s → %+v", l, evs)
		}
	}
	if evs := p.Parse([]byte("  ")); len(evs) != 0 {
		t.Errorf("blank line → %+v", evs)
	}
	// Crash: no result, non-zero exit, stderr.
	_, err := p.Finish(3, []byte("\nSegmentation fault\nmore\n"))
	var de *sandboxagent.DriverError
	if !errors.As(err, &de) || de.Message != "Segmentation fault" || de.ExitCode != 3 || de.Stderr != "Segmentation fault\nmore" {
		t.Errorf("crash: %#v", err)
	}
	// No result at exit 0.
	p = New(Options{}).NewParser(sandboxagent.Turn{})
	if _, err := p.Finish(0, nil); !errors.As(err, &de) {
		t.Errorf("no result: %v", err)
	}
	// is_error with subtype success.
	p = New(Options{}).NewParser(sandboxagent.Turn{})
	p.Parse([]byte(`{"type":"result","subtype":"success","is_error":true,"result":"boom\nsecond","session_id":"s"}`))
	if _, err := p.Finish(0, nil); !errors.As(err, &de) || de.Message != "boom second" {
		t.Errorf("is_error success: %v", err)
	}
	// A success result but a non-zero exit.
	p = New(Options{}).NewParser(sandboxagent.Turn{})
	p.Parse([]byte(`{"type":"result","subtype":"success","is_error":false,"result":"ok"}`))
	if out, err := p.Finish(1, nil); !errors.As(err, &de) || out.Reply != "ok" {
		t.Errorf("exit 1 after success: %v %+v", err, out)
	}
}

func TestParserPartial(t *testing.T) {
	g := drivertest.ParseFile(t, New(Options{}), "ref-stream-partial.jsonl", 0, nil)
	var deltas, whole strings.Builder
	for _, ev := range g.Events {
		if ev.Kind == sandboxagent.KindText {
			if ev.Payload.Delta {
				deltas.WriteString(ev.Payload.Text)
			} else {
				whole.WriteString(ev.Payload.Text)
			}
		}
	}
	if deltas.Len() == 0 || deltas.String() != whole.String() {
		t.Errorf("deltas %q, whole blocks %q", deltas.String(), whole.String())
	}
}

func TestParserPermissionDenied(t *testing.T) {
	g := drivertest.ParseFile(t, New(Options{}), "ref-stream-permission-denied.jsonl", 0, nil)
	var denied, result bool
	for _, ev := range g.Events {
		if ev.Kind == sandboxagent.KindError && ev.Payload.Tool == "Bash" && ev.Payload.CallID != "" && ev.Payload.Text != "" {
			denied = true
		}
		if ev.Kind == sandboxagent.KindToolResult && ev.Payload.IsError {
			result = true
		}
	}
	if !denied || !result || g.Error != nil {
		t.Errorf("denied %v, error result %v, err %+v", denied, result, g.Error)
	}
}
