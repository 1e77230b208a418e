package codex

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

// line is one `codex exec --json` line.
type line struct {
	Type     string          `json:"type"`
	ThreadID string          `json:"thread_id"`
	Item     json.RawMessage `json:"item"`
	Usage    *usage          `json:"usage"`
	Error    *struct {
		Message string `json:"message"`
	} `json:"error"`
	Message string `json:"message"`
	// app-server's notifications (the long-lived mode, appserver.go).
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

type usage struct {
	InputTokens           int64 `json:"input_tokens"`
	CachedInputTokens     int64 `json:"cached_input_tokens"`
	CacheWriteInputTokens int64 `json:"cache_write_input_tokens"`
	OutputTokens          int64 `json:"output_tokens"`
	ReasoningOutputTokens int64 `json:"reasoning_output_tokens"`
}

// item is a thread item (the union of the fields codex prints).
type item struct {
	ID               string          `json:"id"`
	Type             string          `json:"type"`
	Text             string          `json:"text"`
	Message          string          `json:"message"`
	Command          string          `json:"command"`
	AggregatedOutput string          `json:"aggregated_output"`
	ExitCode         *int            `json:"exit_code"`
	Status           string          `json:"status"`
	Changes          json.RawMessage `json:"changes"`
	Server           string          `json:"server"`
	Tool             string          `json:"tool"`
	Arguments        json.RawMessage `json:"arguments"`
	Result           json.RawMessage `json:"result"`
	Error            *struct {
		Message string `json:"message"`
	} `json:"error"`
	Query string `json:"query"`
}

type change struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
}

// parser turns one turn's output into events.
type parser struct {
	turn      sandboxagent.Turn
	session   string
	reply     string
	completed bool   // turn.completed seen
	failed    string // turn.failed message
	lastError string // last fatal-looking error message
	calls     map[string]bool

	// The long-lived mode (appserver.go).
	ended       bool     // the bridge's turnEnded line
	interrupted bool     // turn/completed said interrupted
	announced   bool     // the session event was sent
	total       *asUsage // the thread's last token count
}

func newParser(t sandboxagent.Turn) *parser {
	return &parser{turn: t, calls: map[string]bool{}}
}

// Parse implements sandboxagent.Parser.
func (p *parser) Parse(b []byte) []sandboxagent.Event {
	var l line
	if kit.Blank(b) {
		return nil
	}
	if !kit.Decode(b, &l) {
		return kit.Raw(b)
	}
	if l.Type == "" && l.Method != "" {
		return p.notification(b, l.Method, l.Params)
	}
	if l.Type == "" {
		return kit.Raw(b)
	}
	switch l.Type {
	case "thread.started":
		if l.ThreadID == "" {
			return kit.Raw(b)
		}
		if p.session == "" {
			p.session = l.ThreadID
		}
		return []sandboxagent.Event{{Kind: sandboxagent.KindSession, SessionID: l.ThreadID}}
	case "turn.started":
		return nil
	case "turn_end": // the long-lived bridge's (appserver.go)
		p.ended = true
		return nil
	case "turn.completed":
		p.completed = true
		if l.Usage == nil {
			return nil
		}
		u := l.Usage
		return []sandboxagent.Event{{Kind: sandboxagent.KindUsage, Payload: sandboxagent.Payload{
			InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
			CacheReadTokens: u.CachedInputTokens, CacheWriteTokens: u.CacheWriteInputTokens,
			ReasoningTokens: u.ReasoningOutputTokens, Cumulative: true,
		}}}
	case "turn.failed":
		msg := "turn failed"
		if l.Error != nil && l.Error.Message != "" {
			msg = l.Error.Message
		}
		p.failed = msg
		return []sandboxagent.Event{{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: msg, IsError: true}}}
	case "error":
		// Retries ("Reconnecting... 1/5 (...)") are reported but not fatal
		// by themselves.
		retry := strings.HasPrefix(l.Message, "Reconnecting...")
		if !retry {
			p.lastError = l.Message
		}
		return []sandboxagent.Event{{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: l.Message, IsError: !retry}}}
	case "item.started", "item.updated", "item.completed":
		if evs, ok := p.item(l.Type, l.Item); ok {
			return evs
		}
	}
	return kit.Raw(b)
}

