package claude

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

// line is the union of the stream-json line shapes the parser reads.
type line struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype"`
	SessionID string `json:"session_id"`

	// assistant, user: the API message; system/permission_denied: a
	// string.
	Message json.RawMessage `json:"message"`
	// assistant: synthetic API-error messages; system/api_retry.
	Error             json.RawMessage `json:"error"`
	IsAPIErrorMessage bool            `json:"is_api_error_message"`
	APIErrorStatus    *int            `json:"api_error_status"`

	// system/api_retry
	Attempt      int   `json:"attempt"`
	MaxRetries   int   `json:"max_retries"`
	RetryDelayMS int64 `json:"retry_delay_ms"`
	ErrorStatus  *int  `json:"error_status"`
	// system/permission_denied
	ToolName  string `json:"tool_name"`
	ToolUseID string `json:"tool_use_id"`

	// result
	Result         *string  `json:"result"`
	IsError        bool     `json:"is_error"`
	TotalCostUSD   float64  `json:"total_cost_usd"`
	Usage          *usage   `json:"usage"`
	Errors         []string `json:"errors"`
	TerminalReason string   `json:"terminal_reason"`
	// The cost of this result's turn alone, per model. total_cost_usd is
	// the session's: it counts every turn of a long-lived process and,
	// after --resume, the cost the CLI restored from the transcript.
	ModelUsageSinceLast map[string]struct {
		CostUSD float64 `json:"costUSD"`
	} `json:"model_usage_since_last_result"`

	// control_response (the answer to AbortInput's interrupt)
	Response *struct {
		Subtype   string `json:"subtype"`
		RequestID string `json:"request_id"`
		Error     string `json:"error"`
	} `json:"response"`

	// stream_event
	Event *streamEvent `json:"event"`
}

type message struct {
	Role    string          `json:"role"`
	Model   string          `json:"model"`
	Content json.RawMessage `json:"content"`
}

type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

type usage struct {
	InputTokens         int64 `json:"input_tokens"`
	OutputTokens        int64 `json:"output_tokens"`
	CacheReadTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationTokens int64 `json:"cache_creation_input_tokens"`
	OutputTokensDetails *struct {
		ThinkingTokens int64 `json:"thinking_tokens"`
	} `json:"output_tokens_details"`
}

type streamEvent struct {
	Type  string `json:"type"`
	Delta *struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		Thinking string `json:"thinking"`
	} `json:"delta"`
}

// parser is the state of one turn's output.
type parser struct {
	driver  string
	session string
	tools   map[string]string // call id → tool name

	lastText  string // the last assistant text block
	result    *line  // the result line, once seen
	apiStatus int    // HTTP status of the last API error the CLI reported
	apiError  string // its message
}

// exitCodeRE finds the exit code Claude's Bash tool puts first in a failed
// call's result ("Exit code 2\n...").
var exitCodeRE = lazyre.New(`^(?:Error: )?Exit code (-?\d+)`)

// Parse maps one stdout line to events.
func (p *parser) Parse(b []byte) []sandboxagent.Event {
	var l line
	if evs, ok := kit.Line(b, &l, &l.Type); !ok {
		return evs
	}
	if l.SessionID != "" && p.session == "" {
		p.session = l.SessionID
	}
	switch l.Type {
	case "system":
		return p.system(&l, b)
	case "assistant":
		return p.assistant(&l, b)
	case "user":
		return p.user(&l, b)
	case "result":
		return p.resultLine(&l, b)
	case "stream_event":
		return p.stream(&l, b)
	case "control_response":
		return p.control(&l, b)
	case "keep_alive":
		return nil
	}
	return kit.Raw(b)
}

// Ended tells the end of a long-lived turn: its result line (the CLI
// prints one per user message, also for an interrupted or failed turn,
// and retries before it, not after).
func (p *parser) Ended() (bool, time.Duration) { return p.result != nil, 0 }

// control answers the interrupt: success needs no event (the turn's
// result line follows), a refusal is reported.
func (p *parser) control(l *line, b []byte) []sandboxagent.Event {
	r := l.Response
	switch {
	case r == nil:
		return kit.Raw(b)
	case r.Subtype == "success":
		return nil
	}
	text := "claude refused the control request " + r.RequestID
	if r.Error != "" {
		text += ": " + kit.Message(r.Error)
	}
	return []sandboxagent.Event{{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: text}}}
}

