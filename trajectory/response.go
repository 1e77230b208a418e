package trajectory

import (
	"encoding/json"
	"strconv"
)

// ToolCall is a tool call the model asked for, as the upstream sent it.
type ToolCall struct {
	// ID is the model's call id: Anthropic tool_use id, chat tool_calls
	// id, Responses call_id.
	ID   string `json:"id"`
	Name string `json:"name"`
	Kind string `json:"kind"` // KindFunction, KindCustom, KindLocalShell or KindServer
	// Arguments are exactly what the model sent: the tool_use input JSON
	// (the concatenated input_json_delta when streamed), the function
	// arguments string, a custom tool's free-form input (codex's
	// apply_patch), or a local shell call's action object.
	Arguments string `json:"arguments"`
	Exchange  int    `json:"exchange"` // 1-based index of the exchange whose response asked for it
	Complete  bool   `json:"complete"` // the response finished (the arguments are whole)
}

// Tool call kinds.
const (
	KindFunction   = "function"    // a client tool with JSON arguments
	KindCustom     = "custom"      // Responses custom_tool_call: free-form input
	KindLocalShell = "local_shell" // Responses local_shell_call
	KindServer     = "server"      // run by the provider (Anthropic server_tool_use): no CLI result
)

// Input returns the arguments as JSON: themselves when they are valid JSON,
// else as a JSON string (a custom tool's patch, a cut-short stream).
func (c ToolCall) Input() json.RawMessage {
	if json.Valid([]byte(c.Arguments)) {
		return json.RawMessage(c.Arguments)
	}
	b, _ := json.Marshal(c.Arguments)
	return b
}

// ---- Anthropic Messages ----

type antBlock struct {
	Type     string          `json:"type"`
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Text     string          `json:"text"`
	Thinking string          `json:"thinking"`
	Input    json.RawMessage `json:"input"`
}

type antMessage struct {
	Model      string     `json:"model"`
	Content    []antBlock `json:"content"`
	StopReason string     `json:"stop_reason"`
}

type antDelta struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Thinking    string `json:"thinking"`
	PartialJSON string `json:"partial_json"`
	StopReason  string `json:"stop_reason"`
}

type antEvent struct {
	Type         string      `json:"type"`
	Index        int         `json:"index"`
	Message      *antMessage `json:"message"`
	ContentBlock *antBlock   `json:"content_block"`
	Delta        *antDelta   `json:"delta"`
	// A non-streamed answer is the message itself.
	antMessage
}

func (x *Exchange) anthropic(data []byte) error {
	var ev antEvent
	if !quickAnthropic(data, &ev) {
		ev = antEvent{}
		if err := unmarshal(data, &ev); err != nil {
			return err
		}
	}
	r := x.r
	r.mu.Lock()
	defer r.mu.Unlock()
	key := "a" + strconv.Itoa(ev.Index)
	switch ev.Type {
	case "message": // non-streamed
		x.setModel(ev.Model)
		for i, b := range ev.Content {
			x.antBlock("a"+strconv.Itoa(i), b, true)
		}
		x.complete(ev.StopReason)
	case "message_start":
		if m := ev.Message; m != nil {
			x.setModel(m.Model)
			for i, b := range m.Content {
				x.antBlock("a"+strconv.Itoa(i), b, true)
			}
		}
	case "content_block_start":
		if ev.ContentBlock != nil {
			x.antBlock(key, *ev.ContentBlock, false)
		}
	case "content_block_delta":
		d := ev.Delta
		if d == nil {
			return nil
		}
		switch d.Type {
		case "text_delta":
			x.appendPart(key, kindText, d.Text)
		case "thinking_delta":
			x.appendPart(key, kindReasoning, d.Thinking)
		case "input_json_delta":
			if c := x.callBy[key]; c != nil {
				x.appendArgs(c, d.PartialJSON)
			}
		}
	case "message_delta":
		if ev.Delta != nil && ev.Delta.StopReason != "" {
			x.stop = ev.Delta.StopReason
		}
	case "message_stop":
		x.complete("")
	case "error":
		x.failed = true
	}
	return nil
}

// antBlock records a content block; whole is true for finished blocks
// (non-streamed answers), whose tool input is final.
func (x *Exchange) antBlock(key string, b antBlock, whole bool) {
	switch b.Type {
	case "text":
		x.fillPart(key, kindText, b.Text)
	case "thinking":
		x.fillPart(key, kindReasoning, b.Thinking)
	case "tool_use", "server_tool_use", "mcp_tool_use":
		kind := KindFunction
		if b.Type != "tool_use" {
			kind = KindServer
		}
		c := x.callFor(key, kind)
		x.setID(c, b.ID)
		x.setName(c, b.Name)
		if c != nil && len(b.Input) > 0 {
			x.setArgs(c, string(b.Input))
			// When streamed the start carries a placeholder ({}) that
			// the input_json_delta events replace.
			c.fromStart = !whole
		}
	}
}

