package trajectory

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// reqInfo is what a request tells: model, whether tools were offered, and
// the tool results it carries (callID → result).
type reqInfo struct {
	model   string
	tools   bool
	stream  bool
	results []reqResult
}

type reqResult struct {
	callID  string
	output  string
	isError bool
}

type reqBody struct {
	Model    string            `json:"model"`
	Stream   bool              `json:"stream"`
	Tools    []json.RawMessage `json:"tools"`
	Messages []struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCallID string          `json:"tool_call_id"`
	} `json:"messages"`
	Input json.RawMessage `json:"input"`
}

var errIncomplete = errors.New("trajectory: request body is not a whole JSON object")

func parseRequestBody(api API, body []byte) (reqInfo, error) {
	// Cheap pre-check: an upload still under way cannot end with '}'.
	if t := bytes.TrimSpace(body); len(t) == 0 || t[len(t)-1] != '}' {
		return reqInfo{}, errIncomplete
	}
	var b reqBody
	if err := json.Unmarshal(body, &b); err != nil {
		return reqInfo{}, err
	}
	info := reqInfo{model: b.Model, tools: len(b.Tools) > 0, stream: b.Stream}
	switch api {
	case AnthropicMessages:
		for _, m := range b.Messages {
			if m.Role != "user" || len(m.Content) == 0 || m.Content[0] != '[' {
				continue
			}
			var blocks []struct {
				Type      string          `json:"type"`
				ToolUseID string          `json:"tool_use_id"`
				Content   json.RawMessage `json:"content"`
				IsError   bool            `json:"is_error"`
			}
			if json.Unmarshal(m.Content, &blocks) != nil {
				continue
			}
			for _, bl := range blocks {
				if bl.Type == "tool_result" || bl.Type == "mcp_tool_result" {
					info.results = append(info.results, reqResult{bl.ToolUseID, contentText(bl.Content), bl.IsError})
				}
			}
		}
	case OpenAIChat:
		for _, m := range b.Messages {
			if m.Role == "tool" {
				info.results = append(info.results, reqResult{callID: m.ToolCallID, output: contentText(m.Content)})
			}
		}
	case OpenAIResponses:
		if len(b.Input) == 0 || b.Input[0] != '[' {
			break // a plain string prompt
		}
		var items []struct {
			Type   string          `json:"type"`
			CallID string          `json:"call_id"`
			ID     string          `json:"id"`
			Output json.RawMessage `json:"output"`
		}
		if err := json.Unmarshal(b.Input, &items); err != nil {
			return reqInfo{}, err
		}
		for _, it := range items {
			switch it.Type {
			case "function_call_output", "custom_tool_call_output", "local_shell_call_output":
				id := it.CallID
				if id == "" {
					id = it.ID
				}
				info.results = append(info.results, reqResult{callID: id, output: contentText(it.Output)})
			}
		}
	}
	return info, nil
}

// contentText is the text of a result's content: a string, an array of
// parts (their texts, one per line; images and the like leave no text),
// or an object with a content/output string (older codex).
func contentText(raw json.RawMessage) string {
	if s, ok := jsonString(raw); ok {
		return s
	}
	if len(raw) > 0 && raw[0] == '[' {
		return strings.Join(textParts(raw), "\n")
	}
	if len(raw) > 0 && raw[0] == '{' {
		var o struct {
			Content json.RawMessage `json:"content"`
			Output  json.RawMessage `json:"output"`
		}
		if json.Unmarshal(raw, &o) == nil {
			if s := contentText(o.Content); s != "" {
				return s
			}
			return contentText(o.Output)
		}
	}
	return ""
}

// parseRequest parses the buffered request. final is true at End: a body
// that does not parse then is given up; before End (from a query) it may
// still be arriving, and a failure changes nothing.
func (x *Exchange) parseRequest(final bool) {
	x.parseMu.Lock()
	defer x.parseMu.Unlock()
	if x.reqParsed {
		return
	}
	x.reqMu.Lock()
	// Appends never touch bytes below a block's len, so the blocks can be
	// read without the lock while RequestBody goes on appending.
	blocks, n, over := append([][]byte(nil), x.reqBuf...), x.reqLen, x.reqOver
	if final {
		x.reqClosed = true
	}
	x.reqMu.Unlock()
	if !final && !over && !endsObject(blocks) {
		return // still arriving: do not copy megabytes for nothing
	}
	buf := make([]byte, 0, n)
	for _, b := range blocks {
		buf = append(buf, b...)
	}

	var info reqInfo
	err := errIncomplete
	if !over {
		info, err = parseRequestBody(x.api, buf)
	}
	if err != nil && !final {
		return
	}
	x.reqParsed = true
	x.reqMu.Lock()
	x.reqBuf, x.reqLen, x.reqClosed = nil, 0, true
	x.reqMu.Unlock()

	r := x.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		x.reqState = reqUnparsed
		return
	}
	x.reqState = reqOK
	x.offersTools, x.stream = info.tools, info.stream
	if info.model != "" {
		x.model = info.model // what the CLI asked for, over what the upstream named
	}
	for _, res := range info.results {
		// Only results for calls this Record's responses asked for: the
		// history also repeats older turns' results.
		if _, ok := r.callByID[res.callID]; !ok || res.callID == "" {
			continue
		}
		if _, seen := r.results[res.callID]; seen {
			continue
		}
		if !r.take(x, overhead+len(res.output)) {
			continue
		}
		if r.results == nil {
			r.results = map[string]*result{}
		}
		r.results[res.callID] = &result{output: res.output, isError: res.isError, n: x.n}
		r.nResults++
	}
}

// endsObject reports whether the buffered bytes end with '}' (ignoring
// trailing whitespace), as a whole JSON object must.
func endsObject(blocks [][]byte) bool {
	for i := len(blocks) - 1; i >= 0; i-- {
		if t := bytes.TrimRight(blocks[i], " \t\r\n"); len(t) > 0 {
			return t[len(t)-1] == '}'
		}
	}
	return false
}