// item maps one item line; ok is false for what it does not understand.
func (p *parser) item(phase string, rawItem json.RawMessage) ([]sandboxagent.Event, bool) {
	var it item
	if len(rawItem) == 0 || json.Unmarshal(rawItem, &it) != nil {
		return nil, false
	}
	done := phase == "item.completed"
	switch it.Type {
	case "agent_message":
		if !done {
			return nil, true // the text arrives with item.completed
		}
		p.reply = it.Text
		if it.Text == "" {
			return nil, true
		}
		return []sandboxagent.Event{{Kind: sandboxagent.KindText, Payload: sandboxagent.Payload{Text: it.Text}}}, true
	case "reasoning":
		if !done || it.Text == "" {
			return nil, true
		}
		return []sandboxagent.Event{{Kind: sandboxagent.KindThinking, Payload: sandboxagent.Payload{Text: it.Text}}}, true
	case "error":
		// A warning item (e.g. unknown model metadata); the turn goes on.
		msg := it.Message
		if msg == "" {
			msg = it.Text
		}
		return []sandboxagent.Event{{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: msg}}}, true
	case "command_execution":
		call := sandboxagent.Payload{Tool: "command_execution", CallID: it.ID, Command: it.Command, Input: compact(rawItem)}
		var evs []sandboxagent.Event
		if !p.calls[it.ID] {
			p.calls[it.ID] = true
			evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindToolCall, Payload: call})
		}
		if done {
			failed := it.Status == "failed" || (it.ExitCode != nil && *it.ExitCode != 0)
			evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindToolResult, Payload: sandboxagent.Payload{
				Tool: "command_execution", CallID: it.ID, Command: it.Command,
				Output: it.AggregatedOutput, ExitCode: it.ExitCode, IsError: failed,
			}})
		}
		return evs, true
	case "file_change":
		var changes []change
		_ = json.Unmarshal(it.Changes, &changes)
		path := ""
		if len(changes) > 0 {
			path = changes[0].Path
		}
		var evs []sandboxagent.Event
		if !p.calls[it.ID] {
			p.calls[it.ID] = true
			evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindToolCall, Payload: sandboxagent.Payload{
				Tool: "file_change", CallID: it.ID, Path: path, Input: compact(rawItem),
			}})
		}
		if done {
			var out []string
			for _, c := range changes {
				out = append(out, c.Kind+" "+c.Path)
			}
			evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindToolResult, Payload: sandboxagent.Payload{
				Tool: "file_change", CallID: it.ID, Path: path, Output: strings.Join(out, "\n"), IsError: it.Status == "failed",
			}})
		}
		return evs, true
	case "mcp_tool_call":
		msg := ""
		if it.Error != nil {
			msg = it.Error.Message
		}
		return p.mcpCall(it.ID, it.Server, it.Tool, it.Arguments, it.Result, msg, it.Status, rawItem, done), true
	case "web_search":
		return p.webSearch(it.ID, it.Query, done), true
	}
	return nil, false
}

// mcpText is the text of an MCP result's content blocks (or the result
// JSON when it has none).
func mcpText(r json.RawMessage) string {
	if len(r) == 0 || string(r) == "null" {
		return ""
	}
	var res struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if json.Unmarshal(r, &res) == nil && len(res.Content) > 0 {
		var parts []string
		for _, c := range res.Content {
			if c.Text != "" {
				parts = append(parts, c.Text)
			}
		}
		if len(parts) > 0 {
			return strings.Join(parts, "\n")
		}
	}
	return string(compact(r))
}

func compact(r json.RawMessage) json.RawMessage {
	if len(r) == 0 || string(r) == "null" {
		return nil
	}
	var b bytes.Buffer
	if json.Compact(&b, r) != nil {
		return nil
	}
	return b.Bytes()
}

// Finish implements sandboxagent.Parser.
func (p *parser) Finish(exitCode int, stderr []byte) (sandboxagent.TurnOutcome, error) {
	out := sandboxagent.TurnOutcome{Reply: p.reply, SessionID: p.session}
	if out.SessionID == "" && p.ended && p.failed == "" {
		// A long-lived turn on a thread the process already ran.
		out.SessionID = p.turn.SessionID
	}
	errText := strings.TrimSpace(string(stderr))
	f := kit.Failure{Driver: "codex", ExitCode: exitCode, Stderr: errText}
	// codex reports an API error's status only in its message.
	fail := func(msg string) (sandboxagent.TurnOutcome, error) {
		return out, f.Err(msg, kit.HTTPStatus(kit.Fold(msg)))
	}
	switch {
	case p.failed != "":
		return fail(p.failed)
	case exitCode != 0:
		if p.lastError != "" {
			return fail(p.lastError)
		}
		if msg := stderrError(errText); msg != "" {
			return fail(msg)
		}
		return fail(fmt.Sprintf("codex exited with status %d", exitCode))
	case p.interrupted:
		return fail("the turn was interrupted")
	case p.turn.SessionID != "" && p.session != "" && p.session != p.turn.SessionID:
		return fail(fmt.Sprintf("resuming session %s started a new session %s", p.turn.SessionID, p.session))
	case !p.completed:
		if p.lastError != "" {
			return fail(p.lastError)
		}
		return fail("codex exited without completing the turn")
	}
	return out, nil
}

// stderrError picks the CLI's error from its stderr: the last line that
// starts with "Error", else the last line that is not known noise.
func stderrError(s string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); strings.HasPrefix(l, "Error") {
			return l
		}
	}
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "Reading additional input from stdin") || strings.HasPrefix(l, "WARNING:") {
			continue
		}
		return l
	}
	return ""
}

// mcpCall maps an MCP tool call item (either vocabulary): the tool_call
// once per id, and its result when done.
func (p *parser) mcpCall(id, server, tool string, args, result json.RawMessage, errMsg, status string, rawItem json.RawMessage, done bool) []sandboxagent.Event {
	name := tool
	if server != "" {
		name = server + "." + tool
	}
	var evs []sandboxagent.Event
	if !p.calls[id] {
		p.calls[id] = true
		in := compact(args)
		if in == nil {
			in = compact(rawItem)
		}
		evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindToolCall, Payload: sandboxagent.Payload{Tool: name, CallID: id, Input: in}})
	}
	if done {
		res := sandboxagent.Payload{Tool: name, CallID: id, Output: mcpText(result), IsError: status == "failed"}
		if errMsg != "" {
			res.IsError = true
			if res.Output == "" {
				res.Output = errMsg
			}
		}
		evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindToolResult, Payload: res})
	}
	return evs
}

// webSearch maps a web search item (either vocabulary).
func (p *parser) webSearch(id, query string, done bool) []sandboxagent.Event {
	var evs []sandboxagent.Event
	if !p.calls[id] {
		p.calls[id] = true
		in, _ := json.Marshal(map[string]string{"query": query})
		evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindToolCall, Payload: sandboxagent.Payload{Tool: "web_search", CallID: id, Input: in}})
	}
	if done {
		evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindToolResult, Payload: sandboxagent.Payload{Tool: "web_search", CallID: id, Output: query}})
	}
	return evs
}
