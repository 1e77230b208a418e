package sandboxagent

import (
	"encoding/json"
	"time"
)

// EventKind says what an Event is. The set is the same for every CLI.
type EventKind string

const (
	KindSession    EventKind = "session"     // the CLI announced its session id
	KindText       EventKind = "text"        // assistant text (a whole part or a delta)
	KindThinking   EventKind = "thinking"    // reasoning text, only when the backend returned it
	KindToolCall   EventKind = "tool_call"   // the model asked for a tool
	KindToolResult EventKind = "tool_result" // the tool's outcome
	KindUsage      EventKind = "usage"       // token counts (and cost when known)
	KindError      EventKind = "error"       // the CLI or the API reported an error
	KindDone       EventKind = "done"        // the turn ended (reply in payload.text)
	KindRaw        EventKind = "raw"         // a line no parser understood, kept verbatim
	// KindEgressDenied: the egress proxy refused a connection of the
	// sandbox (payload.host is "host:port", payload.text the reason).
	KindEgressDenied EventKind = "egress_denied"
	// KindOutputLimit: the CLI's output passed a bound (Config.Limits);
	// the turn was ended with ErrOutputLimit and payload.text says which
	// bound and what was dropped.
	KindOutputLimit EventKind = "output_limit"
	// KindUnverified: an event the CLI printed is not backed by what the
	// model proxy saw (a forged line, say); Line names it, payload.text
	// says what was missing. The event itself is kept, with verified false.
	KindUnverified EventKind = "unverified"
)

// Event is one normalized thing that happened in a turn. Field names are
// a public interface (events.jsonl, --json output).
type Event struct {
	Kind      EventKind `json:"kind"`
	Payload   Payload   `json:"payload"`
	SessionID string    `json:"session_id,omitempty"`
	Time      time.Time `json:"time"`
	// Line is the 1-based number of the raw stdout line (in session.jsonl)
	// this event came from; 0 for events the agent synthesised.
	Line int `json:"line"`
	// Turn is the 1-based turn of the agent that produced it.
	Turn int `json:"turn"`
	// Verified says whether the model proxy's record backs a tool_call,
	// tool_result, text or thinking event: true when it does, false when
	// it does not (the line may be forged), absent when the event was not
	// checked (other kinds, no model proxy) or, while the turn runs, not
	// yet decided (TurnResult.Events hold the final verdicts).
	Verified *bool `json:"verified,omitempty"`
}

// Payload carries an event's data; only the fields that apply are set.
type Payload struct {
	Text     string          `json:"text,omitempty"`
	Tool     string          `json:"tool,omitempty"`    // the CLI's tool name
	CallID   string          `json:"call_id,omitempty"` // pairs tool_call and tool_result
	Command  string          `json:"command,omitempty"` // shell tools
	Path     string          `json:"path,omitempty"`    // file tools
	Input    json.RawMessage `json:"input,omitempty"`   // the tool's arguments as sent
	Output   string          `json:"output,omitempty"`  // tool output
	ExitCode *int            `json:"exit_code,omitempty"`
	IsError  bool            `json:"is_error,omitempty"`
	Delta    bool            `json:"delta,omitempty"` // text/thinking is a fragment, not a whole part
	Host     string          `json:"host,omitempty"`  // egress_denied: host:port asked for

	InputTokens      int64   `json:"input_tokens,omitempty"`
	OutputTokens     int64   `json:"output_tokens,omitempty"`
	CacheReadTokens  int64   `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64   `json:"cache_write_tokens,omitempty"`
	ReasoningTokens  int64   `json:"reasoning_tokens,omitempty"`
	CostUSD          float64 `json:"cost_usd,omitempty"`
	// Cumulative: the counts cover the whole session, not this turn
	// (codex reports usage that way).
	Cumulative bool `json:"cumulative,omitempty"`

	// Raw is the original line of a raw event.
	Raw string `json:"raw,omitempty"`
}
