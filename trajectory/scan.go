package trajectory

import "bytes"

type scanMode uint8

const (
	modeSniff scanMode = iota // no usable Content-Type: decide by the first byte
	modeSSE
	modeJSON
	modeOff // not parsed (error status, compressed)
)

// scanner frames a response body: SSE events, or one JSON value. It keeps
// at most one event's data (or one JSON body) and never retains the
// caller's chunks.
type scanner struct {
	mode scanMode

	// SSE
	line     []byte // a line split across chunks
	lineOver bool
	data     []byte // the current event's data lines, joined by \n
	hasData  bool
	dataOver bool

	// JSON: the body so far, and enough lexing to see where it ends.
	body     []byte
	bodyOver bool
	depth    int
	inStr    bool
	esc      bool
	started  bool
	handled  bool
}

func (s *scanner) write(x *Exchange, p []byte) {
	if s.mode == modeSniff {
		t := bytes.TrimLeft(p, " \t\r\n")
		if len(t) == 0 {
			return
		}
		if t[0] == '{' {
			s.mode = modeJSON
		} else {
			s.mode = modeSSE
		}
	}
	switch s.mode {
	case modeSSE:
		s.sse(x, p)
	case modeJSON:
		s.json(x, p)
	}
}

func (s *scanner) sse(x *Exchange, p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.addLine(x, p)
			return
		}
		if len(s.line) == 0 && !s.lineOver {
			s.lineDone(x, p[:i]) // the common case: no copy
		} else {
			s.addLine(x, p[:i])
			s.lineDone(x, s.line)
		}
		s.line, s.lineOver = s.line[:0], false
		p = p[i+1:]
	}
}

func (s *scanner) addLine(x *Exchange, p []byte) {
	if s.lineOver {
		return
	}
	if len(s.line)+len(p) > x.lim.line {
		s.lineOver, s.line = true, nil
		x.tooLong()
		return
	}
	s.line = append(s.line, p...)
}

// lineDone handles one complete line (without its \n).
func (s *scanner) lineDone(x *Exchange, l []byte) {
	if s.lineOver {
		s.dataOver = true // the event lost a data line: skip it whole
		return
	}
	l = bytes.TrimSuffix(l, []byte{'\r'})
	if len(l) == 0 {
		s.dispatch(x)
		return
	}
	d, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok {
		return // event:, id:, retry:, comments
	}
	d = bytes.TrimPrefix(d, []byte{' '})
	if s.dataOver {
		return
	}
	if len(s.data)+len(d)+1 > x.lim.line {
		s.dataOver, s.data = true, nil
		x.tooLong()
		return
	}
	if s.hasData {
		s.data = append(s.data, '\n')
	}
	s.data = append(s.data, d...)
	s.hasData = true
}

func (s *scanner) dispatch(x *Exchange) {
	if s.hasData && !s.dataOver {
		d := bytes.TrimSpace(s.data)
		switch {
		case len(d) == 0:
		case bytes.Equal(d, []byte("[DONE]")):
			x.doneMarker()
		default:
			x.handle(d)
		}
	}
	s.data, s.hasData, s.dataOver = s.data[:0], false, false
	if cap(s.data) > 64<<10 {
		s.data = nil // do not keep a huge event's buffer for the rest of the stream
	}
}

func (s *scanner) json(x *Exchange, p []byte) {
	if s.handled || s.bodyOver {
		return
	}
	if len(s.body)+len(p) > x.lim.line {
		s.bodyOver, s.body = true, nil
		x.tooLong()
		x.markUnparsed()
		return
	}
	s.body = append(s.body, p...)
	// Find the end of the top-level value as bytes arrive, so a
	// non-streamed answer is parsed before its last byte leaves the proxy
	// (End comes only after the CLI may already have printed it).
	for _, c := range p {
		switch {
		case s.inStr:
			switch {
			case s.esc:
				s.esc = false
			case c == '\\':
				s.esc = true
			case c == '"':
				s.inStr = false
			}
		case c == '"':
			s.inStr = true
		case c == '{' || c == '[':
			s.depth++
			s.started = true
		case c == '}' || c == ']':
			s.depth--
			if s.started && s.depth == 0 {
				s.handled = true
				x.handle(s.body)
				s.body = nil
				return
			}
		}
	}
}

// finish handles what the body left unterminated, at End.
func (s *scanner) finish(x *Exchange) {
	switch s.mode {
	case modeSSE:
		if len(s.line) > 0 {
			s.lineDone(x, s.line)
		}
		s.dispatch(x)
		s.line, s.data = nil, nil
	case modeJSON:
		if !s.handled && !s.bodyOver && len(bytes.TrimSpace(s.body)) > 0 {
			x.markUnparsed() // cut short: not a whole value
		}
		s.body = nil
	}
}

func (x *Exchange) tooLong() {
	x.r.mu.Lock()
	x.truncated, x.r.truncated = true, true
	x.r.mu.Unlock()
}

// doneMarker is chat's "data: [DONE]".
func (x *Exchange) doneMarker() {
	x.r.mu.Lock()
	defer x.r.mu.Unlock()
	if x.api == OpenAIChat && !x.failed {
		x.complete("")
	}
}
