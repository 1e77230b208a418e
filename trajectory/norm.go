package trajectory

import "strings"

// normBuf accumulates a whitespace-normalised copy of a text that arrives
// in pieces: runs of whitespace become one space, with leading and
// trailing space left out, so deltas split anywhere normalise the same as
// the whole.
type normBuf struct {
	b       []byte
	pending bool // whitespace seen since the last kept byte
}

func isSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\v', '\f':
		return true
	}
	return false
}

func (n *normBuf) add(s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isSpace(c) {
			n.pending = true
			continue
		}
		if n.pending && len(n.b) > 0 {
			n.b = append(n.b, ' ')
		}
		n.pending = false
		n.b = append(n.b, c)
	}
}

// normalize collapses whitespace runs to one space and trims.
func normalize(s string) string {
	var n normBuf
	n.add(s)
	return string(n.b)
}

// joinRaw concatenates the raw parts of one kind with sep, each part
// redacted.
func joinRaw(parts []*part, kind partKind, sep string, sec *secrets) string {
	var ss []string
	for _, p := range parts {
		if p.kind == kind {
			ss = append(ss, sec.all(p.raw))
		}
	}
	return strings.Join(ss, sep)
}
