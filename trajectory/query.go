package trajectory

import (
	"encoding/json"
	"slices"
)

// Wait returns once every response call made before it has been applied
// and every request that can be parsed has been: those of ended exchanges
// (by the parse worker) and those of exchanges still streaming whose body
// has fully arrived. Queries that need request data (tool results, which
// responses were agent-loop ones) call it. It costs the exchanges still
// open, not the Record.
func (r *Record) Wait() {
	r.sync()
	r.waitParsed()
	r.mu.Lock()
	open := make([]*Exchange, 0, len(r.open))
	for x := range r.open {
		open = append(open, x)
	}
	r.mu.Unlock()
	for _, x := range open {
		x.parseRequest(false)
	}
}

// Exchanges is the number of completion requests recorded.
func (r *Record) Exchanges() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.xs)
}

// Truncated reports whether anything was dropped for a bound: negative
// answers of the queries are then not proof of absence.
func (r *Record) Truncated() bool {
	r.sync()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.truncated
}

// ToolCall returns the call the model asked for with this id in this
// Record's responses.
func (r *Record) ToolCall(id string) (ToolCall, bool) {
	r.sync()
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.callByID[id]
	if !ok || id == "" {
		return ToolCall{}, false
	}
	return c.snapshot(r.sec), true
}

// snapshot is the call as queries return it (secrets redacted). r.mu is
// held.
func (c *call) snapshot(sec *secrets) ToolCall {
	t := c.ToolCall
	t.Arguments = sec.str(string(c.args))
	return t
}

// ToolCalls returns every call the model asked for, in order, for checks
// the other queries do not cover.
func (r *Record) ToolCalls() []ToolCall {
	r.sync()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ToolCall, len(r.calls))
	for i, c := range r.calls {
		out[i] = c.snapshot(r.sec)
	}
	return out
}

// FindToolCall returns the first call named name ("" matches any name)
// whose arguments equal input as JSON values (key order and spacing do not
// matter; nil input matches any arguments). It is for CLIs whose events
// carry no call id the model sent.
func (r *Record) FindToolCall(name string, input json.RawMessage) (ToolCall, bool) {
	var want string
	if input != nil {
		var ok bool
		if want, ok = canonical(input); !ok {
			return ToolCall{}, false
		}
	}
	r.sync()
	r.mu.Lock()
	defer r.mu.Unlock()
	if input == nil && name == "" {
		if len(r.calls) == 0 {
			return ToolCall{}, false
		}
		return r.calls[0].snapshot(r.sec), true
	}
	var best *call
	if input == nil {
		if l := r.ci.byName[name]; len(l) > 0 {
			best = l[0]
		}
	} else {
		for _, c := range r.ci.byCanon[want] {
			if name == "" || c.Name == name {
				best = c
				break
			}
		}
	}
	for x := range r.open {
		for _, c := range x.calls {
			if best != nil && c.pos > best.pos || name != "" && c.Name != name {
				continue
			}
			if c.keys(r.sec); input == nil || c.canon == want {
				best = earlier(best, c)
			}
		}
	}
	if best == nil {
		return ToolCall{}, false
	}
	return best.snapshot(r.sec), true
}

// FindCommand returns the first call whose arguments carry the shell
// command a CLI reported (see CommandMatches for the rules).
func (r *Record) FindCommand(command string) (ToolCall, bool) {
	want := commandForms(command)
	if len(want) == 0 {
		return ToolCall{}, false
	}
	r.sync()
	r.mu.Lock()
	defer r.mu.Unlock()
	var best *call
	for _, w := range want {
		if l := r.ci.byForm[w]; len(l) > 0 {
			best = earlier(best, l[0])
		}
	}
	for x := range r.open {
		for _, c := range x.calls {
			if best != nil && c.pos > best.pos {
				continue
			}
			c.keys(r.sec)
			for _, f := range c.forms {
				if slices.Contains(want, f) {
					best = earlier(best, c)
				}
			}
		}
	}
	if best == nil {
		return ToolCall{}, false
	}
	return best.snapshot(r.sec), true
}

// Result is a tool result the CLI sent the model.
type Result struct {
	Output   string `json:"output"`   // as sent: content blocks' texts joined by \n
	IsError  bool   `json:"is_error"` // Anthropic is_error (the other APIs have none)
	Exchange int    `json:"exchange"` // the exchange whose request carried it first
}

