package modelproxy

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"strings"
)

// Bounds on what the usage scanner holds, so a huge or endless response
// cannot grow the proxy's memory.
const (
	maxSSELine  = 1 << 20 // longer data lines are skipped
	maxJSONBody = 4 << 20 // longer JSON bodies are not scanned
)

// usageScanner extracts token usage from a response as it streams past:
// from every SSE data line mentioning "usage", or from a whole JSON body.
type usageScanner struct {
	sse      bool
	buf      []byte // the current SSE line, or the JSON body so far
	overflow bool   // buf exceeded its bound; skip (the rest of) it
	u        Usage
	seen     bool
}

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
		s.line()
		b = b[i+1:]
	}
}

func (s *usageScanner) add(b []byte, limit int) {
	if s.overflow {
		return
	}
	if len(s.buf)+len(b) > limit {
		s.overflow, s.buf = true, s.buf[:0]
		return
	}
	s.buf = append(s.buf, b...)
}

// line scans the completed SSE line in buf and starts the next one.
func (s *usageScanner) line() {
	l := bytes.TrimSuffix(s.buf, []byte("\r"))
	if d, ok := bytes.CutPrefix(l, []byte("data:")); ok && !s.overflow && bytes.Contains(d, []byte(`"usage"`)) {
		s.parse(d)
	}
	s.buf, s.overflow = s.buf[:0], false
}

// finish scans what is left and returns the usage, or nil if none was seen.
func (s *usageScanner) finish() *Usage {
	switch {
	case s.sse:
		s.line() // a last line without newline
	case !s.overflow:
		s.parse(s.buf)
	}
	s.buf = nil
	if !s.seen {
		return nil
	}
	u := s.u
	return &u
}

func (s *usageScanner) parse(b []byte) {
	var v any
	if json.Unmarshal(b, &v) == nil {
		s.walk(v, false)
	}
}

// walk looks for objects under a "usage" key at any depth: Anthropic puts
// it in message.usage and at the top, OpenAI chat at the top, Responses in
// response.usage.
func (s *usageScanner) walk(v any, isUsage bool) {
	switch v := v.(type) {
	case map[string]any:
		if isUsage {
			s.count(&s.u.InputTokens, v, "input_tokens", "prompt_tokens")
			s.count(&s.u.OutputTokens, v, "output_tokens", "completion_tokens")
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

// count raises *dst to the largest of m's counts under names.
func (s *usageScanner) count(dst *int64, m map[string]any, names ...string) {
	for _, n := range names {
		if f, ok := m[n].(float64); ok {
			*dst = max(*dst, int64(f))
			s.seen = true
		}
	}
}
