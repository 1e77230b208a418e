package fakemodel

// Test-side client: replays captured CLI requests and decodes what the fake
// answers (SSE or JSON) the way a CLI would, reassembling deltas.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixtureReq is one captured request (the mocks' log format).
type fixtureReq struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"`
}

func (f fixtureReq) hasTools() bool {
	var b struct {
		Tools []json.RawMessage `json:"tools"`
	}
	_ = json.Unmarshal(f.Body, &b)
	return len(b.Tools) > 0
}

func loadFixtures(t *testing.T, name string) []fixtureReq {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []fixtureReq
	if strings.HasSuffix(name, ".jsonl") {
		for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
			var f fixtureReq
			if err := json.Unmarshal(line, &f); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			out = append(out, f)
		}
		return out
	}
	var f fixtureReq
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return []fixtureReq{f}
}

// sseEvent is one server-sent event.
type sseEvent struct{ Name, Data string }

// readSSE parses an event stream strictly enough to catch framing mistakes.
func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	var data []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data == nil {
				t.Fatalf("SSE: empty event")
			}
			cur.Data = strings.Join(data, "\n")
			out = append(out, cur)
			cur, data = sseEvent{}, nil
		case strings.HasPrefix(line, "event: "):
			cur.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		default:
			t.Fatalf("SSE: unexpected line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if data != nil {
		t.Fatalf("SSE: stream ended inside an event")
	}
	return out
}

// turn is a decoded answer, whatever the API.
type turn struct {
	Status          int
	ContentType     string
	Body            []byte // error bodies and non-streamed answers
	Events          []string
	Thinking, Text  string
	ToolName, Args  string
	CallID          string
	Stop            string
	InTok, OutTok   int
	ReasoningTokens int
}

func (tu turn) args(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(tu.Args), &m); err != nil {
		t.Fatalf("tool arguments %q: %v", tu.Args, err)
	}
	return m
}

