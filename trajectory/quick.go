package trajectory

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// A request body comes from inside the sandbox: anything may be in it.
// json.Unmarshal of a whole 100 KB conversation costs far more than what
// a Record needs from it (whether tools were offered, and the results for
// the few calls still waiting for one), so a request is first scanned by
// quickScan: one pass that validates the JSON (accepting only a subset of
// what encoding/json accepts), checks the top-level fields' types as the
// full parse would, and notes which messages (input items) may hold a
// pending call id. Only those are decoded. Whenever the scan meets
// anything it is not sure the full parse would read the same way (an
// escaped or case-folded key, a duplicate field, a type the full parse
// rejects, deep nesting, a string that might be a pending id in disguise),
// it gives up and parseRequestBody decides: the scan only ever skips work.

// pendingIDs are the call ids whose results a request may carry.
type pendingIDs struct {
	ids   map[string]bool
	chars [2]uint64 // the ASCII bytes the ids use
	odd   bool      // an id a scan cannot look for (quote, backslash, control, non-ASCII)
}

func newPendingIDs(ids []string) pendingIDs {
	p := pendingIDs{ids: make(map[string]bool, len(ids))}
	for _, id := range ids {
		p.ids[id] = true
		for i := 0; i < len(id); i++ {
			c := id[i]
			if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
				p.odd = true
			}
			p.chars[c>>6&1] |= 1 << (c & 63)
		}
	}
	return p
}

func (p *pendingIDs) hasChar(c rune) bool {
	return c >= 0 && c < 0x80 && p.chars[c>>6&1]&(1<<(c&63)) != 0
}

// quickResult is what quickScan found.
type quickResult struct {
	model  string
	tools  bool
	stream bool
	elems  [][2]int // spans of messages (input items) that may hold a pending id
}

const quickMaxDepth = 200

type quickScanner struct {
	b     []byte
	i     int
	depth int
	ids   *pendingIDs
	watch bool // inside a result-bearing element: look for pending ids
	hit   bool // a string that may be a pending id was seen
}

// quickScan scans a request body; ok is false when parseRequestBody must
// decide.
func quickScan(api API, body []byte, ids *pendingIDs) (q quickResult, ok bool) {
	if ids.odd {
		return q, false
	}
	s := &quickScanner{b: body, ids: ids}
	s.ws()
	if !s.eat('{') {
		return q, false
	}
	var seen uint8
	s.ws()
	if !s.eat('}') {
		for {
			s.ws()
			key, esc, ok := s.str()
			if !ok || esc {
				return q, false
			}
			s.ws()
			if !s.eat(':') {
				return q, false
			}
			s.ws()
			f := topField(key)
			if f < 0 {
				return q, false // case-folded or non-ASCII: the full parse's matching decides
			}
			if f > 0 {
				if seen&(1<<f) != 0 {
					return q, false
				}
				seen |= 1 << f
			}
			switch f {
			case 0:
				if !s.value() {
					return q, false
				}
			case fModel:
				start := s.i
				if s.peek() == '"' {
					if _, _, ok := s.str(); !ok {
						return q, false
					}
					if q.model, ok = qstr(body[start:s.i]); !ok {
						return q, false
					}
				} else if !s.lit("null") {
					return q, false
				}
			case fStream:
				switch {
				case s.lit("true"):
					q.stream = true
				case s.lit("false"), s.lit("null"):
				default:
					return q, false
				}
			case fTools:
				if s.lit("null") {
					break
				}
				n, ok := s.array(s.value)
				if !ok {
					return q, false
				}
				q.tools = n > 0
			case fMessages, fInput:
				if f == fInput && (api != OpenAIResponses || s.peek() != '[') {
					if !s.value() {
						return q, false
					}
					break
				}
				if f == fMessages && s.lit("null") {
					break
				}
				fields := msgFields
				if f == fInput {
					fields = itemFields
				}
				results := (f == fMessages) == (api != OpenAIResponses)
				if _, ok := s.array(func() bool {
					start := s.i
					s.watch, s.hit = results, false
					ok := s.lit("null") || s.object(fields)
					s.watch = false
					if ok && s.hit {
						q.elems = append(q.elems, [2]int{start, s.i})
					}
					return ok
				}); !ok {
					return q, false
				}
			}
			s.ws()
			if s.eat('}') {
				break
			}
			if !s.eat(',') {
				return q, false
			}
		}
	}
	s.ws()
	return q, s.i == len(s.b)
}

