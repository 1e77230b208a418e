package dsh

import (
	"encoding/json"
	"fmt"
	"github.com/sandbox-agent/sandbox-agent/internal/lazyre"
	"strconv"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

// exitType is the type of the line the turn's wrapper prints last: dsh's
// own stdout (the final text) and exit status. dsh never writes this type.
const exitType = "sandbox-agent/exit"

// record is the union of the session-log line shapes the parser reads: the
// header {"type":"session","id":...} and the events
// {"type":T,"seq":n,"time":ms,"data":{...}}, plus the wrapper's exit line.
type record struct {
	Type string          `json:"type"`
	ID   string          `json:"id"`   // session header
	Seq  *int64          `json:"seq"`  // events
	Data json.RawMessage `json:"data"` // events

	// the wrapper's exit line
	Session string `json:"session"`
	Code    *int   `json:"code"`
	Stdout  string `json:"stdout"`
	Error   string `json:"error"`
}

type failure struct {
	Message string `json:"message"`
	Code    string `json:"code"`
	Status  int    `json:"status"`
}

type chunkData struct {
	Turn  int `json:"turn"`
	Step  int `json:"step"`
	Chunk struct {
		Type   string       `json:"type"`
		Text   string       `json:"text"`
		Usage  *usageCounts `json:"usage"`
		Reason *struct {
			Kind    string   `json:"kind"`
			Failure *failure `json:"failure"`
		} `json:"reason"`
	} `json:"chunk"`
}

type usageCounts struct {
	InputTokens      int64 `json:"inputTokens"`
	OutputTokens     int64 `json:"outputTokens"`
	CacheReadTokens  int64 `json:"cacheReadTokens"`
	CacheWriteTokens int64 `json:"cacheWriteTokens"`
	ReasoningTokens  int64 `json:"reasoningTokens"`
}

type contentBlock struct {
	Type       string          `json:"type"`
	Text       string          `json:"text"`
	ID         string          `json:"id"`
	Name       string          `json:"name"`
	Arguments  string          `json:"arguments"`
	ToolCallID string          `json:"toolCallId"`
	Content    json.RawMessage `json:"content"`
	IsError    bool            `json:"isError"`
}

type messageData struct {
	Message struct {
		Role    string         `json:"role"`
		Content []contentBlock `json:"content"`
	} `json:"message"`
}

type toolCallData struct {
	CallID    string          `json:"callId"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

type retryData struct {
	Retry      int      `json:"retry"`
	MaxRetries int      `json:"maxRetries"`
	DelayMS    float64  `json:"delayMs"`
	Failure    *failure `json:"failure"`
}

type turnEndData struct {
	Reason struct {
		Kind  string   `json:"kind"`
		Error *failure `json:"error"`
	} `json:"reason"`
}

// quiet are the session-log event types that carry nothing a caller of
// this library needs (their content is in the audit's session.jsonl).
var quiet = map[string]bool{
	"permission/preset": true, "sandbox/mode": true, "approval/policy": true,
	"agent/inbox/spliced": true, "turn/start": true, "step/start": true, "step/end": true,
	"user/message": true, "session/title": true, "session/title-llm-request": true,
	"request/header": true, "request/context": true, "llm/retry-started": true,
	"session/end-seed": true,
	"approval/asked":   true, "approval/decided": true,
}

// parser turns one turn's wrapper output (session-log lines, then the exit
// line) into events.
type parser struct {
	driver  string
	session string
	tools   map[string]string // call id → tool name

	reply     string // the last assistant message's text
	stdout    string // dsh's stdout, from the exit line
	exit      *int   // dsh's exit code, from the exit line
	wrapErr   string // the wrapper's own complaint
	failed    *failure
	turnEnded bool
	completed bool
}

// NewParser returns the parser of one turn's output.
func (d *Driver) NewParser(t sandboxagent.Turn) sandboxagent.Parser {
	return &parser{driver: d.Name(), session: t.SessionID, tools: map[string]string{}}
}

func (p *parser) Parse(line []byte) []sandboxagent.Event {
	var r record
	if evs, ok := kit.Line(line, &r, &r.Type); !ok {
		return evs
	}
	var evs []sandboxagent.Event
	var err error
	switch {
	case r.Type == "session" && r.Seq == nil:
		if r.ID == "" {
			return kit.Raw(line)
		}
		p.session = r.ID
		return []sandboxagent.Event{{Kind: sandboxagent.KindSession, SessionID: r.ID}}
	case r.Type == exitType:
		if r.Code == nil {
			return kit.Raw(line)
		}
		p.exit, p.stdout, p.wrapErr = r.Code, r.Stdout, r.Error
		if r.Session == "" || !p.sessionSeen(r.Session) {
			return nil
		}
		// The session the turn ran in, announced again at its end (a
		// continued session's log has no header in this turn).
		return []sandboxagent.Event{{Kind: sandboxagent.KindSession, SessionID: r.Session}}
	case quiet[r.Type]:
		return nil
	case r.Type == "assistant/chunk":
		evs, err = p.chunk(r.Data)
	case r.Type == "assistant/message":
		evs, err = p.message(r.Data)
	case r.Type == "tool/call":
		evs, err = p.toolCall(r.Data)
	case r.Type == "tool/result":
		evs, err = p.toolResult(r.Data)
	case r.Type == "llm/retry":
		evs, err = p.retry(r.Data)
	case r.Type == "turn/end":
		evs, err = p.turnEnd(r.Data)
	default:
		return kit.Raw(line)
	}
	if err != nil {
		return kit.Raw(line)
	}
	return evs
}

// sessionSeen reports whether id is the turn's session: the one it
// continued or whose header it printed. A new session that dsh never
// wrote (it failed before) is not announced.
func (p *parser) sessionSeen(id string) bool {
	return id == p.session
}

func (p *parser) chunk(data json.RawMessage) ([]sandboxagent.Event, error) {
	var c chunkData
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, err
	}
	ch := c.Chunk
	switch ch.Type {
	case "text-delta":
		if ch.Text == "" {
			return nil, nil
		}
		return []sandboxagent.Event{{Kind: sandboxagent.KindText, Payload: sandboxagent.Payload{Text: ch.Text, Delta: true}}}, nil
	case "reasoning-delta":
		if ch.Text == "" {
			return nil, nil
		}
		return []sandboxagent.Event{{Kind: sandboxagent.KindThinking, Payload: sandboxagent.Payload{Text: ch.Text, Delta: true}}}, nil
	case "usage":
		if ch.Usage == nil {
			return nil, fmt.Errorf("usage chunk without usage")
		}
		u := ch.Usage
		if *u == (usageCounts{}) {
			// A failed request's placeholder.
			return nil, nil
		}
		return []sandboxagent.Event{{Kind: sandboxagent.KindUsage, Payload: sandboxagent.Payload{
			InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
			CacheReadTokens: u.CacheReadTokens, CacheWriteTokens: u.CacheWriteTokens,
			ReasoningTokens: u.ReasoningTokens,
		}}}, nil
	case "finish":
		if ch.Reason == nil {
			return nil, fmt.Errorf("finish chunk without reason")
		}
		if ch.Reason.Kind == "error" && ch.Reason.Failure != nil {
			// Reported again (and as the error event) by turn/end; keep
			// it in case the turn never ends.
			p.failed = ch.Reason.Failure
		}
		return nil, nil
	case "block-start", "block-end", "tool-call-delta":
		// Whole blocks arrive again in assistant/message; tool calls in
		// tool/call.
		return nil, nil
	}
	return nil, fmt.Errorf("unknown chunk %q", ch.Type)
}

func (p *parser) message(data json.RawMessage) ([]sandboxagent.Event, error) {
	var m messageData
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	var evs []sandboxagent.Event
	var text strings.Builder
	for _, b := range m.Message.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
			if b.Text != "" {
				evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindText, Payload: sandboxagent.Payload{Text: b.Text}})
			}
		case "reasoning":
			if b.Text != "" {
				evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindThinking, Payload: sandboxagent.Payload{Text: b.Text}})
			}
		case "tool-call":
			// Announced by the tool/call record that follows.
			if b.ID != "" && b.Name != "" {
				p.tools[b.ID] = b.Name
			}
		}
	}
	// The headless runner prints the last assistant message that had text.
	if text.Len() > 0 {
		p.reply = text.String()
	}
	return evs, nil
}

func (p *parser) toolCall(data json.RawMessage) ([]sandboxagent.Event, error) {
	var c toolCallData
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, err
	}
	if c.CallID == "" || c.Name == "" {
		return nil, fmt.Errorf("tool/call without id or name")
	}
	p.tools[c.CallID] = c.Name
	// arguments is the JSON text the model sent, as a JSON string.
	var input json.RawMessage
	var args string
	if json.Unmarshal(c.Arguments, &args) == nil {
		input = json.RawMessage(args)
	} else {
		input = c.Arguments
	}
	if !json.Valid(input) {
		// Not JSON (a model's broken arguments): keep it as a string.
		input, _ = json.Marshal(string(input))
	}
	pl := sandboxagent.Payload{Tool: c.Name, CallID: c.CallID, Input: input}
	fields := kit.ParseToolArgs(input)
	switch c.Name {
	case "bash", "pwsh", "powershell":
		pl.Command = fields.Str("command")
	default:
		pl.Path = fields.First("file_path", "path", "filePath")
	}
	return []sandboxagent.Event{{Kind: sandboxagent.KindToolCall, Payload: pl}}, nil
}

// exitMarker is how dsh's bash tool reports a non-zero exit in its result.
var exitMarker = lazyre.New(`\[exit code: (-?\d+)\]`)

func (p *parser) toolResult(data json.RawMessage) ([]sandboxagent.Event, error) {
	var m messageData
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	var evs []sandboxagent.Event
	for _, b := range m.Message.Content {
		if b.Type != "tool-result" {
			continue
		}
		out := kit.ToolResultText(b.Content)
		pl := sandboxagent.Payload{CallID: b.ToolCallID, Tool: p.tools[b.ToolCallID], Output: out, IsError: b.IsError}
		if pl.Tool == "bash" {
			if ms := exitMarker.Get().FindAllStringSubmatch(out, -1); len(ms) > 0 {
				if n, err := strconv.Atoi(ms[len(ms)-1][1]); err == nil {
					pl.ExitCode = &n
				}
			} else if !b.IsError {
				zero := 0 // dsh marks only non-zero exits
				pl.ExitCode = &zero
			}
		}
		if pl.ExitCode != nil && *pl.ExitCode != 0 {
			pl.IsError = true
		}
		evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindToolResult, Payload: pl})
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("tool/result without a tool-result block")
	}
	return evs, nil
}

func (p *parser) retry(data json.RawMessage) ([]sandboxagent.Event, error) {
	var r retryData
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	msg := fmt.Sprintf("retry %d/%d in %.0f ms", r.Retry, r.MaxRetries, r.DelayMS)
	if f := r.Failure; f != nil {
		msg = fmt.Sprintf("%s (%s)", describe(f), msg)
	}
	return []sandboxagent.Event{{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: msg}}}, nil
}

func (p *parser) turnEnd(data json.RawMessage) ([]sandboxagent.Event, error) {
	var t turnEndData
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, err
	}
	p.turnEnded = true
	switch t.Reason.Kind {
	case "completed":
		p.completed = true
		p.failed = nil
		return nil, nil
	case "error":
		f := t.Reason.Error
		if f == nil {
			f = &failure{Message: "turn ended with an error"}
		}
		p.failed = f
		return []sandboxagent.Event{{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: describe(f), IsError: true}}}, nil
	}
	// Another reason (cancelled, max steps, ...): the runner exits 1.
	p.completed = false
	p.failed = &failure{Message: "turn ended: " + t.Reason.Kind, Code: strings.ToUpper(t.Reason.Kind)}
	return []sandboxagent.Event{{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: p.failed.Message, IsError: true}}}, nil
}

// describe is a failure as dsh prints it: "CODE: message".
func describe(f *failure) string {
	msg := kit.Message(f.Message)
	if f.Code != "" {
		msg = f.Code + ": " + msg
	}
	return msg
}

// stderrError matches dsh's failure line "dsh: CODE: message" (also as
// the message of an uncaught boot Error); jsError the first line of an
// uncaught JavaScript error.
var (
	stderrError = lazyre.New(`(?m)^(?:[A-Za-z]*Error: )?dsh: (.+)$`)
	jsError     = lazyre.New(`(?m)^[A-Za-z]*Error: .+$`)
)

func (p *parser) Finish(exitCode int, stderr []byte) (sandboxagent.TurnOutcome, error) {
	out := sandboxagent.TurnOutcome{SessionID: p.session, Reply: p.reply}
	if p.exit != nil {
		if s := strings.TrimRight(p.stdout, "\n"); s != "" {
			out.Reply = s
		}
	}
	code := exitCode
	if p.exit != nil && code == 0 {
		code = *p.exit
	}
	serr := strings.TrimSpace(string(stderr))
	if code == 0 && p.failed == nil && p.wrapErr == "" {
		return out, nil
	}
	f := kit.Failure{Driver: p.driver, ExitCode: code, Stderr: serr}
	if f.ExitCode == 0 {
		f.ExitCode = 1
	}
	var msg string
	status := 0
	switch {
	case p.failed != nil:
		// The status dsh recorded, else the "401: ..." prefix its
		// OpenAI-compatible route puts in the message, else an HTTP_<status>
		// code.
		msg, status = describe(p.failed), p.failed.Status
		if status == 0 {
			status = kit.HTTPStatus(p.failed.Message, p.failed.Code)
		}
	case stderrError.MatchString(serr):
		msg = stderrError.FindStringSubmatch(serr)[1]
	case jsError.MatchString(serr):
		msg = jsError.Get().FindString(serr)
	case serr != "":
		msg = kit.FirstLine(serr)
	case p.wrapErr != "":
		msg = p.wrapErr
	case !p.turnEnded:
		msg = "dsh exited before its turn ended"
	default:
		msg = fmt.Sprintf("dsh failed (exit %d)", code)
	}
	return out, f.Err(msg, status)
}
