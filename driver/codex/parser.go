package codex

import (
	"encoding/json"
	"fmt"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

// The per-turn mode: `codex exec --json` (Command). Its parser takes
// only exec's vocabulary: a line of app-server's (the long-lived mode's,
// appserver.go) is a line it does not know, a raw event, so a forged one
// cannot name the session, end the turn or claim a tool call.

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
}

type usage struct {
	InputTokens           int64 `json:"input_tokens"`
	CachedInputTokens     int64 `json:"cached_input_tokens"`
	CacheWriteInputTokens int64 `json:"cache_write_input_tokens"`
	OutputTokens          int64 `json:"output_tokens"`
	ReasoningOutputTokens int64 `json:"reasoning_output_tokens"`
}

// item is an exec thread item (the union of the fields codex prints).
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
	Query            string          `json:"query"`
}

// execParser turns one `codex exec --json` turn's output into events.
type execParser struct{ turnState }

func newExecParser(t sandboxagent.Turn) *execParser {
	return &execParser{newTurnState(t)}
}

// Parse implements sandboxagent.Parser.
func (p *execParser) Parse(b []byte) []sandboxagent.Event {
	var l line
	if kit.Blank(b) {
		return nil
	}
	if !kit.Decode(b, &l) {
		return kit.Raw(b)
	}
	switch l.Type {
	case "thread.started":
		// codex names its thread first, before the model can run a
		// command; another id later is not this turn's.
		if !ids.Valid(l.ThreadID) || (p.session != "" && l.ThreadID != p.session) {
			return kit.Raw(b)
		}
		p.session = l.ThreadID
		return []sandboxagent.Event{{Kind: sandboxagent.KindSession, SessionID: l.ThreadID}}
	case "turn.started":
		return nil
	case "turn.completed":
		p.completed = true
		if l.Usage == nil {
			return nil
		}
		return usageEvent(tokens(*l.Usage))
	case "turn.failed":
		msg := ""
		if l.Error != nil {
			msg = l.Error.Message
		}
		return p.turnFailed(msg)
	case "error":
		// Retries ("Reconnecting... 1/5 (...)") are not fatal by
		// themselves.
		return p.reportError(l.Message, strings.HasPrefix(l.Message, "Reconnecting..."))
	case "item.started", "item.updated", "item.completed":
		if evs, ok := p.item(l.Type == "item.completed", l.Item); ok {
			return evs
		}
	}
	return kit.Raw(b)
}

// item maps one exec item; ok is false for what it does not understand.
func (p *execParser) item(done bool, rawItem json.RawMessage) ([]sandboxagent.Event, bool) {
	var it item
	if len(rawItem) == 0 || json.Unmarshal(rawItem, &it) != nil {
		return nil, false
	}
	switch it.Type {
	case "agent_message":
		return p.agentMessage(done, it.Text), true
	case "reasoning":
		return p.reasoning(done, it.Text), true
	case "error":
		// A warning item (e.g. unknown model metadata); the turn goes on.
		msg := it.Message
		if msg == "" {
			msg = it.Text
		}
		return warning(msg), true
	case "command_execution":
		return p.command(done, command{ID: it.ID, Command: it.Command, Output: it.AggregatedOutput, Status: it.Status, ExitCode: it.ExitCode, Raw: rawItem}), true
	case "file_change":
		var changes []change
		_ = json.Unmarshal(it.Changes, &changes) // none when malformed
		return p.fileChange(done, it.ID, changes, it.Status, rawItem), true
	case "mcp_tool_call":
		return p.mcpCall(done, rawItem)
	case "web_search":
		return p.webSearch(done, it.ID, it.Query), true
	}
	return nil, false
}

// Finish implements sandboxagent.Parser.
func (p *execParser) Finish(exitCode int, stderr []byte) (sandboxagent.TurnOutcome, error) {
	return p.finish(sandboxagent.TurnOutcome{Reply: p.reply, SessionID: p.session}, exitCode, stderr, false)
}

// finish is the turn's outcome from what the parser saw and the CLI's
// exit: out holds the reply and the session; interrupted: the turn was
// aborted (the long-lived mode's).
func (p *turnState) finish(out sandboxagent.TurnOutcome, exitCode int, stderr []byte, interrupted bool) (sandboxagent.TurnOutcome, error) {
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
	case interrupted:
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
