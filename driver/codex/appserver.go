package codex

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

// The long-lived mode: `codex app-server` behind a bridge (see the package
// doc and assets/appserver.mjs).

// bridgeFile is the bridge Setup installs, relative to codex's home.
const bridgeFile = "sandbox-agent/appserver.mjs"

//go:embed assets/appserver.mjs
var bridgeJS []byte

var _ sandboxagent.LongLived = (*Driver)(nil)

// methodError is the bridge's own error line (a thread it could not start
// or resume); its end of a turn is {"type":"turn_end"}.
const methodError = "sandbox-agent/error"

// ServeCommand implements sandboxagent.LongLived: the bridge, which runs
// `codex app-server` with the key in its environment (as `codex exec`).
func (d *Driver) ServeCommand(t sandboxagent.Turn) (sandboxagent.Invocation, error) {
	if t.SessionID != "" {
		if err := ids.Check(t.SessionID); err != nil {
			return sandboxagent.Invocation{}, err
		}
	}
	return sandboxagent.Invocation{
		Cmd:     []string{"sh", "-c", `exec node "${CODEX_HOME:-$HOME/.codex}/` + bridgeFile + `"`},
		Env:     d.env(true),
		WorkDir: t.WorkDir,
	}, nil
}

// TurnInput implements sandboxagent.LongLived: the bridge's prompt
// command (it starts or resumes the thread, then starts the turn).
func (d *Driver) TurnInput(t sandboxagent.Turn) ([]byte, error) {
	if strings.TrimSpace(t.Prompt) == "" {
		return nil, fmt.Errorf("%w: empty prompt", sandboxagent.ErrInvalidArgument)
	}
	if t.SessionID != "" {
		if err := ids.Check(t.SessionID); err != nil {
			return nil, err
		}
	}
	b, err := json.Marshal(map[string]string{"type": "prompt", "threadId": t.SessionID, "text": t.Prompt, "model": d.model(t)})
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// WarmSteps implements sandboxagent.Warmer: the bridge's warm (app-server
// initialised, the next new session's thread started) and, a warm-up
// turn, its warm_turn: a turn on a throwaway (ephemeral) thread, deleted
// afterwards, so that app-server's loading at its first turn is done.
func (d *Driver) WarmSteps(t sandboxagent.Turn) []sandboxagent.WarmStep {
	cmd := func(typ string) []byte {
		b, _ := json.Marshal(map[string]string{"type": typ, "model": d.model(t)}) // strings: cannot fail
		return append(b, '\n')
	}
	done := func(want string) func([]byte) (bool, error) { return kit.BridgeDone("codex", want) }
	steps := []sandboxagent.WarmStep{{Input: cmd("warm"), Done: done("warm_done")}}
	if t.SessionID != "" {
		// A session to resume: its first prompt does; no new thread.
		steps = nil
	}
	return append(steps, sandboxagent.WarmStep{Turn: true, Input: cmd("warm_turn"), Done: done("warm_turn_done")})
}

// AbortInput implements sandboxagent.LongLived: the bridge sends
// turn/interrupt; app-server ends the turn ("interrupted") and lives on.
func (d *Driver) AbortInput() []byte { return []byte(`{"type":"abort"}` + "\n") }

// serveParser turns one long-lived turn's lines (app-server's
// notifications and the bridge's own) into events. It takes only that
// vocabulary: a line of `codex exec --json`'s (the per-turn mode's,
// parser.go) is a line it does not know, a raw event, so a forged
// thread.started cannot name the session nor a forged turn.completed
// complete the turn.
type serveParser struct {
	turnState
	ended       bool     // the bridge's turn_end line
	interrupted bool     // turn/completed said interrupted
	announced   bool     // the session event was sent
	total       *asUsage // the thread's last token count
}

func newServeParser(t sandboxagent.Turn) *serveParser {
	return &serveParser{turnState: newTurnState(t)}
}

// Ended implements sandboxagent.TurnEnder: the bridge's turn_end line,
// which it prints after app-server's turn/completed of the turn it
// started (or after it could not start one).
func (p *serveParser) Ended() (bool, time.Duration) { return p.ended, 0 }

// bridgeLine is a line of the bridge's own ({"type":"turn_end"}) or an
// app-server notification ({"method":...,"params":...}).
type bridgeLine struct {
	Type   string          `json:"type"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// Parse implements sandboxagent.Parser.
func (p *serveParser) Parse(b []byte) []sandboxagent.Event {
	var l bridgeLine
	if kit.Blank(b) {
		return nil
	}
	if !kit.Decode(b, &l) {
		return kit.Raw(b)
	}
	switch {
	case l.Type == "turn_end" && l.Method == "":
		p.ended = true
		return nil
	case l.Type == "" && l.Method != "":
		return p.notification(b, l.Method, l.Params)
	}
	return kit.Raw(b)
}

// Finish implements sandboxagent.Parser.
func (p *serveParser) Finish(exitCode int, stderr []byte) (sandboxagent.TurnOutcome, error) {
	out := sandboxagent.TurnOutcome{Reply: p.reply, SessionID: p.session}
	if out.SessionID == "" && p.ended && p.failed == "" {
		// A turn on a thread the process already ran: app-server does
		// not name it again.
		out.SessionID = p.turn.SessionID
	}
	return p.finish(out, exitCode, stderr, p.interrupted)
}

// The app-server notifications the parser reads (v2 protocol, camelCase).
type (
	asParams struct {
		ThreadID   string               `json:"threadId"`
		Thread     *struct{ ID string } `json:"thread"`
		Item       json.RawMessage      `json:"item"`
		Turn       *asTurn              `json:"turn"`
		Error      *asError             `json:"error"`
		WillRetry  bool                 `json:"willRetry"`
		TokenUsage *struct {
			Total *asUsage `json:"total"`
		} `json:"tokenUsage"`
		Message string `json:"message"`
		Summary string `json:"summary"`
	}
	asTurn struct {
		ID     string   `json:"id"`
		Status string   `json:"status"`
		Error  *asError `json:"error"`
	}
	asError struct {
		Message string `json:"message"`
	}
	asUsage struct {
		InputTokens           int64 `json:"inputTokens"`
		CachedInputTokens     int64 `json:"cachedInputTokens"`
		CacheWriteInputTokens int64 `json:"cacheWriteInputTokens"`
		OutputTokens          int64 `json:"outputTokens"`
		ReasoningOutputTokens int64 `json:"reasoningOutputTokens"`
	}
	asItem struct {
		ID               string          `json:"id"`
		Type             string          `json:"type"`
		Text             string          `json:"text"`
		Summary          json.RawMessage `json:"summary"`
		Content          json.RawMessage `json:"content"`
		Command          string          `json:"command"`
		AggregatedOutput string          `json:"aggregatedOutput"`
		ExitCode         *int            `json:"exitCode"`
		Status           string          `json:"status"`
		Changes          []asChange      `json:"changes"`
		Query            string          `json:"query"`
	}
	asChange struct {
		Path string `json:"path"`
		Kind struct {
			Type string `json:"type"`
		} `json:"kind"`
	}
)

// quiet are notifications that carry nothing for the events.
var quiet = map[string]bool{
	"turn/started": true, "thread/status/changed": true, "thread/settings/updated": true,
	"turn/diff/updated": true, "turn/plan/updated": true, "account/rateLimits/updated": true,
	"mcpServer/startupStatus/updated": true, "skills/changed": true, "thread/name/updated": true,
	"serverRequest/resolved": true, "hook/started": true, "hook/completed": true,
	"thread/readState/changed": true, "remoteControl/status/changed": true, "account/updated": true,
	"thread/goal/updated": true, "thread/goal/cleared": true, "thread/tokenUsage/updated": true,
}

// notification maps one app-server notification (or the bridge's error
// line) b.
func (p *serveParser) notification(b []byte, method string, raw json.RawMessage) []sandboxagent.Event {
	var pr asParams
	if len(raw) > 0 && json.Unmarshal(raw, &pr) != nil {
		return kit.Raw(b)
	}
	// Another thread's (a sub-agent's, say): not this turn's events.
	cur := p.session
	if cur == "" {
		cur = p.turn.SessionID
	}
	if pr.ThreadID != "" && cur != "" && pr.ThreadID != cur {
		return kit.Raw(b)
	}
	switch method {
	case "thread/started":
		if pr.Thread == nil || !ids.Valid(pr.Thread.ID) {
			return kit.Raw(b)
		}
		if cur != "" && cur != pr.Thread.ID {
			return kit.Raw(b)
		}
		p.session = pr.Thread.ID
		return p.announce()
	case methodError:
		msg := kit.Message(pr.Message)
		if msg == "" {
			msg = "the codex bridge failed"
		}
		return p.turnFailed(msg)
	case "thread/tokenUsage/updated":
		if pr.TokenUsage != nil && pr.TokenUsage.Total != nil {
			p.total = pr.TokenUsage.Total
		}
		return nil
	case "turn/completed":
		if pr.Turn == nil {
			return kit.Raw(b)
		}
		evs := p.announce()
		switch pr.Turn.Status {
		case "completed":
			p.completed = true
		case "interrupted":
			p.interrupted = true
		default:
			msg := ""
			if pr.Turn.Error != nil {
				msg = pr.Turn.Error.Message
			}
			evs = append(evs, p.turnFailed(msg)...)
		}
		if p.total != nil {
			evs = append(evs, usageEvent(tokens(*p.total))...)
		}
		return evs
	case "error":
		if pr.Error == nil {
			return kit.Raw(b)
		}
		return p.reportError(pr.Error.Message, pr.WillRetry)
	case "warning", "configWarning", "deprecationNotice", "guardianWarning":
		msg := pr.Message
		if msg == "" {
			msg = pr.Summary
		}
		if msg == "" {
			return kit.Raw(b)
		}
		return warning(msg)
	case "item/started", "item/completed":
		if evs, ok := p.item(method == "item/completed", pr.Item); ok {
			return append(p.announce(), evs...)
		}
	}
	if quiet[method] {
		return nil
	}
	return kit.Raw(b)
}

// announce is the session event, once per turn, when the session is
// known: a resumed thread's app-server does not name it again.
func (p *serveParser) announce() []sandboxagent.Event {
	if p.announced {
		return nil
	}
	if p.session == "" {
		p.session = p.turn.SessionID
	}
	if p.session == "" {
		return nil
	}
	p.announced = true
	return []sandboxagent.Event{{Kind: sandboxagent.KindSession, SessionID: p.session}}
}

// item maps an app-server thread item through the mapping exec's share
// (items.go); ok is false for what it does not understand.
func (p *serveParser) item(done bool, rawItem json.RawMessage) ([]sandboxagent.Event, bool) {
	var it asItem
	if len(rawItem) == 0 || json.Unmarshal(rawItem, &it) != nil {
		return nil, false
	}
	switch it.Type {
	case "userMessage", "plan", "contextCompaction", "hookPrompt":
		return nil, true // the prompt itself, or nothing exec reports
	case "agentMessage":
		return p.agentMessage(done, it.Text), true
	case "reasoning":
		return p.reasoning(done, strings.Join(append(stringList(it.Summary), stringList(it.Content)...), "\n")), true
	case "commandExecution":
		return p.command(done, command{ID: it.ID, Command: it.Command, Output: it.AggregatedOutput, Status: it.Status, ExitCode: it.ExitCode, Raw: rawItem}), true
	case "fileChange":
		changes := make([]change, len(it.Changes))
		for i, c := range it.Changes {
			changes[i] = change{Path: c.Path, Kind: c.Kind.Type}
		}
		return p.fileChange(done, it.ID, changes, it.Status, rawItem), true
	case "mcpToolCall":
		return p.mcpCall(done, rawItem)
	case "webSearch":
		return p.webSearch(done, it.ID, it.Query), true
	}
	return nil, false
}

// stringList is a JSON array of strings (reasoning's summary and content),
// or nil.
func stringList(r json.RawMessage) []string {
	var l []string
	if len(r) == 0 || json.Unmarshal(r, &l) != nil {
		return nil
	}
	return l
}
