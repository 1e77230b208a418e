package modelproxy

import (
	"bytes"
	"encoding/json"
	"math"
	"mime"
	"net/http"
	"slices"
	"strings"
)

// Bounds on what the usage scanner holds, so a huge or endless response
// cannot grow the proxy's memory.
const (
	maxSSELine  = 1 << 20 // longer data lines are skipped
	maxJSONBody = 4 << 20 // longer JSON bodies are not scanned
	// maxTail is how much of an overlong line or body is kept, its end:
	// where a Responses response.completed (which repeats the request's
	// instructions and tools) carries its usage.
	maxTail = 64 << 10
)

// usageScanner extracts token usage from a response as it streams past:
// from every SSE data line mentioning "usage", or from a whole JSON body.
type usageScanner struct {
	sse      bool
	buf      []byte // the current SSE line, or the JSON body so far
	overflow bool   // buf exceeded its bound; skip (the rest of) it
	// overflowData: the overflowing line is an SSE data line.
	overflowData bool
	tail         []byte // the last maxTail bytes of an overflowing line or body
	u            Usage
	seen         bool
	model        string // the first valid "model" seen
	// final: the response's end was seen (a stream's last event, whole;
	// a whole JSON body): its usage is complete. A response cut short,
	// or one that ends in an error event, is not.
	final bool
	// finalNext: the last event: line named a final event, whose data
	// line must still arrive whole.
	finalNext bool
}

// finalEvents are the SSE events after which a stream's usage is
// complete: Anthropic's message_delta (the output count) and
// message_stop, the Responses API's last event.
var finalEvents = []string{"message_delta", "message_stop", "response.completed", "response.incomplete", "response.failed"}

// newUsageScanner returns a scanner for an SSE or JSON response, else nil.
func newUsageScanner(h http.Header) *usageScanner {
	if ce := h.Get("Content-Encoding"); ce != "" && ce != "identity" {
		return nil // compressed despite our request: unreadable
	}
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	switch {
	case mt == "text/event-stream":
		return &usageScanner{sse: true}
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return &usageScanner{}
	}
	return nil
}

func (s *usageScanner) write(b []byte) {
	if !s.sse {
		s.add(b, maxJSONBody)
		return
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			s.add(b, maxSSELine)
			return
		}
		s.add(b[:i], maxSSELine)
		s.line(true)
		b = b[i+1:]
	}
}

func (s *usageScanner) add(b []byte, limit int) {
	if !s.overflow && len(s.buf)+len(b) > limit {
		s.overflow = true
		head := append(slices.Clip(s.buf), b[:min(len(b), 5)]...)
		s.overflowData = bytes.HasPrefix(head, []byte("data:"))
		s.keepTail(s.buf)
		s.buf = s.buf[:0]
	}
	if s.overflow {
		s.keepTail(b)
		return
	}
	s.buf = append(s.buf, b...)
}

// keepTail appends b to the tail, keeping its last maxTail bytes.
func (s *usageScanner) keepTail(b []byte) {
	if len(b) >= maxTail {
		s.tail = append(s.tail[:0], b[len(b)-maxTail:]...)
		return
	}
	if over := len(s.tail) + len(b) - maxTail; over > 0 {
		s.tail = append(s.tail[:0], s.tail[over:]...)
	}
	s.tail = append(s.tail, b...)
}

// parseTail reads the last "usage" object of an overlong line or body,
// when its tail holds it whole.
// and reports whether it did.
func (s *usageScanner) parseTail() bool {
	i := bytes.LastIndex(s.tail, []byte(`"usage":`))
	if i < 0 {
		return false
	}
	var v any
	if json.NewDecoder(bytes.NewReader(s.tail[i+len(`"usage":`):])).Decode(&v) == nil {
		if m, ok := v.(map[string]any); ok {
			s.count(m)
			return true
		}
	}
	return false
}

// line scans the SSE line in buf and starts the next one; whole: it
// ended with its newline (else the stream ended within it).
func (s *usageScanner) line(whole bool) {
	l := bytes.TrimSuffix(s.buf, []byte("\r"))
	ev, isEvent := bytes.CutPrefix(l, []byte("event:"))
	d, isData := bytes.CutPrefix(l, []byte("data:"))
	switch {
	case s.overflow: // buf is empty: the tail holds the line's end
		parsed := s.parseTail()
		if s.overflowData {
			s.dataLine(parsed, false, whole)
		}
	case isEvent:
		s.finalNext = slices.Contains(finalEvents, string(bytes.TrimSpace(ev)))
	case isData && bytes.Equal(bytes.TrimSpace(d), []byte("[DONE]")): // OpenAI chat's end
		s.dataLine(false, true, whole)
	case isData && (s.finalNext || bytes.Contains(d, []byte(`"usage"`)) || bytes.Contains(d, []byte(`"message_stop"`))):
		parsed, last := s.parse(d)
		s.dataLine(parsed, last, whole)
	case isData:
		s.finalNext = false
	}
	s.buf, s.overflow, s.tail = s.buf[:0], false, s.tail[:0]
}

