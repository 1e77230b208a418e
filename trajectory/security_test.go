package trajectory

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

var sseHdr = http.Header{"Content-Type": {"text/event-stream"}}

// exchange plays one chat exchange: req, then status and the SSE events.
func exchange(r *Record, req string, status int, events ...string) *Exchange {
	x := r.Begin("POST", "/v1/chat/completions")
	x.RequestBody([]byte(req))
	x.Response(status, sseHdr)
	if len(events) > 0 {
		x.ResponseBody([]byte(sse(events...)))
	}
	x.End(nil)
	return x
}

const toolsReq = `{"model":"m","tools":[{"name":"bash"}],"messages":[]}`

func TestMaxExchanges(t *testing.T) {
	r := &Record{lim: limits{exchanges: 3}}
	for i := range 3 {
		if exchange(r, toolsReq, 500) == nil {
			t.Fatalf("exchange %d refused", i)
		}
	}
	if r.Truncated() {
		t.Fatal("truncated at the bound")
	}
	if x := r.Begin("POST", "/v1/chat/completions"); x != nil {
		t.Fatal("Begin past MaxExchanges")
	}
	if !r.Truncated() || r.Exchanges() != 3 {
		t.Fatalf("truncated %v, exchanges %d", r.Truncated(), r.Exchanges())
	}
}

func TestRequestBudget(t *testing.T) {
	r := &Record{lim: limits{request: 800, reqBytes: 1000}}
	body := `{"model":"m","messages":[],"pad":"` + strings.Repeat("x", 560) + `"}`
	a := r.Begin("POST", "/v1/chat/completions")
	a.RequestBody([]byte(body)) // 600 bytes in flight
	b := r.Begin("POST", "/v1/chat/completions")
	b.RequestBody([]byte(body[:300])) // would be 900: fits
	b.RequestBody([]byte(body[300:])) // would be 1200: over the Record's budget
	if n := r.reqBytes.Load(); n != int64(len(body)) {
		t.Fatalf("%d bytes buffered, want %d", n, len(body))
	}
	for _, x := range []*Exchange{a, b} {
		x.Response(500, nil)
		x.End(nil)
	}
	s := r.Summary()
	if s.Unparsed != 1 || !s.Truncated {
		t.Fatalf("summary %+v", s)
	}
	if n := r.reqBytes.Load(); n != 0 {
		t.Fatalf("%d bytes still counted", n)
	}
	// The budget is free again.
	c := exchange(r, body, 500)
	r.Wait()
	if c.reqState != reqOK {
		t.Fatal("request over budget after the others ended")
	}
}

// TestOneParseWorker: many exchanges ending at once start one request
// parse at a time, and all are parsed.
func TestOneParseWorker(t *testing.T) {
	before := runtime.NumGoroutine()
	var r Record
	peak := 0
	for range 2000 {
		exchange(&r, toolsReq, 400)
		peak = max(peak, runtime.NumGoroutine()-before)
	}
	// The queue's worker and the parse worker, and either's predecessor
	// on its way out: a constant, where a goroutine per End made 2000.
	// The count is the process's: other tests' goroutines (parallel ones,
	// workers of earlier tests on their way out) are in it, hence the
	// margin; it stays far below one per exchange.
	if peak > 100 {
		t.Fatalf("%d goroutines for 2000 exchanges", peak)
	}
	if s := r.Summary(); s.Exchanges != 2000 || s.Unparsed != 0 || s.Failed != 2000 {
		t.Fatalf("summary %+v", s)
	}
}

