package codex

import (
	"bytes"
	"encoding/json"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// The mapping both vocabularies share. `codex exec --json` (parser.go,
// snake_case) and app-server (appserver.go, camelCase) describe the same
// thread items and turn outcomes; each vocabulary decodes its own lines
// and hands the fields both have to one function per kind here, so the
// events of an item are the same in both modes.

// turnState is what a parser keeps of one turn, in either mode.
type turnState struct {
	turn      sandboxagent.Turn
	session   string
	reply     string
	completed bool   // the turn completed
	failed    string // the turn failed with this message
	lastError string // the last fatal-looking error message
	calls     map[string]bool
}

func newTurnState(t sandboxagent.Turn) turnState {
	return turnState{turn: t, calls: map[string]bool{}}
}

// failedStatus: an item's status that makes its result an error (exec
// and app-server name them alike; "declined" is a refused approval).
func failedStatus(s string) bool { return s == "failed" || s == "declined" }

// agentMessage maps an agent message: whole messages (codex prints no
// deltas), taken at the item's completion.
func (s *turnState) agentMessage(done bool, text string) []sandboxagent.Event {
	if !done {
		return nil
	}
	s.reply = text
	if text == "" {
		return nil
	}
	return []sandboxagent.Event{{Kind: sandboxagent.KindText, Payload: sandboxagent.Payload{Text: text}}}
}

// reasoning maps a reasoning item (only when the backend returned text).
func (s *turnState) reasoning(done bool, text string) []sandboxagent.Event {
	if !done || text == "" {
		return nil
	}
	return []sandboxagent.Event{{Kind: sandboxagent.KindThinking, Payload: sandboxagent.Payload{Text: text}}}
}

// command is a shell command item's fields.
type command struct {
	ID, Command, Output, Status string
	ExitCode                    *int
	Raw                         json.RawMessage // the item as codex printed it: the call's input
}

// command maps a command item: the tool_call once per id, and its result
// when done.
func (s *turnState) command(done bool, c command) []sandboxagent.Event {
	var evs []sandboxagent.Event
	if !s.calls[c.ID] {
		s.calls[c.ID] = true
		evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindToolCall, Payload: sandboxagent.Payload{
			Tool: "command_execution", CallID: c.ID, Command: c.Command, Input: compact(c.Raw),
		}})
	}
	if done {
		failed := failedStatus(c.Status) || (c.ExitCode != nil && *c.ExitCode != 0)
		evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindToolResult, Payload: sandboxagent.Payload{
			Tool: "command_execution", CallID: c.ID, Command: c.Command,
			Output: c.Output, ExitCode: c.ExitCode, IsError: failed,
		}})
	}
	return evs
}

// change is one file of a file change item (its kind: add, update,
// delete).
type change struct{ Path, Kind string }

// fileChange maps a patch item: the tool_call (path = the first file)
// once per id, and the list of changes when done.
func (s *turnState) fileChange(done bool, id string, changes []change, status string, raw json.RawMessage) []sandboxagent.Event {
	path := ""
	if len(changes) > 0 {
		path = changes[0].Path
	}
	var evs []sandboxagent.Event
	if !s.calls[id] {
		s.calls[id] = true
		evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindToolCall, Payload: sandboxagent.Payload{
			Tool: "file_change", CallID: id, Path: path, Input: compact(raw),
		}})
	}
	if done {
		var out []string
		for _, c := range changes {
			out = append(out, c.Kind+" "+c.Path)
		}
		evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindToolResult, Payload: sandboxagent.Payload{
			Tool: "file_change", CallID: id, Path: path, Output: strings.Join(out, "\n"), IsError: failedStatus(status),
		}})
	}
	return evs
}

// mcpItem is an MCP tool call item: both vocabularies name its fields
// alike, so one decoding serves both.
type mcpItem struct {
	ID        string          `json:"id"`
	Server    string          `json:"server"`
	Tool      string          `json:"tool"`
	Status    string          `json:"status"`
	Arguments json.RawMessage `json:"arguments"`
	Result    json.RawMessage `json:"result"`
	Error     *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// mcpCall maps an MCP tool call item raw: tool "SERVER.TOOL", the
// tool_call once per id, and its result when done; ok is false when it
// is not one.
func (s *turnState) mcpCall(done bool, raw json.RawMessage) ([]sandboxagent.Event, bool) {
	var m mcpItem
	if json.Unmarshal(raw, &m) != nil {
		return nil, false
	}
	name := m.Tool
	if m.Server != "" {
		name = m.Server + "." + m.Tool
	}
	var evs []sandboxagent.Event
	if !s.calls[m.ID] {
		s.calls[m.ID] = true
		in := compact(m.Arguments)
		if in == nil {
			in = compact(raw)
		}
		evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindToolCall, Payload: sandboxagent.Payload{Tool: name, CallID: m.ID, Input: in}})
	}
	if done {
		res := sandboxagent.Payload{Tool: name, CallID: m.ID, Output: mcpText(m.Result), IsError: failedStatus(m.Status)}
		if m.Error != nil && m.Error.Message != "" {
			res.IsError = true
			if res.Output == "" {
				res.Output = m.Error.Message
			}
		}
		evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindToolResult, Payload: res})
	}
	return evs, true
}

// webSearch maps a web search item: tool "web_search".
func (s *turnState) webSearch(done bool, id, query string) []sandboxagent.Event {
	var evs []sandboxagent.Event
	if !s.calls[id] {
		s.calls[id] = true
		in, _ := json.Marshal(map[string]string{"query": query}) // a string: cannot fail
		evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindToolCall, Payload: sandboxagent.Payload{Tool: "web_search", CallID: id, Input: in}})
	}
	if done {
		evs = append(evs, sandboxagent.Event{Kind: sandboxagent.KindToolResult, Payload: sandboxagent.Payload{Tool: "web_search", CallID: id, Output: query}})
	}
	return evs
}

// warning is an error the turn goes on after (a warning item or
// notification).
func warning(msg string) []sandboxagent.Event {
	return []sandboxagent.Event{{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: msg}}}
}

// reportError maps an error codex reported during the turn; retry: codex
// retries, so it is not fatal by itself.
func (s *turnState) reportError(msg string, retry bool) []sandboxagent.Event {
	if !retry {
		s.lastError = msg
	}
	return []sandboxagent.Event{{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: msg, IsError: !retry}}}
}

// turnFailed maps the turn's failure ("" = codex gave no message).
func (s *turnState) turnFailed(msg string) []sandboxagent.Event {
	if msg == "" {
		msg = "turn failed"
	}
	s.failed = msg
	return []sandboxagent.Event{{Kind: sandboxagent.KindError, Payload: sandboxagent.Payload{Text: msg, IsError: true}}}
}

// tokens is a token count (exec's usage and app-server's differ only in
// their JSON names, so each converts to it).
type tokens struct {
	InputTokens, CachedInputTokens, CacheWriteInputTokens, OutputTokens, ReasoningOutputTokens int64
}

// usageEvent is the usage event: codex counts the thread's running totals.
func usageEvent(u tokens) []sandboxagent.Event {
	return []sandboxagent.Event{{Kind: sandboxagent.KindUsage, Payload: sandboxagent.Payload{
		InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheReadTokens: u.CachedInputTokens, CacheWriteTokens: u.CacheWriteInputTokens,
		ReasoningTokens: u.ReasoningOutputTokens, Cumulative: true,
	}}}
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
