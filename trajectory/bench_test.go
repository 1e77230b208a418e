package trajectory

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkRecordExchange measures what one exchange costs the proxy's
// path (a 500 KB request buffered, a 200-event SSE answer queued, both in
// 4 KiB chunks) and, apart, the parses that run off it: the answer's, the
// request's in full, and the request's as a Record does it (quickScan),
// with no call waiting for a result and with one whose result it holds.
func BenchmarkRecordExchange(b *testing.B) {
	var ev []string
	ev = append(ev, `{"type":"message_start","message":{"model":"m","content":[]}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	for i := range 150 {
		d, _ := json.Marshal(fmt.Sprintf("word %d of the answer, ", i))
		ev = append(ev, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+string(d)+`}}`)
	}
	ev = append(ev, `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"Bash","input":{}}}`)
	for range 45 {
		ev = append(ev, `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"command\": \"ls\"}"}}`)
	}
	ev = append(ev, `{"type":"message_delta","delta":{"stop_reason":"tool_use"}}`, `{"type":"message_stop"}`)
	resp := []byte(sse(ev...))

	var msgs []any
	for i := range 100 {
		msgs = append(msgs, map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "tool_result", "tool_use_id": fmt.Sprint("toolu_", i), "content": strings.Repeat("output line\n", 400)}}})
	}
	req, _ := json.Marshal(map[string]any{"model": "m", "tools": []any{map[string]any{"name": "Bash"}}, "messages": msgs})
	hdr := http.Header{"Content-Type": {"text/event-stream"}}
	feed := func(f func([]byte), p []byte) {
		for len(p) > 0 {
			n := min(4096, len(p))
			f(p[:n])
			p = p[n:]
		}
	}
	b.Logf("request %d bytes, response %d bytes, %d events", len(req), len(resp), len(ev))

	release := func(x *Exchange) { // as the request's parse does
		x.reqMu.Lock()
		x.releaseReq()
		x.reqMu.Unlock()
	}
	// noWorker keeps the queue's worker from starting, so that what is
	// timed is the proxy's path alone; applied drops the queue untimed.
	noWorker := func(r *Record) { r.q.running = true }
	applied := func(b *testing.B, r *Record) {
		b.StopTimer()
		r.sync()
		b.StartTimer()
	}
	b.Run("request-buffer", func(b *testing.B) {
		b.SetBytes(int64(len(req)))
		b.ReportAllocs()
		for b.Loop() {
			var r Record
			x := r.Begin("POST", "/v1/messages")
			feed(x.RequestBody, req)
			release(x)
		}
	})
	b.Run("response-queue", func(b *testing.B) {
		b.SetBytes(int64(len(resp)))
		b.ReportAllocs()
		for b.Loop() {
			var r Record
			noWorker(&r)
			x := r.Begin("POST", "/v1/messages")
			x.Response(200, hdr)
			feed(x.ResponseBody, resp)
			applied(b, &r)
		}
	})
	b.Run("response-parse", func(b *testing.B) {
		b.SetBytes(int64(len(resp)))
		b.ReportAllocs()
		for b.Loop() {
			var r Record
			x := r.Begin("POST", "/v1/messages")
			x.Response(200, hdr)
			feed(x.ResponseBody, resp)
			r.sync()
		}
	})
	b.Run("proxy-path", func(b *testing.B) {
		b.SetBytes(int64(len(req) + len(resp)))
		b.ReportAllocs()
		for b.Loop() {
			var r Record
			noWorker(&r)
			x := r.Begin("POST", "/v1/messages")
			feed(x.RequestBody, req)
			x.Response(200, hdr)
			feed(x.ResponseBody, resp)
			release(x)
			applied(b, &r)
		}
	})
	b.Run("request-parse-full", func(b *testing.B) {
		b.SetBytes(int64(len(req)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := parseRequestBody(AnthropicMessages, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, pending := range [][]string{nil, {"toolu_50", "toolu_none"}} {
		b.Run(fmt.Sprintf("request-parse-pending=%d", len(pending)), func(b *testing.B) {
			ids := newPendingIDs(pending)
			b.SetBytes(int64(len(req)))
			b.ReportAllocs()
			for b.Loop() {
				info, err := parseRequestFor(AnthropicMessages, req, &ids)
				if err != nil || !info.tools || len(info.results) != min(len(pending), 1) {
					b.Fatal(err, info.tools, len(info.results))
				}
			}
		})
	}
}