func callEvents(id, command string) []string {
	return []string{
		fmt.Sprintf(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":%q,"function":{"name":"bash","arguments":%q}}]}}]}`, id, `{"command":"`+command+`"}`),
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
	}
}

func resultReq(id, out string) string {
	return fmt.Sprintf(`{"model":"m","tools":[{"name":"bash"}],"messages":[{"role":"tool","tool_call_id":%q,"content":%q}]}`, id, out)
}

func TestSettled(t *testing.T) {
	t.Run("side request fails while a tool runs", func(t *testing.T) {
		var r Record
		exchange(&r, toolsReq, 200, callEvents("c1", "sleep 10")...)
		if r.Settled() || r.PendingCalls() != 1 {
			t.Fatalf("settled %v, pending %d", r.Settled(), r.PendingCalls())
		}
		// A tool in the sandbox sends a malformed request with the token.
		exchange(&r, `{"model":"m"`, 400)
		exchange(&r, `{"model":"m","messages":[]}`, 400)
		if r.Settled() {
			t.Fatal("a failing side request settled the turn")
		}
		// Even a failing request offering tools, while the call waits.
		exchange(&r, toolsReq, 400)
		if r.Settled() {
			t.Fatal("a failing request settled the turn while a call waits")
		}
		// The CLI sends the result; the upstream fails: the loop is over.
		exchange(&r, resultReq("c1", "done"), 500)
		if !r.Settled() || r.PendingCalls() != 0 {
			t.Fatalf("settled %v, pending %d after the failed agent-loop request", r.Settled(), r.PendingCalls())
		}
		// A later failing side request changes nothing.
		exchange(&r, `{"model":"m"}`, 400)
		if !r.Settled() {
			t.Fatal("unsettled by a side request")
		}
	})
	t.Run("final answer", func(t *testing.T) {
		var r Record
		exchange(&r, toolsReq, 200, callEvents("c1", "ls")...)
		exchange(&r, resultReq("c1", "a b"), 200, `{"choices":[{"index":0,"delta":{"content":"Done."},"finish_reason":"stop"}]}`)
		if a, ok := r.FinalAnswer(); !ok || a != "Done." || !r.Settled() || r.PendingCalls() != 0 {
			t.Fatalf("final %q %v, settled %v", a, ok, r.Settled())
		}
		exchange(&r, `{"model":"m"}`, 400) // a side request: the answer stands
		if !r.Settled() {
			t.Fatal("unsettled")
		}
	})
	t.Run("no tools offered", func(t *testing.T) {
		var r Record
		exchange(&r, `{"model":"m","messages":[]}`, 503)
		if !r.Settled() {
			t.Fatal("a failed lone exchange did not settle")
		}
	})
	t.Run("server calls and cut-short answers wait for nothing", func(t *testing.T) {
		var r Record
		x := r.Begin("POST", "/v1/messages")
		x.RequestBody([]byte(toolsReq))
		x.Response(200, sseHdr)
		x.ResponseBody([]byte(sse(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"Bash","input":{}}}`)))
		x.End(fmt.Errorf("reset"))
		if r.PendingCalls() != 0 || !r.Settled() {
			t.Fatalf("pending %d, settled %v", r.PendingCalls(), r.Settled())
		}
	})
}

func TestSecrets(t *testing.T) {
	const key = "sk-ant-0123456789"
	var r Record
	r.SetSecrets([]string{key, "abc", ""}) // short ones are ignored
	x := r.Begin("POST", "/v1/chat/completions")
	x.RequestBody([]byte(toolsReq))
	x.Response(200, sseHdr)
	// The key split across deltas, and whole in a second part.
	for _, d := range []string{"Your key is sk-an", "t-0123", "456789, keep it.", " abc"} {
		x.ResponseBody([]byte(sse(fmt.Sprintf(`{"choices":[{"index":0,"delta":{"content":%q}}]}`, d))))
	}
	x.ResponseBody([]byte(sse(`{"choices":[{"index":1,"delta":{"content":"again `+key+`"}}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning_content":"the key `+key[:5]+`"}}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning_content":"`+key[5:]+` leaked"}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)))
	if !r.HasText("Your key is [REDACTED], keep it.") {
		t.Error("redacted text not matched while streaming")
	}
	x.End(nil)
	for _, s := range []string{"Your key is [REDACTED], keep it. abc", "again [REDACTED]", "keep it. abcagain [REDACTED]"} {
		if !r.HasText(s) {
			t.Errorf("HasText(%q) = false", s)
		}
	}
	if !r.HasReasoning("the key [REDACTED] leaked") {
		t.Error("reasoning not redacted")
	}
	for _, s := range []string{key, "sk-ant-0", "0123456789"} {
		if r.HasText(s) || r.HasReasoning(s) {
			t.Errorf("HasText(%q): the secret is kept", s)
		}
	}
	a, ok := r.FinalAnswer()
	if !ok || strings.Contains(a, key) || !strings.Contains(a, "[REDACTED]") {
		t.Fatalf("FinalAnswer %q, %v", a, ok)
	}

	// Arguments and results.
	var r2 Record
	r2.SetSecrets([]string{key})
	exchange(&r2, toolsReq, 200, callEvents("c1", "curl -H "+key+" x")...)
	exchange(&r2, resultReq("c1", "sent "+key), 500)
	c, ok := r2.ToolCall("c1")
	if !ok || strings.Contains(c.Arguments, key) {
		t.Fatalf("call %+v", c)
	}
	if _, ok := r2.FindCommand("curl -H [REDACTED] x"); !ok {
		t.Error("FindCommand of the redacted command")
	}
	if _, ok := r2.FindToolCall("bash", []byte(`{"command":"curl -H [REDACTED] x"}`)); !ok {
		t.Error("FindToolCall of the redacted arguments")
	}
	if res, ok := r2.ToolResult("c1"); !ok || res.Output != "sent [REDACTED]" || !r2.ResultMatches("c1", "sent [REDACTED]") {
		t.Errorf("result %+v", res)
	}
}

// naiveHas is HasText as it was: every part, and each response's parts
// joined, scanned per query.
func naiveHas(r *Record, kind partKind, s string) bool {
	n := normalize(s)
	if n == "" {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	join := func(ps []*part, sep string) string {
		var b normBuf
		first := true
		for _, p := range ps {
			if p.kind != kind {
				continue
			}
			if !first {
				b.add(sep)
			}
			first = false
			b.add(string(p.raw))
		}
		return string(b.b)
	}
	for _, x := range r.xs {
		for _, p := range x.parts {
			if p.kind == kind && strings.Contains(normalize(string(p.raw)), n) {
				return true
			}
		}
		if strings.Contains(join(x.parts, ""), n) || strings.Contains(join(x.parts, " "), n) {
			return true
		}
	}
	return false
}

// TestTextIndex: the index (built, partly built, not built) answers as
// a scan of every part would, for exchanges ended and streaming.
func TestTextIndex(t *testing.T) {
	defer func(f, m int) { buildFactor, minBuild = f, m }(buildFactor, minBuild)
	buildFactor, minBuild = 2, 64
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"a", "bc", " ", "  ", "\n", "de f", "g\t", "hij "}
	text := func() string {
		var b strings.Builder
		for range 1 + rng.IntN(12) {
			b.WriteString(words[rng.IntN(len(words))])
		}
		return b.String()
	}
	var r Record
	var open *Exchange
	for e := range 60 {
		x := r.Begin("POST", "/v1/chat/completions")
		x.Response(200, sseHdr)
		for range 1 + rng.IntN(6) {
			x.ResponseBody([]byte(sse(fmt.Sprintf(`{"choices":[{"index":%d,"delta":{"content":%q}}]}`, rng.IntN(3), text()))))
		}
		if e%7 == 6 {
			open = x // one streaming at a time
		} else {
			x.End(nil)
		}
		for range 30 {
			q := text()
			if got, want := r.HasText(q), naiveHas(&r, kindText, q); got != want {
				t.Fatalf("exchange %d: HasText(%q) = %v, scan says %v", e, q, got, want)
			}
		}
		if open != nil && e%7 == 0 {
			open.End(nil)
			open = nil
		}
	}
	if r.text[kindText].ix == nil {
		t.Fatal("no index was built")
	}
}
