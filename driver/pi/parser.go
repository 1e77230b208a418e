package pi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/sandbox-agent/sandbox-agent/internal/lazyre"
	"strconv"
	"strings"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

// line is one line of pi's --mode json output. Only the fields the parser
// reads are declared; message_update's partial/message snapshots are not
// (pi serializes them late: they already hold later content).
type line struct {
	Type string `json:"type"`

	// session header
	ID  string `json:"id"`
	Cwd string `json:"cwd"`

	// message_start / message_end / turn_end
	Message *message `json:"message"`
	// message_update
	Event *assistantEvent `json:"assistantMessageEvent"`

	// tool_execution_*
	ToolCallID string          `json:"toolCallId"`
	ToolName   string          `json:"toolName"`
	Result     json.RawMessage `json:"result"`
	IsError    bool            `json:"isError"`

	// auto_retry_start / auto_retry_end / compaction_end / extension_error
	Attempt      int    `json:"attempt"`
	MaxAttempts  int    `json:"maxAttempts"`
	DelayMs      int64  `json:"delayMs"`
	ErrorMessage string `json:"errorMessage"`
	Success      *bool  `json:"success"`
	FinalError   string `json:"finalError"`
	Error        string `json:"error"`

	// --mode rpc command responses
	Command string `json:"command"`
	Data    *struct {
		SessionID string `json:"sessionId"`
	} `json:"data"`
}

type message struct {
	Role         string          `json:"role"`
	Content      json.RawMessage `json:"content"`
	StopReason   string          `json:"stopReason"`
	ErrorMessage string          `json:"errorMessage"`
	Usage        *usage          `json:"usage"`
}

type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

type usage struct {
	Input      int64 `json:"input"`
	Output     int64 `json:"output"`
	CacheRead  int64 `json:"cacheRead"`
	CacheWrite int64 `json:"cacheWrite"`
	Cost       struct {
		Total float64 `json:"total"`
	} `json:"cost"`
}

type assistantEvent struct {
	Type  string `json:"type"`
	Delta string `json:"delta"`
}

type toolResult struct {
	Content json.RawMessage `json:"content"`
}

// parser is the state of one turn.
type parser struct {
	session string

	assistant  bool   // an assistant message ended
	lastStop   string // its stopReason
	lastError  string // its errorMessage
	reply      string // text of the last assistant message with text
	lastText   string // text of the last assistant message
	retryFail  string // auto_retry_end success:false finalError
	usage      usage  // summed over the assistant messages of the current agent run
	extraLines []string

	// --mode rpc: what tells the end of a turn (Ended)
	agentEnded bool // an agent run ended and no retry started since
	final      bool // nothing follows: the prompt was refused, or retries are over
}

// retrySettle is how long an agent run that ended in an error waits for
// pi's auto_retry_start before the turn is taken as over: pi decides on a
// retry right after it printed agent_end.
const retrySettle = 1500 * time.Millisecond

// Ended tells the end of a --mode rpc turn: an agent run that ended
// (after an API error, unless a retry starts within retrySettle), a
// refused prompt, or retries exhausted.
func (p *parser) Ended() (bool, time.Duration) {
	switch {
	case p.final:
		return true, 0
	case !p.agentEnded:
		return false, 0
	case p.lastStop == "error":
		return true, retrySettle
	}
	return true, 0
}

// Events that need no event of their own: lifecycle frames, and messages
// whose content is reported elsewhere.
var quiet = map[string]bool{
	"turn_start": true, "turn_end": true,
	"message_start": true, "tool_execution_start": true, "tool_execution_update": true,
	"queue_update": true, "compaction_start": true,
}

