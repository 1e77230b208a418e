package trajectory

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// checkQuick fails when a fast decoder accepts data and reads it otherwise
// than json.Unmarshal (and parseRequestBody) would.
func checkQuick(t *testing.T, data []byte, ids []string) {
	t.Helper()
	var a, b antEvent
	if quickAnthropic(data, &a) {
		if err := json.Unmarshal(data, &b); err != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("quickAnthropic(%s) = %+v; Unmarshal %+v, %v", data, a, b, err)
		}
	}
	var c, d chatChunk
	if quickChat(data, &c) {
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("quickChat(%s) accepted what Unmarshal rejects: %v", data, err)
		}
		// RawMessage null and absent differ in form only.
		cj, _ := json.Marshal(c)
		dj, _ := json.Marshal(d)
		if !bytes.Equal(cj, dj) {
			t.Fatalf("quickChat(%s) = %s; Unmarshal %s", data, cj, dj)
		}
	}
	var e, f respEvent
	if quickResponses(data, &e) {
		if err := json.Unmarshal(data, &f); err != nil || !reflect.DeepEqual(e, f) {
			t.Fatalf("quickResponses(%s) = %+v; Unmarshal %+v, %v", data, e, f, err)
		}
	}
	p := newPendingIDs(ids)
	for _, api := range []API{AnthropicMessages, OpenAIChat, OpenAIResponses} {
		got, gerr := parseRequestFor(api, data, &p)
		want, werr := parseRequestBody(api, data)
		if (gerr == nil) != (werr == nil) || got.tools != want.tools || got.model != want.model || got.stream != want.stream {
			t.Fatalf("%s: parseRequestFor(%s) = %+v, %v; parseRequestBody %+v, %v", api, data, got, gerr, want, werr)
		}
		if !reflect.DeepEqual(filterResults(got.results, ids), filterResults(want.results, ids)) {
			t.Fatalf("%s: parseRequestFor(%s) results %+v; parseRequestBody %+v", api, data, got.results, want.results)
		}
	}
}

// filterResults keeps the first result of each of ids, as a Record does.
func filterResults(rs []reqResult, ids []string) []reqResult {
	var out []reqResult
	seen := map[string]bool{}
	for _, r := range rs {
		if !seen[r.callID] && r.callID != "" && strings.Contains(","+strings.Join(ids, ",")+",", ","+r.callID+",") {
			seen[r.callID] = true
			out = append(out, r)
		}
	}
	return out
}

var quickSeeds = []string{
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi \u00e9\n"}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}`,
	`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":5}}`,
	`{"type":"content_block_delta","Index":3,"delta":{"type":"text_delta","text":"x"}}`,
	`{"type":"content_block_delta","index":1.5,"delta":{"type":"text_delta","text":"x"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x","text":"y"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","te\u0078t":"y"}}`,
	`{"type":"message_stop","message":5}`,
	`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"lorem "},"finish_reason":null}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning_content":"r","content":null}}],"usage":null}`,
	`{"choices":[{"index":0,"delta":{"content":[{"type":"text","text":"p"}]}}]}`,
	`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"error":null}`,
	`{"choices":[null]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"bash","arguments":"{}"}}]}}]}`,
	`{"choices":[{"index":0,"delta":{"ſontent":"x"}}]}`,
	`{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"hey","sequence_number":4}`,
	`{"type":"response.completed","response":{"status":"completed","output":[]}}`,
	`{"type":"response.output_text.delta","delta":5}`,
	`{"model":"m","tools":[{"name":"x"}],"stream":true,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"out"}]}]}`,
	`{"model":"m","tools":[],"messages":[{"role":"tool","tool_call_id":"call_1","content":"a\nb"}]}`,
	`{"model":"m","messages":[{"role":"tool","tool_call_id":"call\u005f1","content":"escaped id"}]}`,
	`{"model":"m","Tools":[1],"messages":[]}`,
	`{"model":"m","tools":[1],"tools":[]}`,
	`{"model":5,"tools":[1]}`,
	`{"model":"m","tools":[1],"messages":[5]}`,
	`{"model":"m","tools":[1],"messages":[{"Role":"tool","tool_call_id":"call_1","content":"x"}]}`,
	`{"model":"m","input":[{"type":"function_call_output","call_id":"call_1","output":"o"},null]}`,
	`{"model":"m","input":[{"type":"function_call_output","call_id":1,"output":"o"}]}`,
	`{"model":"m","input":"just a prompt","tools":null}`,
	`{"model":"m\u00e9","stream":false,"messages":null} `,
	`{"model":"m","messages":[]} x`,
	`{"a":[[[[[[[[[[1]]]]]]]]]],"model":"m"}`,
}

