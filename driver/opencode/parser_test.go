package opencode

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
)

// parseFile runs a fresh parser over testdata/name (stdout) with exit and
// stderr.
func parseFile(t *testing.T, name string, exit int, stderr []byte) drivertest.Golden {
	t.Helper()
	p := New(Options{BaseURL: "http://x/v1"}).NewParser(sandboxagent.Turn{Prompt: "p"})
	return drivertest.Parse(t, p, drivertest.Testdata(t, name), exit, stderr)
}

func TestParserGolden(t *testing.T) {
	drivertest.CheckGolden(t, New(Options{BaseURL: "http://x/v1"}), []drivertest.ParserCase{
		{Name: "ref-shell-done"},          // reference capture (mock, --thinking)
		{Name: "ref-401", Exit: 1},        // reference capture, bad key
		{Name: "fake-shell-done"},         // our command against the fake model
		{Name: "fake-401", Exit: 1},       // our command, bad key
		{Name: "fake-write-fail"},         // write tool, failing shell command, text
		{Name: "fake-nosession", Exit: 1}, // unknown --session: no stdout, stderr only
		{Name: "synthetic-odd", Exit: 1},  // hand-written: raw lines, tool error, multi-part reply
	})
}

// TestParserSemantics asserts what the golden files are expected to hold,
// so an -update cannot quietly accept a regression.
func TestParserSemantics(t *testing.T) {
	t.Run("shell", func(t *testing.T) {
		for _, f := range []string{"ref-shell-done.jsonl", "fake-shell-done.jsonl"} {
			g := parseFile(t, f, 0, nil)
			if g.Reply != "DONE" || g.Error != nil || !strings.HasPrefix(g.SessionID, "ses_") {
				t.Fatalf("%s: reply %q session %q err %+v", f, g.Reply, g.SessionID, g.Error)
			}
			kinds := map[sandboxagent.EventKind]int{}
			var call, result *drivertest.GoldenEvent
			for i := range g.Events {
				ev := &g.Events[i]
				kinds[ev.Kind]++
				switch ev.Kind {
				case sandboxagent.KindToolCall:
					call = ev
				case sandboxagent.KindToolResult:
					result = ev
				case sandboxagent.KindRaw:
					t.Errorf("%s: raw event %+v", f, ev)
				}
			}
			if kinds[sandboxagent.KindSession] != 1 || kinds[sandboxagent.KindThinking] != 2 || kinds[sandboxagent.KindText] != 1 || kinds[sandboxagent.KindUsage] != 2 {
				t.Errorf("%s: kinds %v", f, kinds)
			}
			if call == nil || result == nil {
				t.Fatalf("%s: no tool call/result", f)
			}
			if call.Payload.Tool != "bash" || call.Payload.Command != "echo hi > /tmp/out.txt" || call.Payload.CallID == "" ||
				!json.Valid(call.Payload.Input) || !strings.Contains(string(call.Payload.Input), `"command"`) {
				t.Errorf("%s: call %+v", f, call.Payload)
			}
			if result.Payload.CallID != call.Payload.CallID || result.Payload.ExitCode == nil || *result.Payload.ExitCode != 0 ||
				result.Payload.IsError || result.Payload.Output != "(no output)" {
				t.Errorf("%s: result %+v", f, result.Payload)
			}
		}
		g := parseFile(t, "ref-shell-done.jsonl", 0, nil)
		for _, ev := range g.Events {
			if ev.Kind == sandboxagent.KindUsage {
				p := ev.Payload
				if p.InputTokens != 82 && p.InputTokens != 83 || p.OutputTokens != 7 || p.ReasoningTokens != 3 || p.CacheReadTokens != 20 || p.Cumulative {
					t.Errorf("usage %+v", p)
				}
			}
		}
	})
	t.Run("401", func(t *testing.T) {
		for _, f := range []string{"ref-401.jsonl", "fake-401.jsonl"} {
			g := parseFile(t, f, 1, []byte("  \n"))
			if g.Error == nil || g.Error.Status != 401 || g.Error.ExitCode != 1 || !strings.Contains(g.Error.Message, "APIError") || strings.Contains(g.Error.Message, "\n") {
				t.Errorf("%s: error %+v", f, g.Error)
			}
			if len(g.Events) != 2 || g.Events[0].Kind != sandboxagent.KindSession || g.Events[1].Kind != sandboxagent.KindError || !g.Events[1].Payload.IsError {
				t.Errorf("%s: events %+v", f, g.Events)
			}
		}
	})
	t.Run("write-fail", func(t *testing.T) {
		g := parseFile(t, "fake-write-fail.jsonl", 0, nil)
		if g.Reply != "ALL DONE" || g.Error != nil {
			t.Fatalf("reply %q err %+v", g.Reply, g.Error)
		}
		var paths, codes []string
		for _, ev := range g.Events {
			if ev.Kind == sandboxagent.KindToolCall && ev.Payload.Path != "" {
				paths = append(paths, ev.Payload.Tool+":"+ev.Payload.Path)
			}
			if ev.Kind == sandboxagent.KindToolResult && ev.Payload.ExitCode != nil {
				codes = append(codes, fmt.Sprint(*ev.Payload.ExitCode))
			}
		}
		if !reflect.DeepEqual(paths, []string{"write:/tmp/a.py"}) || !reflect.DeepEqual(codes, []string{"2"}) {
			t.Errorf("paths %v codes %v", paths, codes)
		}
	})
	t.Run("no-session", func(t *testing.T) {
		g := parseFile(t, "fake-nosession.jsonl", 1, drivertest.Testdata(t, "fake-nosession.stderr"))
		if g.Error == nil || g.Error.Message != "Error: Session not found" || g.Error.ExitCode != 1 || strings.Contains(g.Error.Stderr, "\x1b") {
			t.Errorf("error %+v", g.Error)
		}
	})
	t.Run("odd", func(t *testing.T) {
		g := parseFile(t, "synthetic-odd.jsonl", 1, nil)
		var raws []string
		for _, ev := range g.Events {
			if ev.Kind == sandboxagent.KindRaw {
				raws = append(raws, ev.Payload.Raw)
			}
			if ev.Kind == sandboxagent.KindThinking {
				t.Errorf("empty reasoning gave %+v", ev)
			}
			if ev.Kind == sandboxagent.KindToolResult && (!ev.Payload.IsError || ev.Payload.Output != "Error: permission denied" || ev.Payload.Path != "/etc/shadow") {
				t.Errorf("tool error %+v", ev.Payload)
			}
		}
		if len(raws) != 2 || raws[0] != "this line is not JSON" || !strings.Contains(raws[1], "something_new") {
			t.Errorf("raw %q", raws)
		}
		if g.Reply != "part one\npart two" {
			t.Errorf("reply %q", g.Reply)
		}
		if g.Error == nil || g.Error.Message != "Unexpected server error. Check server logs for details." || g.Error.Status != 0 {
			t.Errorf("error %+v", g.Error)
		}
	})
}

func TestExitWithoutError(t *testing.T) {
	p := New(Options{BaseURL: "http://x"}).NewParser(sandboxagent.Turn{SessionID: "ses_given"})
	out, err := p.Finish(137, []byte("\x1b[91mkilled\x1b[0m\n"))
	var de *sandboxagent.DriverError
	if !errors.As(err, &de) || de.ExitCode != 137 || de.Message != "killed" || de.Stderr != "killed" {
		t.Fatalf("%+v", err)
	}
	if out.SessionID != "ses_given" {
		t.Errorf("session %q", out.SessionID)
	}
	if _, err := New(Options{BaseURL: "http://x"}).NewParser(sandboxagent.Turn{}).Finish(0, nil); err != nil {
		t.Errorf("clean exit: %v", err)
	}
}
