package trajectory

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// queryRecord builds a Record holding about 16 MiB of text (in 64 ended
// exchanges of four 64 KiB parts each) and 1000 tool calls with their results.
func queryRecord(tb testing.TB) *Record {
	r := &Record{lim: limits{kept: 64 << 20}}
	hdr := http.Header{"Content-Type": {"text/event-stream"}}
	word := func(i int) string { return fmt.Sprintf("w%d ", i) }
	n := 0
	for e := range 64 {
		x := r.Begin("POST", "/v1/chat/completions")
		x.RequestBody([]byte(`{"model":"m","tools":[{"name":"bash"}],"messages":[]}`))
		x.Response(200, hdr)
		for p := range 4 {
			var b strings.Builder
			for b.Len() < 64<<10-64 {
				b.WriteString(word(n))
				n++
			}
			s, _ := json.Marshal(b.String())
			{
				x.ResponseBody([]byte(sse(fmt.Sprintf(`{"choices":[{"index":%d,"delta":{"content":%s}}]}`, p, s))))
			}
		}
		x.ResponseBody([]byte(sse(`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)))
		x.End(nil)
		_ = e
	}
	// 1000 calls in 10 exchanges, then their results.
	var ids []string
	for e := range 10 {
		x := r.Begin("POST", "/v1/chat/completions")
		x.RequestBody([]byte(`{"model":"m","tools":[{"name":"bash"}],"messages":[]}`))
		x.Response(200, hdr)
		for k := range 100 {
			id := fmt.Sprintf("call_%d_%d", e, k)
			ids = append(ids, id)
			args, _ := json.Marshal(fmt.Sprintf(`{"command": "echo %d %d", "timeout": 30}`, e, k))
			x.ResponseBody([]byte(sse(fmt.Sprintf(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,"id":%q,"function":{"name":"bash","arguments":%s}}]}}]}`, k, id, args))))
		}
		x.ResponseBody([]byte(sse(`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`)))
		x.End(nil)
	}
	var msgs []any
	for _, id := range ids {
		msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": id, "content": "output of " + id})
	}
	req, _ := json.Marshal(map[string]any{"model": "m", "tools": []any{map[string]any{"name": "bash"}}, "messages": msgs})
	x := r.Begin("POST", "/v1/chat/completions")
	x.RequestBody(req)
	x.Response(500, nil)
	x.End(nil)
	r.Wait()
	if s := r.Summary(); s.ToolCalls != 1000 || s.ToolResults != 1000 || r.Truncated() {
		tb.Fatalf("summary %+v", s)
	}
	return r
}

// BenchmarkQueries: 10,000 queries of each kind (half of them forged)
// against a record of ~16 MiB of text and 1000 calls; ns/op is per query.
func BenchmarkQueries(b *testing.B) {
	r := queryRecord(b)
	var kept int64
	r.mu.Lock()
	kept = r.kept
	r.mu.Unlock()
	b.Logf("record: %d bytes kept", kept)
	const nq = 10000
	b.Run("HasText", func(b *testing.B) {
		qs := make([]string, nq)
		for i := range qs {
			if i%2 == 0 {
				qs[i] = fmt.Sprintf("w%d w%d", i*97, i*97+1) // present
			} else {
				qs[i] = fmt.Sprintf("forged %d text", i) // absent
			}
		}
		i := 0
		for b.Loop() {
			if r.HasText(qs[i%nq]) != (i%nq%2 == 0) {
				b.Fatalf("HasText(%q) wrong", qs[i%nq])
			}
			i++
		}
	})
	b.Run("FindToolCall", func(b *testing.B) {
		qs := make([]json.RawMessage, nq)
		for i := range qs {
			if i%2 == 0 {
				qs[i] = json.RawMessage(fmt.Sprintf(`{"timeout":30,"command":"echo %d %d"}`, i/2%10, i/2%100))
			} else {
				qs[i] = json.RawMessage(fmt.Sprintf(`{"command":"forged %d"}`, i))
			}
		}
		i := 0
		for b.Loop() {
			if _, ok := r.FindToolCall("bash", qs[i%nq]); ok != (i%nq%2 == 0) {
				b.Fatalf("FindToolCall(%s) wrong", qs[i%nq])
			}
			i++
		}
	})
	b.Run("FindCommand", func(b *testing.B) {
		qs := make([]string, nq)
		for i := range qs {
			if i%2 == 0 {
				qs[i] = fmt.Sprintf("bash -lc 'echo %d %d'", i/2%10, i/2%100)
			} else {
				qs[i] = fmt.Sprintf("forged %d", i)
			}
		}
		i := 0
		for b.Loop() {
			if _, ok := r.FindCommand(qs[i%nq]); ok != (i%nq%2 == 0) {
				b.Fatalf("FindCommand(%s) wrong", qs[i%nq])
			}
			i++
		}
	})
	b.Run("ResultMatches", func(b *testing.B) {
		i := 0
		for b.Loop() {
			id := fmt.Sprintf("call_%d_%d", i%10, i/10%100)
			if !r.ResultMatches(id, "output of "+id) || r.ResultMatches(id, "forged") {
				b.Fatal("ResultMatches wrong")
			}
			i++
		}
	})
}
