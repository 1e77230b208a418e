package trajectory

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
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

type reqMsg struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
}

type reqItem struct {
	Type   string          `json:"type"`
	CallID string          `json:"call_id"`
	ID     string          `json:"id"`
	Output json.RawMessage `json:"output"`
}

type reqBody struct {
	Model    string            `json:"model"`
	Stream   bool              `json:"stream"`
	Tools    []json.RawMessage `json:"tools"`
	Messages []reqMsg          `json:"messages"`
	Input    json.RawMessage   `json:"input"`
}

var errIncomplete = errors.New("trajectory: request body is not a whole JSON object")

// wholeObject is a cheap pre-check: an upload still under way cannot end
// with '}'.
func wholeObject(body []byte) bool {
	t := bytes.TrimSpace(body)
	return len(t) > 0 && t[len(t)-1] == '}'
}

// parseRequestFor decodes what a Record needs from a request body: quickScan
// when it can tell (decoding only the messages that may carry a result
// for one of ids), else parseRequestBody. Both give the same answer for
// the results of those ids.
func parseRequestFor(api API, body []byte, ids *pendingIDs) (reqInfo, error) {
	if !wholeObject(body) {
		return reqInfo{}, errIncomplete
	}
	q, ok := quickScan(api, body, ids)
	if !ok {
		return parseRequestBody(api, body)
	}
	info := reqInfo{model: q.model, tools: q.tools, stream: q.stream}
	for _, e := range q.elems {
		raw := body[e[0]:e[1]]
		if api == OpenAIResponses {
			var it reqItem
			if json.Unmarshal(raw, &it) != nil {
				return parseRequestBody(api, body)
			}
			info.addItem(it)
			continue
		}
		var m reqMsg
		if json.Unmarshal(raw, &m) != nil {
			return parseRequestBody(api, body)
		}
		info.addMsg(api, m)
	}
	return info, nil
}

// parseRequestBody decodes the whole body.
func parseRequestBody(api API, body []byte) (reqInfo, error) {
	if !wholeObject(body) {
		return reqInfo{}, errIncomplete
	}
	var b reqBody
	if err := json.Unmarshal(body, &b); err != nil {
		return reqInfo{}, err
	}
	info := reqInfo{model: b.Model, tools: len(b.Tools) > 0, stream: b.Stream}
	switch api {
	case AnthropicMessages, OpenAIChat:
		for _, m := range b.Messages {
			info.addMsg(api, m)
		}
	case OpenAIResponses:
		if len(b.Input) == 0 || b.Input[0] != '[' {
			break // a plain string prompt
		}
		var items []reqItem
		if err := json.Unmarshal(b.Input, &items); err != nil {
			return reqInfo{}, err
		}
		for _, it := range items {
			info.addItem(it)
		}
	}
	return info, nil
}

// addMsg adds the tool results of a chat or Anthropic message.
func (info *reqInfo) addMsg(api API, m reqMsg) {
	switch api {
	case AnthropicMessages:
		if m.Role != "user" || len(m.Content) == 0 || m.Content[0] != '[' {
			return
		}
		var blocks []struct {
			Type      string          `json:"type"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
			IsError   bool            `json:"is_error"`
		}
		if json.Unmarshal(m.Content, &blocks) != nil {
			return
		}
		for _, bl := range blocks {
			if bl.Type == "tool_result" || bl.Type == "mcp_tool_result" {
				info.results = append(info.results, reqResult{bl.ToolUseID, contentText(bl.Content), bl.IsError})
			}
		}
	case OpenAIChat:
		if m.Role == "tool" {
			info.results = append(info.results, reqResult{callID: m.ToolCallID, output: contentText(m.Content)})
		}
	}
}

// addItem adds the tool result of a Responses input item.
func (info *reqInfo) addItem(it reqItem) {
	switch it.Type {
	case "function_call_output", "custom_tool_call_output", "local_shell_call_output":
		id := it.CallID
		if id == "" {
			id = it.ID
		}
		info.results = append(info.results, reqResult{callID: id, output: contentText(it.Output)})
	}
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
	if !final && !over && (!endsObject(blocks) || n == x.triedLen) {
		return // still arriving, or tried as it is: do not copy megabytes for nothing
	}

	// The calls still waiting for a result: only theirs can count.
	r := x.r
	r.mu.Lock()
	var waiting []string
	for id := range r.callByID {
		if _, done := r.results[id]; !done && id != "" {
			waiting = append(waiting, id)
		}
	}
	r.mu.Unlock()
	ids := newPendingIDs(waiting)

	var info reqInfo
	err := errIncomplete
	if !over {
		var body []byte
		var pb *[]byte
		if len(blocks) == 1 {
			body = blocks[0] // no copy
		} else {
			pb = getBuf(n)
			for _, b := range blocks {
				*pb = append(*pb, b...)
			}
			body = *pb
		}
		info, err = parseRequestFor(x.api, body, &ids)
		putBuf(pb) // nothing decoded refers to body
	}
	if err != nil && !final {
		x.triedLen = n
		return
	}
	x.reqParsed = true
	x.reqMu.Lock()
	x.releaseReq()
	x.reqClosed = true
	x.reqMu.Unlock()

	r.mu.Lock()
	defer r.mu.Unlock()
	if over {
		r.truncated, x.truncated = true, true // the results it carried are lost
	}
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
		if r.results == nil {
			r.results = map[string]*result{}
		}
		out := r.sec.str(res.output)
		if !r.take(x, overhead+len(out)) {
			// Not kept, but the call has its result (PendingCalls).
			r.results[res.callID] = &result{n: x.n, lost: true}
			continue
		}
		r.results[res.callID] = &result{output: out, isError: res.isError, n: x.n}
		r.nResults++
	}
}

// releaseReq gives the request's blocks back to the pool; x.reqMu is held
// and nothing reads them any more.
func (x *Exchange) releaseReq() {
	for _, b := range x.reqBuf {
		if cap(b) == reqBlock {
			blockPool.Put((*[reqBlock]byte)(b[:reqBlock]))
		}
	}
	x.r.reqBytes.Add(-int64(x.reqLen))
	x.reqBuf, x.reqLen = nil, 0
}

// blockPool holds request buffer blocks, so that buffering a request
// allocates (and faults in) no new memory once the proxy is warm.
var blockPool = sync.Pool{New: func() any { return new([reqBlock]byte) }}

// bufPool holds the buffers a request spanning several blocks is joined
// in for parsing.
var bufPool sync.Pool

// maxPooledBuf bounds the joined buffers kept for reuse.
const maxPooledBuf = 4 << 20

func getBuf(n int) *[]byte {
	if pb, _ := bufPool.Get().(*[]byte); pb != nil && cap(*pb) >= n {
		*pb = (*pb)[:0]
		return pb
	}
	b := make([]byte, 0, n)
	return &b
}

func putBuf(pb *[]byte) {
	if pb != nil && cap(*pb) <= maxPooledBuf {
		bufPool.Put(pb)
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