func TestQuickMatchesUnmarshal(t *testing.T) {
	ids := []string{"toolu_1", "call_1"}
	for _, s := range quickSeeds {
		checkQuick(t, []byte(s), ids)
		checkQuick(t, []byte(s), nil)
	}
	files, _ := filepath.Glob("testdata/golden/*.txt")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, l := range bytes.Split(b, []byte("\n")) {
			if d, ok := bytes.CutPrefix(l, []byte("data: ")); ok {
				checkQuick(t, d, ids)
			}
		}
		checkQuick(t, b, ids)
	}
	// The captured requests, with a result for a waiting call.
	for _, c := range clis(t) {
		body := followUp(t, c, ToolCall{ID: "call_w", Name: "bash", Arguments: `{"command":"ls"}`}, true)
		checkQuick(t, body, []string{"call_w"})
		checkQuick(t, body, []string{"toolu_old", "call_old", "other"})
		checkQuick(t, body, nil)
	}
}

// FuzzQuick: the fast decoders never read anything otherwise than
// json.Unmarshal does.
func FuzzQuick(f *testing.F) {
	for _, s := range quickSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkQuick(t, data, []string{"toolu_1", "call_1", "c"})
	})
}

// TestQueryAfterResponseBody: the chunk a ResponseBody call got is seen
// by any query made after it returned (the CLI prints only what the proxy
// forwarded after it), from any goroutine.
func TestQueryAfterResponseBody(t *testing.T) {
	var r Record
	x := r.Begin("POST", "/v1/chat/completions")
	x.Response(200, map[string][]string{"Content-Type": {"text/event-stream"}})
	const n = 300
	forwarded := make(chan int)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			x.ResponseBody([]byte(sse(`{"choices":[{"index":0,"delta":{"content":" word` + strings.Repeat("x", i%7) + strconv.Itoa(i) + `"}}]}`)))
			forwarded <- i
		}
		close(forwarded)
	})
	for i := range forwarded {
		w := "word" + strings.Repeat("x", i%7) + strconv.Itoa(i)
		if !r.HasText(w) {
			t.Fatalf("chunk %d not seen after ResponseBody returned", i)
		}
	}
	wg.Wait()
	x.End(nil)
}

func itoa(i int) string {
	return strings.TrimSpace(strings.Repeat(" ", 0) + string(rune('0'+i/100)) + string(rune('0'+i/10%10)) + string(rune('0'+i%10)))
}

// TestNoGoroutineLeft: once a Record's exchanges ended and it was
// queried, it holds no goroutine.
func TestNoGoroutineLeft(t *testing.T) {
	before := runtime.NumGoroutine()
	for range 20 {
		var r Record
		for _, s := range quickSeeds[:3] {
			x := r.Begin("POST", "/v1/messages")
			x.RequestBody([]byte(quickSeeds[18]))
			x.Response(200, map[string][]string{"Content-Type": {"text/event-stream"}})
			x.ResponseBody([]byte(sse(s)))
			x.End(nil)
		}
		r.Summary()
	}
	// Exchanges that end without anyone asking (the worker drains alone).
	for range 20 {
		var r Record
		x := r.Begin("POST", "/v1/messages")
		x.ResponseBody([]byte(sse(quickSeeds[0])))
		x.End(nil)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines left (before %d):\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