// ToolResult returns what the CLI sent the model for callID, when a
// response of this Record asked for that call (results of older turns,
// repeated in every request's history, do not count). The first request
// that carried it wins. It waits for pending request parses.
func (r *Record) ToolResult(callID string) (Result, bool) {
	r.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	res, ok := r.results[callID]
	if !ok || res.lost {
		return Result{}, false
	}
	return Result{Output: res.output, IsError: res.isError, Exchange: res.n}, true
}

// ResultMatches reports whether output, a tool result as a CLI reported
// it, agrees with what the CLI sent the model for callID (see
// OutputMatches). False when no result for callID was recorded.
func (r *Record) ResultMatches(callID, output string) bool {
	r.Wait()
	r.mu.Lock()
	res, ok := r.results[callID]
	r.mu.Unlock()
	if !ok || res.lost {
		return false
	}
	r.resMu.Lock()
	defer r.resMu.Unlock()
	if res.prep == nil {
		res.prep = prepareSent(res.output)
	}
	return res.prep.matches(output)
}

// PendingCalls is the number of tool calls the model asked the CLI for
// (not the provider's server-side ones) in this Record's completed
// responses that have no result in a later request yet: while it is not
// zero, a tool is running (or the CLI is about to send its result). It
// waits for pending request parses.
func (r *Record) PendingCalls() int {
	r.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pendingCalls()
}

// pendingCalls is PendingCalls; r.mu is held.
func (r *Record) pendingCalls() int {
	n := 0
	for _, c := range r.calls {
		if c.Kind == KindServer || c.ID == "" || r.callByID[c.ID] != c {
			continue
		}
		if x := r.xs[c.Exchange-1]; !x.completed || x.failed {
			continue // the CLI acts on no call of an answer cut short
		}
		if _, ok := r.results[c.ID]; !ok {
			n++
		}
	}
	return n
}

// HasText reports whether s (a whole part or a delta) occurs in the
// assistant text of this Record's responses, whitespace-normalised: in one
// part, or across the parts of one response (joined with or without a
// space). Blank s is trivially true. Secrets (SetSecrets) appear as
// Redacted. See index.go for its cost.
func (r *Record) HasText(s string) bool { return r.has(kindText, s) }

// HasReasoning is HasText for reasoning (thinking, reasoning summaries).
func (r *Record) HasReasoning(s string) bool { return r.has(kindReasoning, s) }

// FinalAnswer returns the model's final answer: the text of the last
// completed agent-loop response, when that response asked for no tool.
// Agent-loop responses are those whose request offered tools; when no
// request did, every response counts. ok is false when there is none, or
// the last one asked for a tool (the turn was cut short). Text parts are
// joined by a blank line. It waits for pending request parses.
func (r *Record) FinalAnswer() (string, bool) {
	r.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	anyTools := r.offeredTools()
	var last *Exchange
	for _, x := range r.xs {
		if !x.completed || x.failed || (anyTools && !x.offersTools) {
			continue
		}
		if last == nil || x.doneSeq > last.doneSeq {
			last = x
		}
	}
	if last == nil || !last.endsLoop() {
		return "", false
	}
	return joinRaw(last.parts, kindText, "\n\n", r.sec), true
}

// Summary is a Record's counts, for status reports.
type Summary struct {
	Exchanges   int  `json:"exchanges"`    // completion requests
	Responses   int  `json:"responses"`    // completed responses
	Failed      int  `json:"failed"`       // HTTP errors, transport errors, error events
	ToolCalls   int  `json:"tool_calls"`   // calls the model asked for
	ToolResults int  `json:"tool_results"` // results sent back for those calls
	Unparsed    int  `json:"unparsed"`     // responses or requests that could not be read
	BadEvents   int  `json:"bad_events"`   // stream events that were not JSON
	Truncated   bool `json:"truncated"`    // something was dropped for a bound
	FinalAnswer bool `json:"final_answer"` // FinalAnswer would return ok
}

// Summary returns the counts. It waits for pending request parses.
func (r *Record) Summary() Summary {
	_, final := r.FinalAnswer() // waits
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Summary{Exchanges: len(r.xs), ToolCalls: len(r.calls), ToolResults: r.nResults, Truncated: r.truncated, FinalAnswer: final}
	for _, x := range r.xs {
		if x.completed && !x.failed {
			s.Responses++
		}
		if x.failed {
			s.Failed++
		}
		if x.unparsed {
			s.Unparsed++
		}
		if x.reqState == reqUnparsed {
			s.Unparsed++
		}
		s.BadEvents += x.badEvents
	}
	return s
}

// offeredTools reports whether any request offered tools: then only those
// are the agent loop's. r.mu is held.
func (r *Record) offeredTools() bool {
	for _, x := range r.xs {
		if x.offersTools {
			return true
		}
	}
	return false
}