func (p *parser) system(l *line, b []byte) []sandboxagent.Event {
	switch l.Subtype {
	case "init":
		if l.SessionID == "" {
			return kit.Raw(b)
		}
		p.session = l.SessionID
		return []sandboxagent.Event{{Kind: sandboxagent.KindSession, SessionID: l.SessionID}}
	case "thinking_tokens", "status",
		// A tool call running long (a Bash task): its result comes as the
		// tool_result.
		"task_started", "task_progress", "task_updated", "task_notification":
		return nil // progress only
	case "api_retry":
		status := 0
		if l.ErrorStatus != nil {
			status = *l.ErrorStatus
			p.apiStatus = status
		}
		what := str(l.Error)
		if status != 0 {
			what = fmt.Sprintf("HTTP %d %s", status, what)
		}
		text := fmt.Sprintf("API error (%s); retry %d of %d in %d ms", strings.TrimSpace(what), l.Attempt, l.MaxRetries, l.RetryDelayMS)
		p.apiError = text
		return []sandboxagent.Event{{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: text}}}
	case "permission_denied":
		text := str(l.Message)
		if text == "" {
			text = "permission denied"
		}
		return []sandboxagent.Event{{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{
			Text: text, Tool: l.ToolName, CallID: l.ToolUseID, IsError: true,
		}}}
	}
	return kit.Raw(b)
}

// blocks are the content blocks of an assistant or user line's message (a
// string content is one text block).
func (p *parser) blocks(l *line) ([]block, bool) {
	var m message
	if err := json.Unmarshal(l.Message, &m); err != nil || len(m.Content) == 0 {
		return nil, false
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return []block{{Type: "text", Text: s}}, true
	}
	var bs []block
	if err := json.Unmarshal(m.Content, &bs); err != nil {
		return nil, false
	}
	return bs, true
}

// str is a JSON string's value, or the JSON text of anything else ("" for
// null or nothing).
func str(r json.RawMessage) string {
	r = bytes.TrimSpace(r)
	if len(r) == 0 || string(r) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(r, &s) == nil {
		return s
	}
	return string(r)
}

func (p *parser) assistant(l *line, b []byte) []sandboxagent.Event {
	bs, ok := p.blocks(l)
	if !ok {
		return kit.Raw(b)
	}
	if apiErr := str(l.Error); l.IsAPIErrorMessage || apiErr != "" {
		// A message the CLI made up to report an API failure.
		var text []string
		for _, bl := range bs {
			if bl.Type == "text" && bl.Text != "" {
				text = append(text, bl.Text)
			}
		}
		msg := strings.Join(text, "\n")
		if msg == "" {
			msg = apiErr
		}
		if l.APIErrorStatus != nil {
			p.apiStatus = *l.APIErrorStatus
		}
		p.apiError = msg
		return []sandboxagent.Event{{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: msg, IsError: true}}}
	}
	var evs []sandboxagent.Event
	unknown := false
	for _, bl := range bs {
		switch bl.Type {
		case "text":
			p.lastText = bl.Text
			evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindText, Payload: sandboxagent.Payload{Text: bl.Text}})
		case "thinking":
			if bl.Thinking != "" {
				evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindThinking, Payload: sandboxagent.Payload{Text: bl.Thinking}})
			}
		case "redacted_thinking":
			// Encrypted reasoning: no text to report.
		case "tool_use", "server_tool_use":
			p.tools[bl.ID] = bl.Name
			evs = append(evs, toolCall(bl))
		default:
			unknown = true
		}
	}
	if unknown {
		evs = append(evs, kit.Raw(b)...)
	}
	return evs
}

// toolCall is the event of one tool_use block.
func toolCall(bl block) sandboxagent.Event {
	pl := sandboxagent.Payload{Tool: bl.Name, CallID: bl.ID, Input: bl.Input}
	args := kit.ParseToolArgs(bl.Input)
	pl.Command = args.Str("command")
	pl.Path = args.First("file_path", "notebook_path", "path")
	return sandboxagent.Event{Kind: sandboxagent.KindToolCall, Payload: pl}
}

func (p *parser) user(l *line, b []byte) []sandboxagent.Event {
	bs, ok := p.blocks(l)
	if !ok {
		return kit.Raw(b)
	}
	if interrupted(bs) {
		return nil // the CLI's note of an interrupt: the turn's error says it
	}
	var evs []sandboxagent.Event
	other := false
	for _, bl := range bs {
		if bl.Type != "tool_result" {
			other = true
			continue
		}
		out := kit.ToolResultText(bl.Content)
		pl := sandboxagent.Payload{CallID: bl.ToolUseID, Tool: p.tools[bl.ToolUseID], Output: out, IsError: bl.IsError}
		if pl.Tool == "Bash" {
			code := 0
			if m := exitCodeRE.FindStringSubmatch(out); m != nil {
				code, _ = strconv.Atoi(m[1])
			} else if bl.IsError {
				code = -1 // failed without an exit code (interrupted, denied): unknown
			}
			if code >= 0 {
				pl.ExitCode = &code
			}
		}
		evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindToolResult, Payload: pl})
	}
	if other {
		// User text (a subagent's prompt, a replayed message): keep it.
		evs = append(evs, kit.Raw(b)...)
	}
	return evs
}

