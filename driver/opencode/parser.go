package opencode

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

// Parser maps `opencode run --format json` lines to events. Each line is
// {"type", "timestamp", "sessionID", "part"|"error"}:
//
//   - step_start: no event (the first line carrying a session id gives a
//     session event);
//   - reasoning: thinking; text: text (whole parts, never deltas);
//   - tool_use (a finished tool part): tool_call then tool_result;
//   - step_finish: usage of that model call (per step, not cumulative);
//   - error: error, and the turn fails with a *DriverError;
//   - turn_end (the long-lived bridge's, after the session went idle): no
//     event; the turn is over (Ended).
//
// Anything else becomes a raw event.
type Parser struct {
	session   string
	announced bool
	ended     bool
	reply     []string // text parts of the last message with text
	replyMsg  string
	errs      []apiError
}

type apiError struct {
	name, message string
	status        int
}

type line struct {
	Type      string          `json:"type"`
	SessionID string          `json:"sessionID"`
	Part      json.RawMessage `json:"part"`
	Error     json.RawMessage `json:"error"`
}

type part struct {
	Type      string `json:"type"`
	MessageID string `json:"messageID"`
	Text      string `json:"text"`
	Tool      string `json:"tool"`
	CallID    string `json:"callID"`
	State     *struct {
		Status   string          `json:"status"`
		Input    json.RawMessage `json:"input"`
		Output   *string         `json:"output"`
		Error    *string         `json:"error"`
		Metadata json.RawMessage `json:"metadata"`
		Title    string          `json:"title"`
	} `json:"state"`
	Reason string `json:"reason"`
	Tokens *struct {
		Input     int64 `json:"input"`
		Output    int64 `json:"output"`
		Reasoning int64 `json:"reasoning"`
		Cache     struct {
			Read  int64 `json:"read"`
			Write int64 `json:"write"`
		} `json:"cache"`
	} `json:"tokens"`
	Cost float64 `json:"cost"`
}

// Parse handles one stdout line.
func (p *Parser) Parse(b []byte) []sandboxagent.Event {
	var l line
	if evs, ok := kit.Line(b, &l, &l.Type); !ok {
		return evs
	}
	var evs []sandboxagent.Event
	// Only the first id is the turn's session: a line of another session
	// (a subagent's, say) must not make the agent switch sessions.
	if l.SessionID != "" && !p.announced {
		p.announced = true
		p.session = l.SessionID
		evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindSession, SessionID: l.SessionID})
	}
	var pt part
	if len(l.Part) > 0 && json.Unmarshal(l.Part, &pt) != nil {
		return append(evs, kit.Raw(b)...)
	}
	switch l.Type {
	case "step_start":
		return evs
	case "turn_end":
		p.ended = true
		return evs
	case "reasoning":
		if pt.Text == "" {
			return evs
		}
		return append(evs, sandboxagent.Event{Kind: sandboxagent.KindThinking, Payload: sandboxagent.Payload{Text: pt.Text}})
	case "text":
		if pt.MessageID != p.replyMsg || pt.MessageID == "" {
			p.reply = nil
			p.replyMsg = pt.MessageID
		}
		p.reply = append(p.reply, pt.Text)
		return append(evs, sandboxagent.Event{Kind: sandboxagent.KindText, Payload: sandboxagent.Payload{Text: pt.Text}})
	case "tool_use":
		if pt.State == nil {
			return append(evs, kit.Raw(b)...)
		}
		return append(evs, toolEvents(pt)...)
	case "step_finish":
		if pt.Tokens == nil {
			return evs
		}
		return append(evs, sandboxagent.Event{Kind: sandboxagent.KindUsage, Payload: sandboxagent.Payload{
			InputTokens: pt.Tokens.Input, OutputTokens: pt.Tokens.Output,
			CacheReadTokens: pt.Tokens.Cache.Read, CacheWriteTokens: pt.Tokens.Cache.Write,
			ReasoningTokens: pt.Tokens.Reasoning, CostUSD: pt.Cost,
		}})
	case "error":
		e := parseError(l.Error)
		p.errs = append(p.errs, e)
		return append(evs, sandboxagent.Event{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: e.String(), IsError: true}})
	}
	return append(evs, kit.Raw(b)...)
}

// Ended tells the end of a long-lived turn: the bridge's turn_end line.
func (p *Parser) Ended() (bool, time.Duration) { return p.ended, 0 }

// short is "Name: message".
func (e apiError) short() string {
	if e.name != "" && e.name != "UnknownError" {
		return e.name + ": " + e.message
	}
	return e.message
}

// String adds the HTTP status.
func (e apiError) String() string {
	s := e.short()
	if e.status != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.status)
	}
	return s
}

func parseError(b json.RawMessage) apiError {
	var e struct {
		Name    string `json:"name"`
		Message string `json:"message"`
		Data    struct {
			Message    string `json:"message"`
			StatusCode int    `json:"statusCode"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		var s string
		if json.Unmarshal(b, &s) == nil && s != "" {
			return apiError{message: kit.Message(s)}
		}
		return apiError{message: kit.Message(string(b))}
	}
	msg := e.Data.Message
	if msg == "" {
		msg = e.Message
	}
	if msg == "" {
		msg = e.Name
	}
	if msg == "" {
		msg = "unknown error"
	}
	return apiError{name: e.Name, message: kit.Message(msg), status: e.Data.StatusCode}
}

// toolEvents turns a finished tool part into tool_call + tool_result.
func toolEvents(pt part) []sandboxagent.Event {
	st := pt.State
	call := sandboxagent.Payload{Tool: pt.Tool, CallID: pt.CallID}
	if len(st.Input) > 0 && string(st.Input) != "null" {
		call.Input = append(json.RawMessage(nil), st.Input...)
		args := kit.ParseToolArgs(st.Input)
		if pt.Tool == "bash" || pt.Tool == "shell" {
			call.Command = args.Str("command")
		}
		call.Path = args.First("filePath", "file_path", "path")
	}
	evs := []sandboxagent.Event{{Kind: sandboxagent.KindToolCall, Payload: call}}
	res := sandboxagent.Payload{Tool: pt.Tool, CallID: pt.CallID, Command: call.Command, Path: call.Path}
	switch st.Status {
	case "completed":
		if st.Output != nil {
			res.Output = *st.Output
		}
	case "error":
		res.IsError = true
		if st.Error != nil {
			res.Output = *st.Error
		}
	default:
		// pending/running parts are not printed by this version; keep
		// only the call.
		return evs
	}
	var md struct {
		Exit *int `json:"exit"`
	}
	if len(st.Metadata) > 0 && json.Unmarshal(st.Metadata, &md) == nil && md.Exit != nil {
		code := *md.Exit
		res.ExitCode = &code
	}
	return append(evs, sandboxagent.Event{Kind: sandboxagent.KindToolResult, Payload: res})
}

// Finish returns the reply (the text parts of the last assistant message
// with text) and fails when opencode reported an error or exited non-zero.
func (p *Parser) Finish(exitCode int, stderr []byte) (sandboxagent.TurnOutcome, error) {
	out := sandboxagent.TurnOutcome{Reply: strings.Join(p.reply, "\n"), SessionID: p.session}
	serr := stripANSI(string(stderr))
	f := kit.Failure{Driver: "opencode", ExitCode: exitCode, Stderr: serr}
	if len(p.errs) > 0 {
		e := p.errs[len(p.errs)-1]
		return out, f.Err(e.short(), e.status)
	}
	if exitCode != 0 {
		return out, f.Err(lastLine(serr, fmt.Sprintf("opencode exited with code %d", exitCode)), 0)
	}
	return out, nil
}
