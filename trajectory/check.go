package trajectory

import (
	"encoding/json"
	"fmt"

	"github.com/sandbox-agent/sandbox-agent/metering"
)

// MaxChecks bounds a Checker's checks: a CLI's lines are the sandbox's,
// and a flood of them must not buy unbounded work on the host.
const MaxChecks = 40_000

// Checker checks what a CLI printed during a turn against the turn's
// Record, each method saying whether the record backs the event and, if
// not, what is missing. A CLI that names tool calls with ids of its own
// (codex's item ids) has its calls matched by command or input, and the
// model's id is remembered for the call's result. A Checker is not safe
// for concurrent use.
type Checker struct {
	Rec     *Record
	checks  int
	callIDs map[string]string // the CLI's tool call id -> the model's, where they differ
}

// Exhausted reports whether the checker has used up its MaxChecks.
func (c *Checker) Exhausted() bool { return c.checks >= MaxChecks }

func (c *Checker) count() (bool, string) {
	if c.checks++; c.checks > MaxChecks {
		return false, fmt.Sprintf("not checked: more than %d checks in one turn", MaxChecks)
	}
	return true, ""
}

// ToolCall checks a tool call the CLI printed.
func (c *Checker) ToolCall(callID, command, tool string, input json.RawMessage) (bool, string) {
	if ok, why := c.count(); !ok {
		return false, why
	}
	r := c.Rec
	if callID != "" {
		if _, ok := r.ToolCall(callID); ok {
			return true, ""
		}
	}
	var tc ToolCall
	ok := false
	if command != "" {
		tc, ok = r.FindCommand(command)
	}
	if !ok && tool != "" && len(input) > 0 {
		tc, ok = r.FindToolCall(tool, input)
	}
	if ok {
		if callID != "" && tc.ID != "" && tc.ID != callID {
			if c.callIDs == nil {
				c.callIDs = map[string]string{}
			}
			c.callIDs[callID] = tc.ID
		}
		return true, ""
	}
	name := command
	if name == "" {
		name = tool
	}
	return false, fmt.Sprintf("tool call %q (%s) that the model never asked for", callID, Clip(name, 200))
}

// ToolResult checks a tool result the CLI printed.
func (c *Checker) ToolResult(callID, output string) (bool, string) {
	if ok, why := c.count(); !ok {
		return false, why
	}
	if callID == "" {
		return false, "tool result without a call id"
	}
	id := callID
	if mid, ok := c.callIDs[id]; ok {
		id = mid
	}
	if c.Rec.ResultMatches(id, output) {
		return true, ""
	}
	if _, ok := c.Rec.ToolCall(id); !ok {
		return false, fmt.Sprintf("tool result for call %q, which the model never asked for", callID)
	}
	return false, fmt.Sprintf("tool result for call %q that differs from what the CLI sent the model", callID)
}

// Text checks text (reasoning when thinking) the CLI printed.
func (c *Checker) Text(text string, thinking bool) (bool, string) {
	if ok, why := c.count(); !ok {
		return false, why
	}
	if thinking {
		if c.Rec.HasReasoning(text) {
			return true, ""
		}
		return false, "reasoning the model never sent"
	}
	if c.Rec.HasText(text) {
		return true, ""
	}
	return false, "text the model never sent"
}

// Clip bounds s to n bytes for a report.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Verification is a turn's check of the CLI's events against the model
// proxy's record (sandboxagent.TurnResult.Verification, status.json's
// turns).
type Verification struct {
	Model      Summary `json:"model"`
	Verified   int     `json:"verified"`
	Unverified int     `json:"unverified"`
	// UnverifiedLines are the session.jsonl lines of unverified events
	// (the first 1000).
	UnverifiedLines []int `json:"unverified_lines,omitempty"`
	// CLIReply is what the CLI gave as the reply when it was not the
	// model's final answer (which is the turn's reply).
	CLIReply string `json:"cli_reply,omitempty"`
	// NoFinalAnswer: the model gave no final answer the proxy saw (an
	// error, an abort); the reply is empty unless the CLI's is backed.
	NoFinalAnswer bool `json:"no_final_answer,omitempty"`
	// UnbackedEnd: a long-lived CLI said the turn was over while the
	// model's record did not, and stayed quiet.
	UnbackedEnd bool `json:"unbacked_end,omitempty"`
	// CLIUsage is what the CLI's own usage events said of the turn, kept
	// beside the proxy's count (the turn's usage, which budgets use):
	// their sum, or the last session total of a CLI that reports totals
	// (codex: CLIUsageCumulative, not compared). UsageDiffers: its input
	// or output tokens are not the proxy's (a CLI's input may leave
	// cached tokens out; a CLI can also under-report).
	CLIUsage           *metering.Usage `json:"cli_usage,omitempty"`
	CLIUsageCumulative bool            `json:"cli_usage_cumulative,omitempty"`
	UsageDiffers       bool            `json:"usage_differs,omitempty"`
}

// AddCLIUsage counts one usage report of the CLI.
func (v *Verification) AddCLIUsage(u metering.Usage, cumulative bool) {
	switch {
	case cumulative:
		v.CLIUsage, v.CLIUsageCumulative = &u, true
	case v.CLIUsageCumulative:
	case v.CLIUsage == nil:
		v.CLIUsage = &u
	default:
		*v.CLIUsage = v.CLIUsage.Add(u)
	}
}

// CompareUsage sets UsageDiffers against the proxy's count of the turn.
func (v *Verification) CompareUsage(proxy metering.Usage) {
	if v.CLIUsage == nil || v.CLIUsageCumulative {
		v.UsageDiffers = false
		return
	}
	c := *v.CLIUsage
	// A CLI's input may leave the cache out (claude's): either form matches.
	inputMatches := c.InputTokens == proxy.InputTokens || c.InputTokens+c.CacheReadTokens+c.CacheWriteTokens == proxy.InputTokens
	v.UsageDiffers = !inputMatches || c.OutputTokens != proxy.OutputTokens
}