// interrupted reports whether a user message is only the text the CLI
// adds to the transcript when a turn is interrupted ("[Request interrupted
// by user]", "... for tool use]").
func interrupted(bs []block) bool {
	for _, bl := range bs {
		if bl.Type != "text" || !strings.HasPrefix(bl.Text, "[Request interrupted by user") {
			return false
		}
	}
	return len(bs) > 0
}

func (p *parser) resultLine(l *line, b []byte) []sandboxagent.Event {
	p.result = l
	if l.SessionID != "" {
		p.session = l.SessionID
	}
	if l.APIErrorStatus != nil {
		p.apiStatus = *l.APIErrorStatus
	}
	if l.Usage == nil {
		return nil
	}
	pl := sandboxagent.Payload{
		InputTokens: l.Usage.InputTokens, OutputTokens: l.Usage.OutputTokens,
		CacheReadTokens: l.Usage.CacheReadTokens, CacheWriteTokens: l.Usage.CacheCreationTokens,
		CostUSD: l.TotalCostUSD,
	}
	if l.ModelUsageSinceLast != nil {
		// The turn's own cost (usage is the turn's already).
		pl.CostUSD = 0
		for _, m := range l.ModelUsageSinceLast {
			pl.CostUSD += m.CostUSD
		}
	}
	if d := l.Usage.OutputTokensDetails; d != nil {
		pl.ReasoningTokens = d.ThinkingTokens
	}
	if pl.InputTokens == 0 && pl.OutputTokens == 0 && pl.CacheReadTokens == 0 && pl.CacheWriteTokens == 0 && pl.CostUSD == 0 {
		return nil // a turn that never reached the model
	}
	return []sandboxagent.Event{{Kind: sandboxagent.KindUsage, Payload: pl}}
}

func (p *parser) stream(l *line, b []byte) []sandboxagent.Event {
	if l.Event == nil {
		return kit.Raw(b)
	}
	if l.Event.Type != "content_block_delta" || l.Event.Delta == nil {
		return nil // start/stop frames: the whole blocks follow as assistant lines
	}
	switch d := l.Event.Delta; d.Type {
	case "text_delta":
		return []sandboxagent.Event{{Kind: sandboxagent.KindText, Payload: sandboxagent.Payload{Text: d.Text, Delta: true}}}
	case "thinking_delta":
		if d.Thinking == "" {
			return nil
		}
		return []sandboxagent.Event{{Kind: sandboxagent.KindThinking, Payload: sandboxagent.Payload{Text: d.Thinking, Delta: true}}}
	}
	return nil // signature and tool-input fragments
}

// Finish returns the reply and session id, or the failure the CLI
// reported.
func (p *parser) Finish(exitCode int, stderr []byte) (sandboxagent.TurnOutcome, error) {
	out := sandboxagent.TurnOutcome{SessionID: p.session}
	errText := string(bytes.TrimSpace(stderr))
	f := kit.Failure{Driver: p.driver, ExitCode: exitCode, Stderr: errText}
	r := p.result
	switch {
	case r == nil && exitCode != 0:
		msg := kit.FirstLine(errText)
		if msg == "" {
			msg = p.apiError
		}
		if msg == "" {
			msg = fmt.Sprintf("claude exited with code %d and no result", exitCode)
		}
		return out, f.Err(msg, p.apiStatus)
	case r == nil:
		return out, f.Err("claude printed no result line", p.apiStatus)
	case r.IsError:
		var msg string
		switch {
		case strings.HasPrefix(r.TerminalReason, "aborted"):
			// An interrupt (AbortInput); its errors are a diagnostic.
			msg = "claude turn interrupted (" + r.TerminalReason + ")"
		case len(r.Errors) > 0:
			msg = strings.Join(r.Errors, "; ")
		case r.Result != nil && *r.Result != "":
			msg = *r.Result
		case p.apiError != "":
			msg = p.apiError
		default:
			msg = fmt.Sprintf("claude reported an error (%s, %s)", r.Subtype, r.TerminalReason)
		}
		return out, f.Err(msg, p.apiStatus)
	}
	if r.Result != nil {
		out.Reply = *r.Result
	} else {
		out.Reply = p.lastText
	}
	if exitCode != 0 {
		msg := kit.FirstLine(errText)
		if msg == "" {
			msg = fmt.Sprintf("claude exited with code %d", exitCode)
		}
		return out, f.Err(msg, p.apiStatus)
	}
	return out, nil
}
