package trajectory

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// small are bounds a fuzzer can reach.
var small = limits{kept: 4 << 10, line: 1 << 10, request: 2 << 10}

// checkBounded fails when a Record holds more than its bounds allow.
func checkBounded(t *testing.T, r *Record) {
	t.Helper()
	r.sync()
	r.applyMu.Lock() // the scanners are the queue's
	defer r.applyMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kept > r.lim.kept {
		t.Fatalf("kept %d > %d", r.kept, r.lim.kept)
	}
	var held int64
	for _, x := range r.xs {
		for _, p := range x.parts {
			held += int64(len(p.raw))
		}
		for _, c := range x.calls {
			held += int64(len(c.args))
		}
		if len(x.sc.line) > r.lim.line || len(x.sc.data) > r.lim.line || len(x.sc.body) > r.lim.line {
			t.Fatalf("scanner buffers over the line bound")
		}
		x.reqMu.Lock()
		n := x.reqLen
		x.reqMu.Unlock()
		if n > r.lim.request {
			t.Fatalf("request buffer over its bound")
		}
	}
	if held > r.lim.kept {
		t.Fatalf("parts and calls hold %d > %d", held, r.lim.kept)
	}
}

// FuzzResponse: any bytes, cut anywhere, under any API and framing, never
// panic and never hold more than the bounds.
func FuzzResponse(f *testing.F) {
	files, _ := filepath.Glob("testdata/golden/*.txt")
	for _, g := range files {
		b, _ := os.ReadFile(g)
		f.Add(b[:min(len(b), 4000)], uint8(0), uint16(7))
	}
	f.Add([]byte(sse(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"a","name":"b","input":{}}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}`)), uint8(1), uint16(3))
	f.Add([]byte(`{"choices":[{"message":{"tool_calls":[{"id":"x","function":{"arguments":{"a":1}}}]}}]}`), uint8(2), uint16(5))
	f.Fuzz(func(t *testing.T, data []byte, sel uint8, cut uint16) {
		paths := []string{"/v1/messages", "/v1/chat/completions", "/v1/responses"}
		ctypes := []string{"text/event-stream", "application/json", ""}
		r := &Record{lim: small}
		for i := range 2 {
			x := r.Begin("POST", paths[(int(sel)+i)%3])
			x.RequestBody(data)
			x.Response(200, http.Header{"Content-Type": {ctypes[int(sel/3)%3]}})
			step := int(cut)%64 + 1
			for p := data; len(p) > 0; {
				n := min(step, len(p))
				x.ResponseBody(p[:n])
				p = p[n:]
			}
			checkBounded(t, r)
			x.End(nil)
		}
		r.HasText(string(data[:min(len(data), 16)]))
		r.FinalAnswer()
		r.Summary()
		for _, c := range r.ToolCalls() {
			c.Input()
			r.ResultMatches(c.ID, string(data))
			r.FindCommand(string(data))
		}
		checkBounded(t, r)
	})
}

// TestBounds: a long text stream, a huge line and a huge request stay
// within the bounds and mark the Record truncated.
func TestBounds(t *testing.T) {
	r := &Record{lim: small}
	x := r.Begin("POST", "/v1/chat/completions")
	x.RequestBody(bytes.Repeat([]byte("x"), 3<<10))
	x.Response(200, http.Header{"Content-Type": {"text/event-stream"}})
	for range 200 {
		x.ResponseBody([]byte(sse(`{"choices":[{"index":0,"delta":{"content":"0123456789abcdef0123456789"}}]}`)))
	}
	x.ResponseBody([]byte("data: " + strings.Repeat("y", 5<<10) + "\n\n"))
	checkBounded(t, r)
	x.End(nil)
	s := r.Summary()
	if !s.Truncated || !r.Truncated() || s.Unparsed != 1 {
		t.Fatalf("summary %+v", s)
	}
	if !r.HasText("0123456789abcdef") {
		t.Fatal("kept text lost")
	}
}
