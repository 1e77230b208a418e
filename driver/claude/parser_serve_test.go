package claude

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
)

// serveTurn is what one turn of a long-lived capture must parse to.
type serveTurn struct {
	reply  string  // "" with err
	err    string  // in the DriverError's message ("" = none)
	status int     // the DriverError's HTTP status
	cost   float64 // the turn's usage cost (0: no usage event)
	kinds  string  // the events' kinds ("" = not checked)
}

// The captures in testdata/serve are the raw stdout of one real long-lived
// CLI (claude 2.1.332, ServeCommand's flags, the fake model), several
// turns each: recorded with the user messages of TurnInput and the
// interrupt of AbortInput written to its stdin; <name>-<turn>.stderr is
// what it printed on stderr during that turn.
var serveCases = []struct {
	name   string
	resume string // the session it was started on
	turns  []serveTurn
}{
	{name: "two-turns", turns: []serveTurn{
		{reply: "ONE", cost: 0.024478, kinds: "session text usage"},
		// total_cost_usd is 0.049008 here: the process's, not the turn's.
		{reply: "TWO", cost: 0.02453, kinds: "session text usage"},
	}},
	{name: "tools", turns: []serveTurn{
		{reply: "DONE", cost: 0.09974, kinds: "session thinking tool_call tool_result tool_call tool_result tool_call tool_result text usage"},
		{reply: "SECOND", cost: 0.02513, kinds: "session text usage"},
	}},
	// Started with --resume: total_cost_usd counts the session's earlier
	// turns (restored from the transcript).
	{name: "resumed", resume: "73b40585-e091-4a7a-bfeb-e08798ba48f8", turns: []serveTurn{
		{reply: "RESUMED", cost: 0.025184, kinds: "session text usage"},
	}},
	// Interrupted in a tool call (tail -f /dev/null): control_response,
	// system/task_* and the CLI's "[Request interrupted ...]" note make no
	// event; the result line ends the turn; the next turn answers.
	{name: "interrupt", turns: []serveTurn{
		{err: "interrupted (aborted_tools)", cost: 0.024682, kinds: "session tool_call tool_result usage"},
		{reply: "AFTER-ABORT", cost: 0.024998, kinds: "session text usage"},
	}},
	// Interrupted before the model answered; a second interrupt while no
	// turn ran (its control_response reaches the next turn's parser).
	{name: "interrupt-early", turns: []serveTurn{
		{err: "interrupted (aborted_streaming)", kinds: "session"},
		{reply: "ONE", cost: 0.024528, kinds: "session text usage"},
	}},
	// A rejected key: each turn retries, fails with its result line, and
	// the process lives on.
	{name: "bad-key", turns: []serveTurn{
		{err: "401", status: 401, kinds: "session error error error"},
		{err: "401", status: 401, kinds: "session error error error"},
	}},
	// An unknown session: the result line comes at once (before any
	// input is read), then the process exits 1.
	{name: "resume-unknown", resume: sessA, turns: []serveTurn{
		{err: "No conversation found with session ID: " + sessA},
	}},
}

// splitTurns feeds a long-lived capture to one parser per turn, as the
// agent does: a turn's lines go to its parser until Ended; the next turn's
// parser starts on the session the last one named. It checks that Ended
// is false before the result line and true at it, and that no line is
// left over.
func splitTurns(t *testing.T, d *Driver, name, resume string) (turns [][]byte, parsed []drivertest.Golden) {
	t.Helper()
	raw := drivertest.Testdata(t, "serve/"+name+".jsonl")
	session := resume
	var cur []byte
	p := d.NewParser(sandboxagent.Turn{Prompt: "p", SessionID: session})
	for i, l := range bytes.SplitAfter(raw, []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		cur = append(cur, l...)
		p.Parse(bytes.TrimSuffix(l, []byte("\n")))
		ended, settle := p.(sandboxagent.TurnEnder).Ended()
		isResult := bytes.Contains(l, []byte(`"type":"result"`))
		if ended != isResult || settle != 0 {
			t.Fatalf("line %d: Ended() = %v, %v; result line %v", i+1, ended, settle, isResult)
		}
		if !ended {
			continue
		}
		// The turn again through a fresh parser, as the golden files
		// hold it.
		stderr, _ := os.ReadFile(fmt.Sprintf("testdata/serve/%s-%d.stderr", name, len(turns)+1))
		g := drivertest.Parse(t, d.NewParser(sandboxagent.Turn{Prompt: "p", SessionID: session}), cur, 0, stderr)
		turns, parsed = append(turns, cur), append(parsed, g)
		if g.SessionID != "" {
			session = g.SessionID
		}
		cur = nil
		p = d.NewParser(sandboxagent.Turn{Prompt: "p", SessionID: session})
	}
	if len(cur) != 0 {
		t.Fatalf("lines after the last result line: %s", cur)
	}
	return turns, parsed
}