// dataLine notes a data line's end: a final event counts once its data
// line arrived whole and was read (or it was final by itself: last).
func (s *usageScanner) dataLine(parsed, last, whole bool) {
	s.final = s.final || whole && (last || s.finalNext && parsed)
	s.finalNext = false
}

// finish scans what is left and returns the usage, or nil if none was
// seen, and the model the response named ("" if none); s.final then says
// whether the usage is complete.
func (s *usageScanner) finish() (*Usage, string) {
	switch {
	case s.sse:
		if len(s.buf) > 0 || s.overflow {
			s.line(false) // a last line without newline
		}
	case !s.overflow:
		s.final, _ = s.parse(s.buf) // a whole JSON body
	default:
		s.parseTail()
	}
	s.buf = nil
	if !s.seen {
		return nil, s.model
	}
	u := s.u
	return &u, s.model
}

// parse scans one JSON value; ok false when it is not one. last: it is
// a stream's last event by its type (a stream without event: lines), or
// OpenAI chat's usage chunk (no choices: the last before [DONE]; a
// provider may put a usage on every chunk).
func (s *usageScanner) parse(b []byte) (ok, last bool) {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return false, false
	}
	s.walk(v, false)
	if m, isObj := v.(map[string]any); isObj && s.sse {
		typ, _ := m["type"].(string)
		choices, chat := m["choices"].([]any)
		_, usage := m["usage"].(map[string]any)
		last = slices.Contains(finalEvents, typ) || chat && len(choices) == 0 && usage
	}
	return true, last
}

// walk looks for objects under a "usage" key at any depth: Anthropic puts
// it in message.usage and at the top, OpenAI chat at the top, Responses in
// response.usage. The model is the first "model" string beside or above
// one (message.model, response.model, a chunk's model).
func (s *usageScanner) walk(v any, isUsage bool) {
	switch v := v.(type) {
	case map[string]any:
		if isUsage {
			s.count(v)
		}
		if m, ok := v["model"].(string); ok && s.model == "" && validModel(m) {
			s.model = m
		}
		for k, c := range v {
			s.walk(c, k == "usage")
		}
	case []any:
		for _, c := range v {
			s.walk(c, false)
		}
	}
}

// count reads one usage object in any of the wire APIs' shapes and raises
// each count of s.u to the normalized value: input counts every input
// token, cached ones included. OpenAI reports cached tokens inside its
// input count (prompt_tokens_details / input_tokens_details.cached_tokens);
// Anthropic outside it (cache_read_input_tokens, cache_creation_input_tokens).
func (s *usageScanner) count(m map[string]any) {
	n := func(m map[string]any, names ...string) (v int64, ok bool) {
		for _, name := range names {
			if f, isNum := m[name].(float64); isNum && f >= 0 && f < 1e15 {
				v, ok = max(v, int64(f)), true
			}
		}
		return v, ok
	}
	in, okIn := n(m, "input_tokens", "prompt_tokens")
	out, okOut := n(m, "output_tokens", "completion_tokens")
	read, okRead := n(m, "cache_read_input_tokens")
	write, okWrite := n(m, "cache_creation_input_tokens")
	if _, chat := m["prompt_tokens"]; !chat {
		// Anthropic's input leaves the cache out. A gateway that reports
		// prompt_tokens (cache included) beside these adds nothing.
		in = sat(in, sat(read, write))
	}
	for _, k := range []string{"prompt_tokens_details", "input_tokens_details"} {
		if d, isObj := m[k].(map[string]any); isObj {
			if c, ok := n(d, "cached_tokens"); ok {
				read, okRead = max(read, min(c, in)), true
			}
		}
	}
	if c, ok := n(m, "prompt_cache_hit_tokens"); ok { // DeepSeek's, inside prompt_tokens
		read, okRead = max(read, min(c, in)), true
	}
	if !okIn && !okOut && !okRead && !okWrite {
		return
	}
	s.seen = true
	s.u.InputTokens = max(s.u.InputTokens, in)
	s.u.OutputTokens = max(s.u.OutputTokens, out)
	s.u.CacheReadTokens = max(s.u.CacheReadTokens, read)
	s.u.CacheWriteTokens = max(s.u.CacheWriteTokens, write)
}

// validModel: a model name worth recording (the upstream's text goes into
// logs and metrics): short, printable ASCII, no blanks.
func validModel(m string) bool {
	if m == "" || len(m) > 128 {
		return false
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// sat adds two counts without wrapping.
func sat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