func (x *Exchange) setModel(m string) {
	if m != "" && x.model == "" {
		x.model = m
	}
}

// ---- OpenAI chat completions ----

type chatToolCall struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type chatMsg struct {
	Content          json.RawMessage `json:"content"`
	ReasoningContent string          `json:"reasoning_content"`
	Reasoning        json.RawMessage `json:"reasoning"`
	ToolCalls        []chatToolCall  `json:"tool_calls"`
}

type chatChoice struct {
	Index        int      `json:"index"`
	Delta        *chatMsg `json:"delta"`
	Message      *chatMsg `json:"message"`
	FinishReason *string  `json:"finish_reason"`
}

type chatChunk struct {
	Object  string          `json:"object"`
	Model   string          `json:"model"`
	Choices []chatChoice    `json:"choices"`
	Error   json.RawMessage `json:"error"`
}

func (x *Exchange) chat(data []byte) error {
	var ch chatChunk
	if !quickChat(data, &ch) {
		ch = chatChunk{}
		if err := unmarshal(data, &ch); err != nil {
			return err
		}
	}
	r := x.r
	r.mu.Lock()
	defer r.mu.Unlock()
	x.setModel(ch.Model)
	if len(ch.Error) > 0 && string(ch.Error) != "null" {
		x.failed = true
		return nil
	}
	for _, c := range ch.Choices {
		m, whole := c.Delta, false
		if c.Message != nil {
			m, whole = c.Message, true
		}
		ck := "c" + strconv.Itoa(c.Index)
		if m != nil {
			if s, ok := jsonString(m.Content); ok {
				x.appendPart(ck+"t", kindText, s)
			} else {
				for _, s := range textParts(m.Content) {
					x.appendPart(ck+"t", kindText, s)
				}
			}
			// DeepSeek-style reasoning_content, else OpenRouter-style
			// reasoning (never both: some providers mirror one in the other).
			if m.ReasoningContent != "" {
				x.appendPart(ck+"r", kindReasoning, m.ReasoningContent)
			} else if s, ok := jsonString(m.Reasoning); ok {
				x.appendPart(ck+"r", kindReasoning, s)
			}
			for i, tc := range m.ToolCalls {
				x.chatToolCall(ck, i, tc, whole)
			}
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			x.complete(*c.FinishReason)
		} else if whole {
			x.complete("")
		}
	}
	return nil
}

func (x *Exchange) chatToolCall(ck string, pos int, tc chatToolCall, whole bool) {
	var key string
	switch {
	case tc.Index != nil:
		key = ck + "f" + strconv.Itoa(*tc.Index)
	case whole:
		key = ck + "f" + strconv.Itoa(pos)
	case tc.ID != "":
		key = ck + "id" + tc.ID
	default:
		// No index and no id: a continuation of the latest call.
		if n := len(x.calls); n > 0 {
			c := x.calls[n-1]
			s, ok := jsonString(tc.Function.Arguments)
			if !ok {
				s = string(tc.Function.Arguments)
			}
			x.appendArgs(c, s)
		}
		return
	}
	c := x.callFor(key, KindFunction)
	x.setID(c, tc.ID)
	x.setName(c, tc.Function.Name)
	args := tc.Function.Arguments
	s, ok := jsonString(args)
	if !ok && len(args) > 0 && string(args) != "null" {
		s = string(args) // some providers send an object, not a string
	}
	if whole {
		x.setArgs(c, s)
	} else {
		x.appendArgs(c, s)
	}
}

// ---- OpenAI Responses ----

type respText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type respItem struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Input     string          `json:"input"`
	Content   []respText      `json:"content"`
	Summary   []respText      `json:"summary"`
	Action    json.RawMessage `json:"action"`
}

type respObject struct {
	Object string     `json:"object"`
	Status string     `json:"status"`
	Model  string     `json:"model"`
	Output []respItem `json:"output"`
}

type respEvent struct {
	Type         string      `json:"type"`
	Response     *respObject `json:"response"`
	Item         *respItem   `json:"item"`
	ItemID       string      `json:"item_id"`
	OutputIndex  int         `json:"output_index"`
	ContentIndex int         `json:"content_index"`
	SummaryIndex int         `json:"summary_index"`
	Delta        string      `json:"delta"`
	Text         string      `json:"text"`
	Arguments    string      `json:"arguments"`
	Input        string      `json:"input"`
	// A non-streamed answer is the response object itself.
	respObject
}