// Parse maps one stdout line to events (see the package doc).
func (p *parser) Parse(b []byte) []sandboxagent.Event {
	if kit.Blank(b) {
		return nil
	}
	var l line
	if !kit.Decode(b, &l) || l.Type == "" {
		// pi prints a few plain lines on stdout (e.g. "Session found in
		// different project: ..."); keep them for the error message.
		if len(p.extraLines) < 20 {
			p.extraLines = append(p.extraLines, string(bytes.TrimSpace(b)))
		}
		return kit.Raw(b)
	}
	if quiet[l.Type] {
		return nil
	}
	var evs []sandboxagent.Event
	var err error
	switch l.Type {
	case "response":
		return p.response(b, &l)
	case "agent_start":
		p.agentEnded = false
		return nil
	case "session":
		if l.ID == "" {
			return kit.Raw(b)
		}
		p.session = l.ID
		return []sandboxagent.Event{{Kind: sandboxagent.KindSession, SessionID: l.ID}}
	case "message_update":
		evs, err = p.update(&l)
	case "message_end":
		evs, err = p.messageEnd(&l)
	case "agent_end":
		// The end of one agent run (pi makes one per prompt, and one more
		// per retry): its usage, summed over its model calls.
		p.agentEnded = true
		u := p.usage
		p.usage = usage{}
		if u.Input == 0 && u.Output == 0 && u.CacheRead == 0 && u.CacheWrite == 0 && u.Cost.Total == 0 {
			return nil
		}
		return []sandboxagent.Event{{Kind: sandboxagent.KindUsage, Payload: sandboxagent.Payload{
			InputTokens: u.Input, OutputTokens: u.Output,
			CacheReadTokens: u.CacheRead, CacheWriteTokens: u.CacheWrite,
			CostUSD: u.Cost.Total,
		}}}
	case "tool_execution_end":
		evs, err = p.toolEnd(&l)
	case "auto_retry_start":
		p.agentEnded = false // another agent run follows
		msg := fmt.Sprintf("retrying (attempt %d of %d, in %d ms): %s", l.Attempt, l.MaxAttempts, l.DelayMs, kit.Message(l.ErrorMessage))
		evs = []sandboxagent.Event{{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: msg}}}
	case "auto_retry_end":
		if l.Success == nil {
			return kit.Raw(b)
		}
		if *l.Success {
			return nil
		}
		p.retryFail = l.FinalError
		p.final = true
		if p.retryFail == "" {
			p.retryFail = "retries exhausted"
		}
		msg := fmt.Sprintf("gave up after %d retries: %s", l.Attempt, kit.Message(p.retryFail))
		evs = []sandboxagent.Event{{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: msg, IsError: true}}}
	case "compaction_end":
		if l.ErrorMessage == "" {
			return nil
		}
		evs = []sandboxagent.Event{{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: "compaction failed: " + kit.Message(l.ErrorMessage)}}}
	case "extension_error":
		msg := l.Error
		if msg == "" {
			msg = l.ErrorMessage
		}
		evs = []sandboxagent.Event{{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: "extension error: " + kit.Message(msg), IsError: true}}}
	default:
		return kit.Raw(b)
	}
	if err != nil {
		return kit.Raw(b)
	}
	return evs
}

// response handles a --mode rpc command response: get_state names the
// session, a refused prompt ends the turn with pi's reason.
func (p *parser) response(b []byte, l *line) []sandboxagent.Event {
	ok := l.Success != nil && *l.Success
	switch {
	case l.Command == "get_state" && ok && l.Data != nil && l.Data.SessionID != "":
		p.session = l.Data.SessionID
		return []sandboxagent.Event{{Kind: sandboxagent.KindSession, SessionID: l.Data.SessionID}}
	case l.Command == "prompt" && !ok:
		p.final = true
		p.retryFail = "pi refused the prompt: " + kit.Message(l.Error)
		return []sandboxagent.Event{{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: p.retryFail, IsError: true}}}
	case !ok:
		return kit.Raw(b)
	}
	return nil
}

func (p *parser) update(l *line) ([]sandboxagent.Event, error) {
	if l.Event == nil {
		return nil, fmt.Errorf("message_update without assistantMessageEvent")
	}
	switch l.Event.Type {
	case "text_delta":
		if l.Event.Delta == "" {
			return nil, nil
		}
		return []sandboxagent.Event{{Kind: sandboxagent.KindText, Payload: sandboxagent.Payload{Text: l.Event.Delta, Delta: true}}}, nil
	case "thinking_delta":
		if l.Event.Delta == "" {
			return nil, nil
		}
		return []sandboxagent.Event{{Kind: sandboxagent.KindThinking, Payload: sandboxagent.Payload{Text: l.Event.Delta, Delta: true}}}, nil
	}
	// start/end frames and tool-call argument fragments: the whole blocks
	// arrive with message_end.
	return nil, nil
}

// blocks decodes message content: an array of blocks or a plain string.
func blocks(c json.RawMessage) ([]block, error) {
	c = bytes.TrimSpace(c)
	if len(c) == 0 || string(c) == "null" {
		return nil, nil
	}
	if c[0] == '"' {
		var s string
		if err := json.Unmarshal(c, &s); err != nil {
			return nil, err
		}
		return []block{{Type: "text", Text: s}}, nil
	}
	var bs []block
	err := json.Unmarshal(c, &bs)
	return bs, err
}

