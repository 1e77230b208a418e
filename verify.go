package sandboxagent

// Verification: the CLI's output travels through the sandbox, where a
// tool (code the model chose) can write into the same pipe. What the
// model proxy saw on the host (trajectory.Record) cannot be written from
// inside, so each event the CLI printed is checked against it, and the
// turn's reply is the model's final answer as the proxy saw it.

import (
	"fmt"
	"strings"
	"time"

	"github.com/sandbox-agent/sandbox-agent/metering"
	"github.com/sandbox-agent/sandbox-agent/modelproxy"
	"github.com/sandbox-agent/sandbox-agent/trajectory"
)

// tap hands the model proxy's exchanges during a turn to the turn's
// record; outside a turn nothing is recorded.
func (a *Agent) tap(method, path string) modelproxy.Exchange {
	r := a.rec.Load()
	if r == nil {
		return nil
	}
	if x := r.Begin(method, path); x != nil {
		return x
	}
	return nil
}

// verifiable reports whether events of kind k can be checked against the
// model's record.
func verifiable(ev Event) bool {
	switch ev.Kind {
	case KindToolCall, KindToolResult:
		return true
	case KindText, KindThinking:
		return strings.TrimSpace(ev.Payload.Text) != ""
	}
	return false
}

// backed reports whether the model's record holds ev, and if not, what is
// missing (see trajectory.Checker).
func (t *turn) backed(ev Event) (bool, string) {
	p := ev.Payload
	switch ev.Kind {
	case KindToolCall:
		return t.check.ToolCall(p.CallID, p.Command, p.Tool, p.Input)
	case KindToolResult:
		return t.check.ToolResult(p.CallID, p.Output)
	case KindText, KindThinking:
		return t.check.Text(p.Text, ev.Kind == KindThinking)
	}
	return false, ""
}

// verifyNow marks ev verified when the record already backs it. The
// model's answers are parsed before the proxy forwards them, so a tool
// call or text the CLI prints is normally backed at once; what is not is
// decided at the turn's end (tool results reach the model only later).
func (t *turn) verifyNow(ev *Event) {
	if t.rec == nil || !verifiable(*ev) || t.check.Exhausted() {
		return
	}
	if ok, _ := t.backed(*ev); ok {
		ev.Verified = &verifiedTrue
	}
}

var verifiedTrue, verifiedFalse = true, false

// maxReportedUnverified bounds the unverified events a turn reports one by
// one; the count covers the rest.
const maxReportedUnverified = 1000

// endBacked reports whether the model's record agrees that the turn is
// over: its last agent-loop answer asked for no tool (or failed) and no
// request is under way. A long-lived CLI's end-of-turn line is believed
// only then: a forged one must not end the turn and make the next line
// of this turn the start of the next.
func (t *turn) endBacked() bool {
	return t.rec == nil || t.rec.Settled()
}

// unbackedQuiet is how long a long-lived turn whose CLI said it ended,
// without the record agreeing, waits in silence (no line, no request
// under way, no tool call waiting for its result) before it ends anyway:
// a CLI can end a turn without asking the model again (an error before
// the first request, a refusal to run a tool).
func (t *turn) unbackedQuiet() time.Duration {
	if t.rec.Exchanges() == 0 {
		return time.Second
	}
	return 5 * time.Second
}

// verifyTurn decides every event not yet verified, reports the forged
// ones, and returns the reply: the model's final answer.
func (t *turn) verifyTurn(cliReply string) (string, *trajectory.Verification) {
	r := t.rec
	r.Wait()
	v := &trajectory.Verification{}
	var forged []Event
	for i := range t.events {
		ev := &t.events[i]
		if p := ev.Payload; ev.Kind == KindUsage {
			v.AddCLIUsage(metering.Usage{InputTokens: p.InputTokens, OutputTokens: p.OutputTokens, CacheReadTokens: p.CacheReadTokens, CacheWriteTokens: p.CacheWriteTokens}, p.Cumulative)
		}
		if !verifiable(*ev) {
			continue
		}
		if ev.Verified == nil {
			if ok, why := t.backed(*ev); ok {
				ev.Verified = &verifiedTrue
			} else {
				ev.Verified = &verifiedFalse
				if len(forged) < maxReportedUnverified {
					forged = append(forged, Event{Kind: KindUnverified, Line: ev.Line, Payload: Payload{
						Text: fmt.Sprintf("line %d: %s event not backed by the model proxy's record: %s", ev.Line, ev.Kind, why), IsError: true,
					}})
				}
			}
		}
		if *ev.Verified {
			v.Verified++
		} else {
			v.Unverified++
			if len(v.UnverifiedLines) < maxReportedUnverified {
				v.UnverifiedLines = append(v.UnverifiedLines, ev.Line)
			}
		}
	}
	for _, ev := range forged {
		t.emit(ev)
	}
	v.Model = r.Summary()
	// Without a final answer (an error, an abort) there is no reply: the
	// CLI's would be the sandbox's word alone.
	reply := ""
	final, ok := r.FinalAnswer()
	if ok {
		reply = t.redact(final)
	} else {
		v.NoFinalAnswer = true
	}
	if strings.TrimSpace(reply) != strings.TrimSpace(cliReply) {
		v.CLIReply = trajectory.Clip(cliReply, 64<<10)
	}
	if strings.TrimSpace(reply) == strings.TrimSpace(cliReply) {
		reply = cliReply // the same answer: keep the CLI's exact form
	}
	return reply, v
}