func itemKey(id string, idx int) string {
	if id != "" {
		return id
	}
	return "#" + strconv.Itoa(idx)
}

func (x *Exchange) responses(data []byte) error {
	var ev respEvent
	if !quickResponses(data, &ev) {
		ev = respEvent{}
		if err := unmarshal(data, &ev); err != nil {
			return err
		}
	}
	r := x.r
	r.mu.Lock()
	defer r.mu.Unlock()
	k := itemKey(ev.ItemID, ev.OutputIndex)
	switch ev.Type {
	case "response.created", "response.in_progress":
		if ev.Response != nil {
			x.setModel(ev.Response.Model)
		}
	case "response.output_item.added", "response.output_item.done":
		if ev.Item != nil {
			x.respItem(*ev.Item, ev.OutputIndex, ev.Type == "response.output_item.done")
		}
	case "response.output_text.delta", "response.refusal.delta":
		x.appendPart("t:"+k+":"+strconv.Itoa(ev.ContentIndex), kindText, ev.Delta)
	case "response.output_text.done":
		x.fillPart("t:"+k+":"+strconv.Itoa(ev.ContentIndex), kindText, ev.Text)
	case "response.reasoning_summary_text.delta":
		x.appendPart("s:"+k+":"+strconv.Itoa(ev.SummaryIndex), kindReasoning, ev.Delta)
	case "response.reasoning_summary_text.done":
		x.fillPart("s:"+k+":"+strconv.Itoa(ev.SummaryIndex), kindReasoning, ev.Text)
	case "response.reasoning_text.delta":
		x.appendPart("rc:"+k+":"+strconv.Itoa(ev.ContentIndex), kindReasoning, ev.Delta)
	case "response.reasoning_text.done":
		x.fillPart("rc:"+k+":"+strconv.Itoa(ev.ContentIndex), kindReasoning, ev.Text)
	case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
		x.appendArgs(x.callBy["f:"+k], ev.Delta)
	case "response.function_call_arguments.done":
		x.setArgs(x.callBy["f:"+k], ev.Arguments)
	case "response.custom_tool_call_input.done":
		x.setArgs(x.callBy["f:"+k], ev.Input)
	case "response.completed", "response.incomplete", "response.failed":
		if o := ev.Response; o != nil {
			x.respObject(*o)
		}
		if ev.Type == "response.failed" {
			x.failed = true
			x.complete("failed")
		}
	case "error":
		x.failed = true
	case "":
		if ev.Object == "response" { // non-streamed
			x.respObject(ev.respObject)
		}
	}
	return nil
}

func (x *Exchange) respObject(o respObject) {
	x.setModel(o.Model)
	for i, it := range o.Output {
		x.respItem(it, i, true)
	}
	x.complete(o.Status)
}

// respItem records an output item; done is true for finished items.
func (x *Exchange) respItem(it respItem, idx int, done bool) {
	k := itemKey(it.ID, idx)
	switch it.Type {
	case "message":
		for j, c := range it.Content {
			if c.Type == "output_text" || c.Type == "refusal" {
				x.fillPart("t:"+k+":"+strconv.Itoa(j), kindText, c.Text)
			}
		}
	case "reasoning":
		for j, s := range it.Summary {
			x.fillPart("s:"+k+":"+strconv.Itoa(j), kindReasoning, s.Text)
		}
		for j, c := range it.Content {
			x.fillPart("rc:"+k+":"+strconv.Itoa(j), kindReasoning, c.Text)
		}
	case "function_call", "custom_tool_call", "local_shell_call":
		kind, args := KindFunction, it.Arguments
		switch it.Type {
		case "custom_tool_call":
			kind, args = KindCustom, it.Input
		case "local_shell_call":
			kind, args = KindLocalShell, string(it.Action)
			if it.Name == "" {
				it.Name = "local_shell"
			}
		}
		c := x.callFor("f:"+k, kind)
		id := it.CallID
		if id == "" {
			id = it.ID
		}
		x.setID(c, id)
		x.setName(c, it.Name)
		if done || args != "" {
			x.setArgs(c, args)
		}
		if done && c != nil {
			c.Complete = true
		}
	}
}

// ---- JSON helpers ----

// jsonString decodes a JSON string value.
func jsonString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// textParts returns the texts of an array of content parts
// ({"type":"text","text":…} and the like).
func textParts(raw json.RawMessage) []string {
	if len(raw) == 0 || raw[0] != '[' {
		return nil
	}
	var ps []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &ps) != nil {
		return nil
	}
	var out []string
	for _, p := range ps {
		if p.Text != "" {
			out = append(out, p.Text)
		}
	}
	return out
}