func (p *parser) messageEnd(l *line) ([]sandboxagent.Event, error) {
	m := l.Message
	if m == nil {
		return nil, fmt.Errorf("message_end without message")
	}
	switch m.Role {
	case "assistant":
	case "user", "toolResult", "bashExecution", "custom", "branchSummary", "compactionSummary":
		// The prompt, tool results (reported by tool_execution_end) and
		// pi's own bookkeeping messages.
		return nil, nil
	default:
		return nil, fmt.Errorf("unknown role %q", m.Role)
	}
	bs, err := blocks(m.Content)
	if err != nil {
		return nil, err
	}
	var evs []sandboxagent.Event
	var text strings.Builder
	for _, b := range bs {
		switch b.Type {
		case "text":
			if b.Text == "" {
				continue
			}
			text.WriteString(b.Text)
			evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindText, Payload: sandboxagent.Payload{Text: b.Text}})
		case "thinking":
			if strings.TrimSpace(b.Thinking) == "" {
				continue
			}
			evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindThinking, Payload: sandboxagent.Payload{Text: b.Thinking}})
		case "toolCall":
			evs = append(evs, toolCall(b))
		}
	}
	if u := m.Usage; u != nil {
		p.usage.Input += u.Input
		p.usage.Output += u.Output
		p.usage.CacheRead += u.CacheRead
		p.usage.CacheWrite += u.CacheWrite
		p.usage.Cost.Total += u.Cost.Total
	}
	p.assistant = true
	p.lastStop = m.StopReason
	p.lastError = m.ErrorMessage
	p.lastText = text.String()
	if p.lastText != "" {
		p.reply = p.lastText
	}
	if m.StopReason == "error" || m.StopReason == "aborted" {
		msg := m.ErrorMessage
		if msg == "" {
			msg = "request " + m.StopReason
		}
		evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: kit.Message(msg), IsError: true}})
	}
	return evs, nil
}

// pathTools are pi's file tools; their "path" argument becomes
// payload.path.
var pathTools = map[string]bool{"read": true, "write": true, "edit": true, "ls": true, "find": true, "grep": true}

func toolCall(b block) sandboxagent.Event {
	pl := sandboxagent.Payload{Tool: b.Name, CallID: b.ID}
	args := bytes.TrimSpace(b.Arguments)
	if len(args) > 0 && string(args) != "null" {
		pl.Input = append(json.RawMessage(nil), args...)
		a := kit.ParseToolArgs(args)
		switch {
		case b.Name == "bash":
			pl.Command = a.Str("command")
		case pathTools[b.Name]:
			pl.Path = a.Str("path")
		default:
			pl.Command = a.Str("command")
			pl.Path = a.First("path", "file_path", "filePath")
		}
	}
	return sandboxagent.Event{Kind: sandboxagent.KindToolCall, Payload: pl}
}

// exitRE finds the exit status pi's bash tool appends to a failed
// command's output.
var exitRE = lazyre.New(`Command exited with code (\d+)\s*$`)

func (p *parser) toolEnd(l *line) ([]sandboxagent.Event, error) {
	pl := sandboxagent.Payload{Tool: l.ToolName, CallID: l.ToolCallID, IsError: l.IsError}
	if len(l.Result) > 0 && string(l.Result) != "null" {
		var r toolResult
		if l.Result[0] == '"' {
			var s string
			if err := json.Unmarshal(l.Result, &s); err != nil {
				return nil, err
			}
			pl.Output = s
		} else {
			if err := json.Unmarshal(l.Result, &r); err != nil {
				return nil, err
			}
			bs, err := blocks(r.Content)
			if err != nil {
				return nil, err
			}
			var out []string
			for _, b := range bs {
				if b.Type == "text" {
					out = append(out, b.Text)
				}
			}
			pl.Output = strings.Join(out, "\n")
		}
	}
	if l.ToolName == "bash" {
		code := -1
		if !l.IsError {
			code = 0
		} else if m := exitRE.FindStringSubmatch(pl.Output); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil {
				code = n
			}
		}
		if code >= 0 {
			pl.ExitCode = &code
		}
	}
	return []sandboxagent.Event{{Kind: sandboxagent.KindToolResult, Payload: pl}}, nil
}

// Finish returns the reply and session id, or the failure pi reported. pi
// exits 0 in JSON mode even when the API failed, so the last assistant
// message decides.
func (p *parser) Finish(exitCode int, stderr []byte) (sandboxagent.TurnOutcome, error) {
	out := sandboxagent.TurnOutcome{SessionID: p.session}
	errText := string(bytes.TrimSpace(stderr))
	f := kit.Failure{Driver: "pi", ExitCode: exitCode, Stderr: errText}
	apiErr := ""
	switch {
	case p.assistant && (p.lastStop == "error" || p.lastStop == "aborted"):
		apiErr = p.lastError
		if apiErr == "" {
			apiErr = "request " + p.lastStop
		}
	case p.retryFail != "":
		apiErr = p.retryFail
	}
	if exitCode != 0 {
		msg := kit.FirstLine(errText)
		if apiErr != "" {
			msg = apiErr
		}
		if msg == "" {
			msg = fmt.Sprintf("pi exited with code %d", exitCode)
		}
		return out, f.Err(msg, kit.HTTPStatus(apiErr))
	}
	if apiErr != "" {
		return out, f.Err(apiErr, kit.HTTPStatus(apiErr))
	}
	if !p.assistant {
		msg := "pi ended without an answer"
		if len(p.extraLines) > 0 {
			msg += ": " + p.extraLines[len(p.extraLines)-1]
		} else if l := kit.FirstLine(errText); l != "" {
			msg += ": " + l
		}
		return out, f.Err(msg, 0)
	}
	out.Reply = p.lastText
	if out.Reply == "" {
		out.Reply = p.reply
	}
	return out, nil
}