const (
	fModel = iota + 1
	fStream
	fTools
	fMessages
	fInput
)

var topFields = []string{fModel: "model", fStream: "stream", fTools: "tools", fMessages: "messages", fInput: "input"}

// Fields of a message and of a Responses input item, with whether their
// value must be a string (or null) for the full parse to accept it.
var (
	msgFields  = map[string]bool{"role": true, "content": false, "tool_call_id": true}
	itemFields = map[string]bool{"type": true, "call_id": true, "id": true, "output": false}
)

// topField returns the index of an exact top-level field name, 0 for any
// other name, -1 for a name encoding/json might match to a field though
// it is not spelt the same (case folding, non-ASCII folding).
func topField(key []byte) int {
	for i, f := range topFields {
		if i > 0 && string(key) == f {
			return i
		}
	}
	if foldsTo(key, topFields[1:]) {
		return -1
	}
	return 0
}

// foldsTo reports whether key could match one of names under
// encoding/json's case-insensitive matching without being one of them:
// an ASCII case variant, or any name with a non-ASCII byte.
func foldsTo(key []byte, names []string) bool {
	for _, c := range key {
		if c >= 0x80 {
			return true
		}
	}
	for _, n := range names {
		if len(n) == len(key) && string(key) != n && asciiEqualFold(key, n) {
			return true
		}
	}
	return false
}

func asciiEqualFold(a []byte, b string) bool {
	for i := range a {
		x, y := a[i]|0x20, b[i]|0x20
		if x != y || (x < 'a' || x > 'z') && a[i] != b[i] {
			return false
		}
	}
	return true
}

func (s *quickScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *quickScanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *quickScanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *quickScanner) lit(l string) bool {
	if len(s.b)-s.i >= len(l) && string(s.b[s.i:s.i+len(l)]) == l {
		s.i += len(l)
		return true
	}
	return false
}

// object scans an object whose fields (exact names) are checked against
// fields: true means the value must be a string or null. A name that
// folds to one of them, or is escaped, gives up.
func (s *quickScanner) object(fields map[string]bool) bool {
	if !s.eat('{') {
		return false
	}
	s.depth++
	defer func() { s.depth-- }()
	if s.depth > quickMaxDepth {
		return false
	}
	s.ws()
	if s.eat('}') {
		return true
	}
	for {
		s.ws()
		key, esc, ok := s.str()
		if !ok || esc {
			return false
		}
		s.ws()
		if !s.eat(':') {
			return false
		}
		s.ws()
		mustStr, known := fields[string(key)]
		if !known {
			for f := range fields {
				if foldsTo(key, []string{f}) {
					return false
				}
			}
		}
		if mustStr {
			if s.peek() == '"' {
				if _, _, ok := s.str(); !ok {
					return false
				}
			} else if !s.lit("null") {
				return false
			}
		} else if !s.value() {
			return false
		}
		s.ws()
		if s.eat('}') {
			return true
		}
		if !s.eat(',') {
			return false
		}
	}
}

// array scans an array, each element with elem; it returns the count.
func (s *quickScanner) array(elem func() bool) (int, bool) {
	if !s.eat('[') {
		return 0, false
	}
	s.depth++
	defer func() { s.depth-- }()
	if s.depth > quickMaxDepth {
		return 0, false
	}
	s.ws()
	if s.eat(']') {
		return 0, true
	}
	for n := 1; ; n++ {
		s.ws()
		if !elem() {
			return 0, false
		}
		s.ws()
		if s.eat(']') {
			return n, true
		}
		if !s.eat(',') {
			return 0, false
		}
	}
}

// value scans any JSON value.
func (s *quickScanner) value() bool {
	switch c := s.peek(); {
	case c == '"':
		_, _, ok := s.str()
		return ok
	case c == '{':
		return s.object(nil)
	case c == '[':
		_, ok := s.array(s.value)
		return ok
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	}
	return false
}