func TestParserServe(t *testing.T) {
	d := New(Options{})
	for _, c := range serveCases {
		t.Run(c.name, func(t *testing.T) {
			turns, parsed := splitTurns(t, d, c.name, c.resume)
			if len(parsed) != len(c.turns) {
				t.Fatalf("%d turns, want %d", len(parsed), len(c.turns))
			}
			session := c.resume
			for i, want := range c.turns {
				g := parsed[i]
				var kinds []string
				var cost float64
				for _, ev := range g.Events {
					kinds = append(kinds, string(ev.Kind))
					if ev.Kind == sandboxagent.KindRaw {
						t.Errorf("turn %d: raw event %s", i+1, ev.Payload.Raw)
					}
					if ev.Kind == sandboxagent.KindUsage {
						cost = ev.Payload.CostUSD
					}
				}
				if want.kinds != "" && strings.Join(kinds, " ") != want.kinds {
					t.Errorf("turn %d: kinds %q, want %q", i+1, strings.Join(kinds, " "), want.kinds)
				}
				if math.Abs(cost-want.cost) > 1e-9 {
					t.Errorf("turn %d: cost %v, want %v", i+1, cost, want.cost)
				}
				switch {
				case want.err == "" && (g.Error != nil || g.Reply != want.reply):
					t.Errorf("turn %d: reply %q, error %+v; want %q", i+1, g.Reply, g.Error, want.reply)
				case want.err != "" && (g.Error == nil || !strings.Contains(g.Error.Message, want.err) || g.Error.Status != want.status || g.Reply != ""):
					t.Errorf("turn %d: reply %q, error %+v; want an error with %q, status %d", i+1, g.Reply, g.Error, want.err, want.status)
				}
				// Every turn is on the one session the process serves.
				if session == "" {
					session = g.SessionID
				}
				if g.SessionID == "" || g.SessionID != session {
					t.Errorf("turn %d: session %q, want %q", i+1, g.SessionID, session)
				}
			}
			// The golden files (go test -run TestParserServe -update
			// rewrites them; review the diff).
			var cases []drivertest.ParserCase
			for i := range turns {
				cases = append(cases, drivertest.ParserCase{Name: fmt.Sprintf("serve/%s-%d", c.name, i+1), Resume: session, Stdout: turns[i]})
			}
			if c.resume == "" {
				cases[0].Resume = ""
			}
			drivertest.CheckGolden(t, d, cases)
		})
	}
}

// TestParserServeUnknownLines: lines of the long-lived mode that carry no
// event, and a refused control request.
func TestParserServeUnknownLines(t *testing.T) {
	p := New(Options{}).NewParser(sandboxagent.Turn{})
	for _, l := range []string{
		`{"type":"keep_alive"}`,
		`{"type":"control_response","response":{"subtype":"success","request_id":"sandbox-agent-interrupt","response":{"still_queued":[]}}}`,
		`{"type":"system","subtype":"task_progress","task_id":"t"}`,
		`{"type":"user","message":{"role":"user","content":[{"type":"text","text":"[Request interrupted by user]"}]}}`,
	} {
		if evs := p.Parse([]byte(l)); len(evs) != 0 {
			t.Errorf("%s → %+v", l, evs)
		}
	}
	evs := p.Parse([]byte(`{"type":"control_response","response":{"subtype":"error","request_id":"r1","error":"no\nturn"}}`))
	if len(evs) != 1 || evs[0].Kind != sandboxagent.KindError || evs[0].Payload.IsError || evs[0].Payload.Text != "claude refused the control request r1: no turn" {
		t.Errorf("refused control request → %+v", evs)
	}
	// User text that is not the interrupt note stays a raw event.
	l := `{"type":"user","message":{"role":"user","content":[{"type":"text","text":"[Request interrupted by user]"},{"type":"text","text":"more"}]}}`
	if evs := p.Parse([]byte(l)); len(evs) != 1 || evs[0].Kind != sandboxagent.KindRaw {
		t.Errorf("%s → %+v", l, evs)
	}
	if ended, _ := p.(sandboxagent.TurnEnder).Ended(); ended {
		t.Error("ended without a result line")
	}
}