// send posts a captured request body (with "stream" forced) to baseURL.
func send(t *testing.T, baseURL string, f fixtureReq, stream bool, extraHeader map[string]string) turn {
	t.Helper()
	var body map[string]json.RawMessage
	if err := json.Unmarshal(f.Body, &body); err != nil {
		t.Fatal(err)
	}
	body["stream"] = json.RawMessage(map[bool]string{true: "true", false: "false"}[stream])
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, baseURL+f.Path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range f.Headers {
		switch strings.ToLower(k) {
		case "host", "content-length", "accept-encoding", "connection":
			continue
		}
		req.Header.Set(k, v)
	}
	for k, v := range extraHeader {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	tu := turn{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type")}
	if resp.StatusCode != http.StatusOK {
		tu.Body, _ = io.ReadAll(resp.Body)
		return tu
	}
	api := apiOf(f.Path)
	if stream {
		if !strings.HasPrefix(tu.ContentType, "text/event-stream") {
			t.Fatalf("stream answered with Content-Type %q", tu.ContentType)
		}
		events := readSSE(t, resp.Body)
		switch api {
		case APIChat:
			decodeChatStream(t, &tu, events)
		case APIResponses:
			decodeResponsesStream(t, &tu, events)
		case APIMessages:
			decodeMessagesStream(t, &tu, events)
		}
		return tu
	}
	tu.Body, _ = io.ReadAll(resp.Body)
	switch api {
	case APIChat:
		decodeChatJSON(t, &tu)
	case APIResponses:
		decodeResponsesJSON(t, &tu)
	case APIMessages:
		decodeMessagesJSON(t, &tu)
	}
	return tu
}

func apiOf(path string) string {
	p := strings.SplitN(path, "?", 2)[0]
	switch {
	case strings.HasSuffix(p, "/chat/completions"):
		return APIChat
	case strings.HasSuffix(p, "/responses"):
		return APIResponses
	}
	return APIMessages
}

func mustUnmarshal(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
}

// ---- chat completions ----

type chatToolCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatUsage struct {
	PromptTokens            int `json:"prompt_tokens"`
	CompletionTokens        int `json:"completion_tokens"`
	TotalTokens             int `json:"total_tokens"`
	CompletionTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

func (tu *turn) chatUsage(u *chatUsage) {
	tu.InTok, tu.OutTok, tu.ReasoningTokens = u.PromptTokens, u.CompletionTokens, u.CompletionTokensDetails.ReasoningTokens
}

func decodeChatStream(t *testing.T, tu *turn, events []sseEvent) {
	for i, ev := range events {
		if ev.Data == "[DONE]" {
			tu.Events = append(tu.Events, "[DONE]")
			if i != len(events)-1 {
				t.Fatalf("chat: [DONE] is not last")
			}
			continue
		}
		tu.Events = append(tu.Events, "chunk")
		var c struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta struct {
					Role             string         `json:"role"`
					Content          *string        `json:"content"`
					ReasoningContent string         `json:"reasoning_content"`
					ToolCalls        []chatToolCall `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *chatUsage `json:"usage"`
		}
		mustUnmarshal(t, []byte(ev.Data), &c)
		if c.Object != "chat.completion.chunk" {
			t.Fatalf("chat chunk object %q", c.Object)
		}
		if c.Usage != nil {
			tu.chatUsage(c.Usage)
		}
		for _, ch := range c.Choices {
			tu.Thinking += ch.Delta.ReasoningContent
			if ch.Delta.Content != nil {
				tu.Text += *ch.Delta.Content
			}
			for _, tc := range ch.Delta.ToolCalls {
				if tc.ID != "" {
					tu.CallID = tc.ID
				}
				tu.ToolName += tc.Function.Name
				tu.Args += tc.Function.Arguments
			}
			if ch.FinishReason != nil {
				tu.Stop = *ch.FinishReason
			}
		}
	}
	if n := len(tu.Events); n == 0 || tu.Events[n-1] != "[DONE]" {
		t.Fatalf("chat stream does not end with [DONE]: %v", tu.Events)
	}
}

func decodeChatJSON(t *testing.T, tu *turn) {
	var c struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct {
				Content          *string        `json:"content"`
				ReasoningContent string         `json:"reasoning_content"`
				ToolCalls        []chatToolCall `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage *chatUsage `json:"usage"`
	}
	mustUnmarshal(t, tu.Body, &c)
	if c.Object != "chat.completion" || len(c.Choices) != 1 || c.Usage == nil {
		t.Fatalf("chat completion: %s", tu.Body)
	}
	m := c.Choices[0].Message
	tu.Thinking, tu.Stop = m.ReasoningContent, c.Choices[0].FinishReason
	if m.Content != nil {
		tu.Text = *m.Content
	}
	if len(m.ToolCalls) > 0 {
		tu.ToolName, tu.Args, tu.CallID = m.ToolCalls[0].Function.Name, m.ToolCalls[0].Function.Arguments, m.ToolCalls[0].ID
	}
	tu.chatUsage(c.Usage)
}

// ---- Responses ----

type respUsage struct {
	InputTokens         int `json:"input_tokens"`
	OutputTokens        int `json:"output_tokens"`
	TotalTokens         int `json:"total_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
}

type respItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Summary   []struct {
		Text string `json:"text"`
	} `json:"summary"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

type respObject struct {
	ID     string     `json:"id"`
	Object string     `json:"object"`
	Status string     `json:"status"`
	Output []respItem `json:"output"`
	Usage  *respUsage `json:"usage"`
}

func (tu *turn) fromResponse(t *testing.T, r respObject, fromItems bool) {
	if r.Object != "response" || r.Status != "completed" || r.Usage == nil {
		t.Fatalf("response not completed with usage: %+v", r)
	}
	tu.InTok, tu.OutTok, tu.ReasoningTokens = r.Usage.InputTokens, r.Usage.OutputTokens, r.Usage.OutputTokensDetails.ReasoningTokens
	if !fromItems {
		return
	}
	for _, it := range r.Output {
		switch it.Type {
		case "reasoning":
			for _, s := range it.Summary {
				tu.Thinking += s.Text
			}
		case "message":
			for _, c := range it.Content {
				tu.Text += c.Text
			}
		case "function_call":
			tu.ToolName, tu.Args, tu.CallID = it.Name, it.Arguments, it.CallID
		}
	}
}

func decodeResponsesStream(t *testing.T, tu *turn, events []sseEvent) {
	seq := 0
	var done []respItem
	var completed *respObject
	for _, ev := range events {
		var e struct {
			Type     string          `json:"type"`
			Seq      int             `json:"sequence_number"`
			Delta    string          `json:"delta"`
			Item     respItem        `json:"item"`
			Response json.RawMessage `json:"response"`
		}
		mustUnmarshal(t, []byte(ev.Data), &e)
		if e.Type != ev.Name {
			t.Fatalf("event name %q but type %q", ev.Name, e.Type)
		}
		if e.Seq != seq {
			t.Fatalf("sequence_number %d, want %d", e.Seq, seq)
		}
		seq++
		tu.Events = append(tu.Events, e.Type)
		switch e.Type {
		case "response.reasoning_summary_text.delta":
			tu.Thinking += e.Delta
		case "response.output_text.delta":
			tu.Text += e.Delta
		case "response.function_call_arguments.delta":
			tu.Args += e.Delta
		case "response.output_item.added":
			if e.Item.Type == "function_call" {
				tu.ToolName, tu.CallID = e.Item.Name, e.Item.CallID
			}
		case "response.output_item.done":
			done = append(done, e.Item)
		case "response.completed":
			completed = new(respObject)
			mustUnmarshal(t, e.Response, completed)
		}
	}
	if completed == nil {
		t.Fatal("no response.completed")
	}
	tu.fromResponse(t, *completed, false)
	// The finished items must agree with the deltas (codex records items
	// from output_item.done).
	var again turn
	again.fromResponse(t, respObject{Object: "response", Status: "completed", Usage: completed.Usage, Output: done}, true)
	if again.Thinking != tu.Thinking || again.Text != tu.Text || again.Args != tu.Args || again.ToolName != tu.ToolName {
		t.Fatalf("output_item.done items %+v disagree with deltas %+v", again, tu)
	}
	if len(completed.Output) != len(done) {
		t.Fatalf("response.completed has %d items, %d were done", len(completed.Output), len(done))
	}
}

func decodeResponsesJSON(t *testing.T, tu *turn) {
	var r respObject
	mustUnmarshal(t, tu.Body, &r)
	tu.fromResponse(t, r, true)
}

// ---- Anthropic Messages ----

type msgUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

type msgBlock struct {
	Type     string          `json:"type"`
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Input    json.RawMessage `json:"input"`
	Text     string          `json:"text"`
	Thinking string          `json:"thinking"`
}

func decodeMessagesStream(t *testing.T, tu *turn, events []sseEvent) {
	open := -1
	for _, ev := range events {
		var e struct {
			Type         string   `json:"type"`
			Index        int      `json:"index"`
			ContentBlock msgBlock `json:"content_block"`
			Delta        struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				Thinking    string `json:"thinking"`
				Signature   string `json:"signature"`
				PartialJSON string `json:"partial_json"`
				StopReason  string `json:"stop_reason"`
			} `json:"delta"`
			Message struct {
				Usage msgUsage `json:"usage"`
			} `json:"message"`
			Usage *msgUsage `json:"usage"`
		}
		mustUnmarshal(t, []byte(ev.Data), &e)
		if e.Type != ev.Name {
			t.Fatalf("event name %q but type %q", ev.Name, e.Type)
		}
		tu.Events = append(tu.Events, e.Type)
		switch e.Type {
		case "message_start":
			tu.InTok = e.Message.Usage.InputTokens
		case "content_block_start":
			if open != -1 {
				t.Fatalf("block %d started inside block %d", e.Index, open)
			}
			open = e.Index
			if e.ContentBlock.Type == "tool_use" {
				tu.ToolName, tu.CallID = e.ContentBlock.Name, e.ContentBlock.ID
			}
		case "content_block_delta":
			if e.Index != open {
				t.Fatalf("delta for block %d while %d is open", e.Index, open)
			}
			switch e.Delta.Type {
			case "text_delta":
				tu.Text += e.Delta.Text
			case "thinking_delta":
				tu.Thinking += e.Delta.Thinking
			case "input_json_delta":
				tu.Args += e.Delta.PartialJSON
			case "signature_delta":
				if e.Delta.Signature == "" {
					t.Fatal("empty signature")
				}
			default:
				t.Fatalf("unknown delta %q", e.Delta.Type)
			}
		case "content_block_stop":
			open = -1
		case "message_delta":
			tu.Stop = e.Delta.StopReason
			if e.Usage != nil {
				tu.OutTok = e.Usage.OutputTokens
			}
		}
	}
	if open != -1 {
		t.Fatal("a content block was never stopped")
	}
}

func decodeMessagesJSON(t *testing.T, tu *turn) {
	var m struct {
		Type       string     `json:"type"`
		Content    []msgBlock `json:"content"`
		StopReason string     `json:"stop_reason"`
		Usage      *msgUsage  `json:"usage"`
	}
	mustUnmarshal(t, tu.Body, &m)
	if m.Type != "message" || m.Usage == nil {
		t.Fatalf("message: %s", tu.Body)
	}
	tu.Stop, tu.InTok, tu.OutTok = m.StopReason, m.Usage.InputTokens, m.Usage.OutputTokens
	for _, b := range m.Content {
		switch b.Type {
		case "thinking":
			tu.Thinking += b.Thinking
		case "text":
			tu.Text += b.Text
		case "tool_use":
			tu.ToolName, tu.Args, tu.CallID = b.Name, string(b.Input), b.ID
		}
	}
}