func (s *quickScanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

func (s *quickScanner) number() bool {
	s.eat('-')
	if s.eat('0') {
		if c := s.peek(); c >= '0' && c <= '9' {
			return false
		}
	} else if !s.digits() {
		return false
	}
	if s.eat('.') && !s.digits() {
		return false
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.i++
		if c := s.peek(); c == '+' || c == '-' {
			s.i++
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// strSpecial marks the bytes that end a run of plain string bytes.
var strSpecial = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return
}()

// str scans a string and returns its raw contents (between the quotes)
// and whether it has escapes. While watching, a string that may be a
// pending id sets hit: an unescaped one that is one, or an escaped one
// with an escape that stands for a byte an id uses (only then can its
// decoded value be an id: ids hold no byte that needs escaping).
func (s *quickScanner) str() ([]byte, bool, bool) {
	if !s.eat('"') {
		return nil, false, false
	}
	start, esc := s.i, false
	b := s.b
	for {
		i := s.i
		for i < len(b) && !strSpecial[b[i]] {
			i++
		}
		s.i = i
		if i >= len(b) {
			return nil, false, false
		}
		switch b[i] {
		case '"':
			raw := b[start:i]
			s.i++
			if s.watch && !esc && len(s.ids.ids) > 0 && s.ids.ids[string(raw)] {
				s.hit = true
			}
			return raw, esc, true
		case '\\':
			esc = true
			if i+1 >= len(b) {
				return nil, false, false
			}
			var r rune
			switch b[i+1] {
			case '"', '\\', '/':
				r = rune(b[i+1])
				s.i = i + 2
			case 'b', 'f', 'n', 'r', 't':
				r = -1 // a control byte: in no id
				s.i = i + 2
			case 'u':
				if i+6 > len(b) {
					return nil, false, false
				}
				r = 0
				for _, h := range b[i+2 : i+6] {
					switch {
					case h >= '0' && h <= '9':
						r = r<<4 | rune(h-'0')
					case h|0x20 >= 'a' && h|0x20 <= 'f':
						r = r<<4 | rune(h|0x20-'a'+10)
					default:
						return nil, false, false
					}
				}
				s.i = i + 6
			default:
				return nil, false, false
			}
			if s.watch && s.ids.hasChar(r) {
				s.hit = true
			}
		default: // a control byte
			return nil, false, false
		}
	}
}

// ---- answers: the frequent small events without reflection ----
//
// json.Unmarshal into the event structs costs a few µs an event; the
// fast decoders below fill the same structs for the frequent shapes
// (deltas) and give up, leaving it to json.Unmarshal, on anything they
// are not sure it would read the same way: an escaped, folded or
// duplicate key, a field of the struct they do not fill, a value of a
// type that would fail, invalid JSON.

// flat scans one object and sets vals[i] to the raw value of names[i]
// (nil when absent).
func (s *quickScanner) flat(names []string, vals [][]byte) bool {
	clear(vals)
	s.ws()
	if !s.eat('{') {
		return false
	}
	s.ws()
	if s.eat('}') {
		return true
	}
	for {
		s.ws()
		key, esc, ok := s.str()
		if !ok || esc {
			return false
		}
		s.ws()
		if !s.eat(':') {
			return false
		}
		s.ws()
		start := s.i
		if !s.value() {
			return false
		}
		k := -1
		for i, n := range names {
			if string(key) == n {
				k = i
				break
			}
		}
		switch {
		case k >= 0 && vals[k] != nil:
			return false // a duplicate
		case k >= 0:
			vals[k] = s.b[start:s.i]
		case foldsTo(key, names):
			return false
		}
		s.ws()
		if s.eat('}') {
			return true
		}
		if !s.eat(',') {
			return false
		}
	}
}

// flatAll is flat over the whole of b.
func flatAll(b []byte, names []string, vals [][]byte) bool {
	s := &quickScanner{b: b}
	if !s.flat(names, vals) {
		return false
	}
	s.ws()
	return s.i == len(b)
}

// qstr decodes a string (or null, as "") as json.Unmarshal would.
func qstr(raw []byte) (string, bool) {
	if raw == nil || string(raw) == "null" {
		return "", true
	}
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	in := raw[1 : len(raw)-1]
	if bytes.IndexByte(in, '\\') < 0 && utf8.Valid(in) {
		return string(in), true
	}
	return jsonString(raw)
}

// qint decodes a small integer (or null, as 0).
func qint(raw []byte) (int, bool) {
	if raw == nil || string(raw) == "null" {
		return 0, true
	}
	if len(raw) > 9 {
		return 0, false
	}
	n, err := strconv.Atoi(string(raw))
	return n, err == nil
}

// absent reports whether raw is no value or null.
func absent(raw []byte) bool { return raw == nil || string(raw) == "null" }

var antNames = []string{"type", "index", "delta", "message", "content_block", "model", "content", "stop_reason"}
var antDeltaNames = []string{"type", "text", "thinking", "partial_json", "stop_reason"}

// quickAnthropic fills ev for the events that carry no message or block.
func quickAnthropic(data []byte, ev *antEvent) bool {
	var v [8][]byte
	if !flatAll(data, antNames, v[:]) {
		return false
	}
	for _, raw := range v[3:] {
		if raw != nil {
			return false
		}
	}
	var ok bool
	if ev.Type, ok = qstr(v[0]); !ok {
		return false
	}
	if ev.Index, ok = qint(v[1]); !ok {
		return false
	}
	if absent(v[2]) {
		return true
	}
	var d [5][]byte
	if !(&quickScanner{b: v[2]}).flat(antDeltaNames, d[:]) {
		return false
	}
	ev.Delta = new(antDelta)
	for i, p := range []*string{&ev.Delta.Type, &ev.Delta.Text, &ev.Delta.Thinking, &ev.Delta.PartialJSON, &ev.Delta.StopReason} {
		if *p, ok = qstr(d[i]); !ok {
			return false
		}
	}
	return true
}

var chatNames = []string{"object", "model", "choices", "error"}
var choiceNames = []string{"index", "delta", "finish_reason", "message"}
var chatDeltaNames = []string{"content", "reasoning_content", "reasoning", "tool_calls"}

// quickChat fills ch for chunks whose deltas carry text or reasoning (not
// tool calls, not content parts).
func quickChat(data []byte, ch *chatChunk) bool {
	var v [4][]byte
	if !flatAll(data, chatNames, v[:]) || !absent(v[3]) {
		return false
	}
	var ok bool
	if ch.Object, ok = qstr(v[0]); !ok {
		return false
	}
	if ch.Model, ok = qstr(v[1]); !ok {
		return false
	}
	if absent(v[2]) {
		return true
	}
	s := &quickScanner{b: v[2]}
	ch.Choices = []chatChoice{}
	_, ok = s.array(func() bool {
		var c [4][]byte
		if !s.flat(choiceNames, c[:]) || !absent(c[3]) {
			return false
		}
		var choice chatChoice
		var ok bool
		if choice.Index, ok = qint(c[0]); !ok {
			return false
		}
		if c[2] != nil && string(c[2]) != "null" {
			fr, ok := qstr(c[2])
			if !ok {
				return false
			}
			choice.FinishReason = &fr
		}
		if !absent(c[1]) {
			var d [4][]byte
			if !(&quickScanner{b: c[1]}).flat(chatDeltaNames, d[:]) || !absent(d[3]) {
				return false
			}
			m := &chatMsg{}
			if d[0] != nil && d[0][0] != '"' && string(d[0]) != "null" {
				return false // parts: json.Unmarshal reads them
			}
			if d[2] != nil && d[2][0] != '"' && string(d[2]) != "null" {
				return false
			}
			m.Content, m.Reasoning = json.RawMessage(d[0]), json.RawMessage(d[2])
			if m.ReasoningContent, ok = qstr(d[1]); !ok {
				return false
			}
			choice.Delta = m
		}
		ch.Choices = append(ch.Choices, choice)
		return true
	})
	return ok && s.i == len(s.b)
}

var respNames = []string{"type", "item_id", "output_index", "content_index", "summary_index", "delta", "text", "arguments", "input",
	"response", "item", "object", "status", "model", "output"}

// quickResponses fills ev for the events that carry no response or item.
func quickResponses(data []byte, ev *respEvent) bool {
	var v [15][]byte
	if !flatAll(data, respNames, v[:]) {
		return false
	}
	for _, raw := range v[9:] {
		if raw != nil {
			return false
		}
	}
	var ok bool
	for i, p := range []*string{&ev.Type, &ev.ItemID} {
		if *p, ok = qstr(v[i]); !ok {
			return false
		}
	}
	for i, p := range []*int{&ev.OutputIndex, &ev.ContentIndex, &ev.SummaryIndex} {
		if *p, ok = qint(v[2+i]); !ok {
			return false
		}
	}
	for i, p := range []*string{&ev.Delta, &ev.Text, &ev.Arguments, &ev.Input} {
		if *p, ok = qstr(v[5+i]); !ok {
			return false
		}
	}
	return true
}
