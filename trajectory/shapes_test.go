package trajectory

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
)

func sse(events ...string) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString("data: " + e + "\n\n")
	}
	return b.String()
}

// TestShapes covers the wire shapes the fake model does not produce.
func TestShapes(t *testing.T) {
	tools := `{"model":"m","tools":[{"name":"x"}],"stream":true}`
	type callWant struct{ id, name, kind, args string }
	cases := []struct {
		name      string
		path      string
		ctype     string
		body      string
		text      []string
		reasoning []string
		calls     []callWant
		final     string // "" : no final answer
	}{{
		name: "anthropic thinking, text and tool_use with deltas", path: "/v1/messages", ctype: "text/event-stream",
		body: sse(`{"type":"message_start","message":{"model":"claude","content":[]}}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me "}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"look."}}`,
			`{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"xx"}}`,
			`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"Read","input":{}}}`,
			`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"file_"}}`,
			`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"path\":\"/a\"}"}}`,
			`{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_2","name":"Noargs","input":{}}}`,
			`{"type":"content_block_stop","index":3}`,
			`{"type":"message_delta","delta":{"stop_reason":"tool_use"}}`,
			`{"type":"message_stop"}`),
		reasoning: []string{"Let me look."},
		calls:     []callWant{{"toolu_1", "Read", KindFunction, `{"file_path":"/a"}`}, {"toolu_2", "Noargs", KindFunction, `{}`}},
	}, {
		name: "anthropic non-streamed with server tool", path: "/v1/messages?beta=true", ctype: "application/json",
		body:  `{"type":"message","model":"claude","content":[{"type":"server_tool_use","id":"srv_1","name":"web_search","input":{"query":"go"}},{"type":"text","text":"First."},{"type":"text","text":"Second."}],"stop_reason":"end_turn"}`,
		text:  []string{"First.", "Second.", "First.Second."},
		calls: []callWant{{"srv_1", "web_search", KindServer, `{"query":"go"}`}},
		final: "First.\n\nSecond.",
	}, {
		name: "chat tool calls without index, reasoning field", path: "/chat/completions", ctype: "text/event-stream",
		body: sse(`{"choices":[{"index":0,"delta":{"reasoning":"hmm"}}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"c1","function":{"name":"bash","arguments":"{\"command\":"}}]}}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"\"ls\"}"}}]}}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"c2","function":{"name":"read","arguments":"{}"}}]}}]}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`, `[DONE]`),
		reasoning: []string{"hmm"},
		calls:     []callWant{{"c1", "bash", KindFunction, `{"command":"ls"}`}, {"c2", "read", KindFunction, `{}`}},
	}, {
		name: "chat non-streamed content parts", path: "/v1/chat/completions", ctype: "application/json; charset=utf-8",
		body:  `{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":[{"type":"text","text":"Hello there"}]},"finish_reason":"stop"}]}`,
		text:  []string{"Hello there"},
		final: "Hello there",
	}, {
		name: "responses custom_tool_call (apply_patch) and local_shell_call", path: "/v1/responses", ctype: "text/event-stream",
		body: "event: response.created\n" + sse(`{"type":"response.created","response":{"model":"gpt","output":[]}}`) +
			sse(`{"type":"response.output_item.added","output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[]}}`,
				`{"type":"response.reasoning_text.delta","item_id":"rs_1","output_index":0,"content_index":0,"delta":"raw thought"}`,
				`{"type":"response.output_item.added","output_index":1,"item":{"type":"custom_tool_call","id":"ct_1","call_id":"call_p","name":"apply_patch","input":""}}`,
				`{"type":"response.custom_tool_call_input.delta","item_id":"ct_1","output_index":1,"delta":"*** Begin Patch\n"}`,
				`{"type":"response.custom_tool_call_input.delta","item_id":"ct_1","output_index":1,"delta":"*** End Patch"}`,
				`{"type":"response.output_item.done","output_index":2,"item":{"type":"local_shell_call","id":"ls_1","call_id":"call_s","action":{"type":"exec","command":["bash","-lc","ls -la"]}}}`,
				`{"type":"response.completed","response":{"status":"completed","output":[{"type":"custom_tool_call","id":"ct_1","call_id":"call_p","name":"apply_patch","input":"*** Begin Patch\n*** End Patch"}]}}`),
		reasoning: []string{"raw thought"},
		calls: []callWant{{"call_p", "apply_patch", KindCustom, "*** Begin Patch\n*** End Patch"},
			{"call_s", "local_shell", KindLocalShell, `{"type":"exec","command":["bash","-lc","ls -la"]}`}},
	}, {
		name: "responses text only in response.completed", path: "/v1/responses", ctype: "text/event-stream",
		body:  sse(`{"type":"response.completed","response":{"status":"completed","output":[{"type":"message","id":"m1","content":[{"type":"output_text","text":"Done."}]}]}}`),
		text:  []string{"Done."},
		final: "Done.",
	}, {
		name: "sniffed SSE without content type, CRLF lines", path: "/v1/chat/completions", ctype: "",
		body:  strings.ReplaceAll(sse(`{"choices":[{"index":0,"delta":{"content":"a\nb"}}]}`, `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`), "\n\n", "\r\n\r\n"),
		text:  []string{"a b"},
		final: "a\nb",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(5) {
				var r Record
				play(&r, wire{method: http.MethodPost, path: tc.path, req: []byte(tools), status: 200,
					header: http.Header{"Content-Type": {tc.ctype}}, resp: []byte(tc.body)}, rand.New(rand.NewPCG(seed, 9)))
				for _, s := range tc.text {
					if !r.HasText(s) {
						t.Errorf("HasText(%q) = false", s)
					}
				}
				for _, s := range tc.reasoning {
					if !r.HasReasoning(s) || r.HasText(s) {
						t.Errorf("reasoning %q not kept apart from text", s)
					}
				}
				calls := r.ToolCalls()
				if len(calls) != len(tc.calls) {
					t.Fatalf("calls = %+v", calls)
				}
				for i, w := range tc.calls {
					c := calls[i]
					if c.ID != w.id || c.Name != w.name || c.Kind != w.kind || c.Arguments != w.args || !c.Complete {
						t.Errorf("call %d = %+v, want %+v", i, c, w)
					}
				}
				a, ok := r.FinalAnswer()
				if ok != (tc.final != "") || a != tc.final {
					t.Errorf("FinalAnswer = %q, %v; want %q", a, ok, tc.final)
				}
				if s := r.Summary(); s.BadEvents != 0 || s.Unparsed != 0 || s.Failed != 0 {
					t.Errorf("summary %+v", s)
				}
			}
		})
	}
}

