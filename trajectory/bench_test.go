package trajectory

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkRecordExchange measures what one exchange costs the proxy's
// path (a 500 KB request buffered, a 200-event SSE answer parsed, both in
// 4 KiB chunks) and, apart, the request parse that runs off it.
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

	b.Run("request-buffer", func(b *testing.B) {
		b.SetBytes(int64(len(req)))
		b.ReportAllocs()
		for b.Loop() {
			var r Record
			x := r.Begin("POST", "/v1/messages")
			feed(x.RequestBody, req)
		}
	})
	b.Run("response-sse", func(b *testing.B) {
		b.SetBytes(int64(len(resp)))
		b.ReportAllocs()
		for b.Loop() {
			var r Record
			x := r.Begin("POST", "/v1/messages")
			x.Response(200, hdr)
			feed(x.ResponseBody, resp)
			x.sc.finish(x)
		}
	})
	b.Run("proxy-path", func(b *testing.B) {
		b.SetBytes(int64(len(req) + len(resp)))
		b.ReportAllocs()
		for b.Loop() {
			var r Record
			x := r.Begin("POST", "/v1/messages")
			feed(x.RequestBody, req)
			x.Response(200, hdr)
			feed(x.ResponseBody, resp)
			x.sc.finish(x) // End without its goroutine
		}
	})
	b.Run("request-parse", func(b *testing.B) {
		b.SetBytes(int64(len(req)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := parseRequestBody(AnthropicMessages, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
