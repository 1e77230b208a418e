package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/term"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/termsafe"
)

// progress prints one line per event of a running turn for a person
// watching a terminal: elapsed time, then what happened. Everything in an
// event came out of the sandbox, so it is made one printable line (no
// terminal escapes) and cut short.
type progress struct {
	w     io.Writer
	start time.Time
	now   func() time.Time
	width int // of an event's text
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, start: time.Now(), now: time.Now, width: 100}
}

// event prints e's line, if it has one worth a line.
func (p *progress) event(e sandboxagent.Event) {
	pl := e.Payload
	var line string
	switch e.Kind {
	case sandboxagent.KindSession:
		line = "session " + p.clean(e.SessionID)
	case sandboxagent.KindToolCall:
		line = "tool    " + p.clean(pl.Tool)
		switch {
		case pl.Command != "":
			line += ": " + p.clean(pl.Command)
		case pl.Path != "":
			line += ": " + p.clean(pl.Path)
		}
	case sandboxagent.KindToolResult:
		line = "result  " + p.clean(pl.Tool)
		switch {
		case pl.ExitCode != nil:
			line += fmt.Sprintf(": exit %d", *pl.ExitCode)
		case pl.IsError:
			line += ": failed"
		default:
			line += ": ok"
		}
		if pl.IsError && pl.Output != "" {
			line += " (" + p.clean(pl.Output) + ")"
		}
	case sandboxagent.KindText, sandboxagent.KindThinking:
		if pl.Delta || strings.TrimSpace(pl.Text) == "" {
			return // fragments: one line each would flood the terminal
		}
		line = fmt.Sprintf("%-7s %s", e.Kind, p.clean(pl.Text))
	case sandboxagent.KindUsage:
		line = fmt.Sprintf("tokens  in %d, out %d", pl.InputTokens, pl.OutputTokens)
		if pl.CacheReadTokens > 0 {
			line += fmt.Sprintf(", cache read %d", pl.CacheReadTokens)
		}
		if pl.CostUSD > 0 {
			line += fmt.Sprintf(", $%.4f", pl.CostUSD)
		}
		if pl.Cumulative {
			line += " (session)"
		}
	case sandboxagent.KindError:
		line = "error   " + p.clean(pl.Text)
	case sandboxagent.KindEgressDenied:
		line = "denied  " + p.clean(pl.Host)
	case sandboxagent.KindDone:
		line = "done"
	default:
		return // raw lines are in the audit trail
	}
	fmt.Fprintf(p.w, "%7.1fs  %s\n", p.now().Sub(p.start).Seconds(), line)
}

// clean makes s one short line: runs of white space become one space, at
// most p.width characters are kept, and what a terminal would act on is
// shown escaped (termsafe), not dropped, so the reader sees it was there.
func (p *progress) clean(s string) string {
	var b strings.Builder
	n := 0
	space := false
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		raw := s[i : i+size] // an invalid byte stays itself, for Line to show
		i += size
		if unicode.IsSpace(r) {
			space = b.Len() > 0
			continue
		}
		if space {
			if n++; n > p.width {
				break
			}
			b.WriteByte(' ')
			space = false
		}
		if n++; n > p.width {
			b.WriteString("…")
			break
		}
		b.WriteString(raw)
	}
	return termsafe.Line(b.String())
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
