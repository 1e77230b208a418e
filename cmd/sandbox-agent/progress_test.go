package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

func TestProgressLines(t *testing.T) {
	zero, one := 0, 1
	for _, tc := range []struct {
		name string
		ev   sandboxagent.Event
		want string // "" = no line
	}{
		{"session", sandboxagent.Event{Kind: sandboxagent.KindSession, SessionID: "ses_1"}, "session ses_1"},
		{"shell call", sandboxagent.Event{Kind: sandboxagent.KindToolCall, Payload: sandboxagent.Payload{Tool: "bash", Command: "echo hi\nls"}}, "tool    bash: echo hi ls"},
		{"file call", sandboxagent.Event{Kind: sandboxagent.KindToolCall, Payload: sandboxagent.Payload{Tool: "write", Path: "/tmp/a"}}, "tool    write: /tmp/a"},
		{"result exit 0", sandboxagent.Event{Kind: sandboxagent.KindToolResult, Payload: sandboxagent.Payload{Tool: "bash", ExitCode: &zero, Output: "lots"}}, "result  bash: exit 0"},
		{"result failed", sandboxagent.Event{Kind: sandboxagent.KindToolResult, Payload: sandboxagent.Payload{Tool: "bash", ExitCode: &one, IsError: true, Output: "no such file"}}, "result  bash: exit 1 (no such file)"},
		{"result no code", sandboxagent.Event{Kind: sandboxagent.KindToolResult, Payload: sandboxagent.Payload{Tool: "read"}}, "result  read: ok"},
		{"text", sandboxagent.Event{Kind: sandboxagent.KindText, Payload: sandboxagent.Payload{Text: "DONE\n\nfine"}}, "text    DONE fine"},
		{"text delta", sandboxagent.Event{Kind: sandboxagent.KindText, Payload: sandboxagent.Payload{Text: "DO", Delta: true}}, ""},
		{"usage", sandboxagent.Event{Kind: sandboxagent.KindUsage, Payload: sandboxagent.Payload{InputTokens: 10, OutputTokens: 2, CostUSD: 0.5}}, "tokens  in 10, out 2, $0.5000"},
		{"cumulative usage", sandboxagent.Event{Kind: sandboxagent.KindUsage, Payload: sandboxagent.Payload{InputTokens: 10, OutputTokens: 2, Cumulative: true}}, "tokens  in 10, out 2 (session)"},
		{"error", sandboxagent.Event{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: "HTTP 401"}}, "error   HTTP 401"},
		{"raw", sandboxagent.Event{Kind: sandboxagent.KindRaw, Payload: sandboxagent.Payload{Raw: "x"}}, ""},
		{"done", sandboxagent.Event{Kind: sandboxagent.KindDone}, "done"},
		// Hostile output: escapes and control characters never reach
		// the terminal; they are shown escaped.
		{"escapes", sandboxagent.Event{Kind: sandboxagent.KindToolCall, Payload: sandboxagent.Payload{Tool: "bash\x1b[2J", Command: "echo \x1b]0;owned\x07\r\x00x"}}, `tool    bash\x1b[2J: echo \x1b]0;owned\x07 \x00x`},
		{"C1, bidi, invalid UTF-8", sandboxagent.Event{Kind: sandboxagent.KindText, Payload: sandboxagent.Payload{Text: "a\u009b2J \x9b2J \u202eexe.txt \xff"}}, `text    a\u009b2J \x9b2J \u202eexe.txt \xff`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			p := newProgress(&buf)
			p.now = func() time.Time { return p.start.Add(1500 * time.Millisecond) }
			p.event(tc.ev)
			got := buf.String()
			if tc.want == "" {
				if got != "" {
					t.Errorf("got %q, want no line", got)
				}
				return
			}
			if want := "    1.5s  " + tc.want + "\n"; got != want {
				t.Errorf("got  %q\nwant %q", got, want)
			}
		})
	}
}

func TestProgressCutsLongText(t *testing.T) {
	var buf bytes.Buffer
	p := newProgress(&buf)
	p.event(sandboxagent.Event{Kind: sandboxagent.KindText, Payload: sandboxagent.Payload{Text: strings.Repeat("é", 500)}})
	if n := len([]rune(buf.String())); n > 130 || !strings.Contains(buf.String(), "…") {
		t.Errorf("%d runes: %q", n, buf.String())
	}
}

func TestIsTerminal(t *testing.T) {
	if isTerminal(&bytes.Buffer{}) {
		t.Error("a buffer is a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Error("a file is a terminal")
	}
	if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
		defer null.Close()
		if isTerminal(null) {
			t.Error("/dev/null is a terminal")
		}
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		if !isTerminal(tty) {
			t.Error("/dev/tty is not a terminal")
		}
	}
}