func TestDetectAPI(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		want         API
	}{
		{"POST", "/v1/messages?beta=true", AnthropicMessages},
		{"POST", "/anthropic/v1/messages/", AnthropicMessages},
		{"POST", "/v1/messages/count_tokens", ""},
		{"POST", "/v1/chat/completions", OpenAIChat},
		{"POST", "/api/paas/v4/chat/completions", OpenAIChat},
		{"POST", "/v1/responses", OpenAIResponses},
		{"POST", "/v1/responses/compact", ""},
		{"GET", "/v1/models", ""},
		{"GET", "/v1/responses", ""},
		{"HEAD", "/v1/messages", ""},
	} {
		if got := DetectAPI(tc.method, tc.path); got != tc.want {
			t.Errorf("DetectAPI(%s %s) = %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
	var r Record
	x := r.Begin("GET", "/v1/models")
	if x != nil || r.Exchanges() != 0 {
		t.Fatal("models recorded as an exchange")
	}
	// A nil *Exchange is inert.
	x.RequestBody([]byte("{}"))
	x.Response(200, nil)
	x.ResponseBody([]byte("{}"))
	x.End(nil)
}

// TestFailures: error statuses, error events, compressed and cut-short
// answers are counted, never taken as answers.
func TestFailures(t *testing.T) {
	req := []byte(`{"tools":[{"name":"x"}],"messages":[]}`)
	for _, tc := range []struct {
		name   string
		status int
		header http.Header
		body   string
		err    error
		want   Summary
	}{
		{"429", 429, http.Header{"Content-Type": {"application/json"}}, `{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}`, nil,
			Summary{Exchanges: 1, Failed: 1}},
		{"error event", 200, http.Header{"Content-Type": {"text/event-stream"}}, sse(`{"type":"message_start","message":{}}`, `{"type":"error","error":{"type":"overloaded_error"}}`), nil,
			Summary{Exchanges: 1, Failed: 1}},
		{"gzip", 200, http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}, "\x1f\x8b", nil,
			Summary{Exchanges: 1, Unparsed: 1}},
		{"cut short", 200, http.Header{"Content-Type": {"application/json"}}, `{"type":"message","content":[{"type":"te`, errors.New("unexpected EOF"),
			Summary{Exchanges: 1, Failed: 1, Unparsed: 1}},
		{"not json", 200, http.Header{"Content-Type": {"text/event-stream"}}, "data: {nope\n\n", nil,
			Summary{Exchanges: 1, BadEvents: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Record
			x := r.Begin("POST", "/v1/messages")
			x.RequestBody(req)
			x.Response(tc.status, tc.header)
			x.ResponseBody([]byte(tc.body))
			x.End(tc.err)
			if s := r.Summary(); s != tc.want {
				t.Errorf("summary %+v, want %+v", s, tc.want)
			}
			if _, ok := r.FinalAnswer(); ok {
				t.Error("a failed exchange gave a final answer")
			}
		})
	}
}
