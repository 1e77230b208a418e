package modelproxy

import (
	"bytes"
	"net/http"
	"strings"
)

// redacted replaces every whole occurrence of a secret.
const redacted = "[REDACTED]"

// redactor replaces the secrets in a stream that arrives in chunks, with
// the result the same whatever the chunking: leftmost match first, the
// longest secret at the same position. It holds back only the bytes at the
// end of a chunk that are a proper prefix of a secret (none, normally: an
// SSE event ends in a newline, which no secret holds) until the next chunk
// shows whether the secret completes, or until the end of the stream.
//
// Only literal occurrences are replaced: an upstream that quotes a secret
// cut short, or transformed (base64, reversed), is not caught.
type redactor struct {
	secrets [][]byte // non-empty, distinct
	maxLen  int
	held    []byte // a proper prefix of a secret, from the end of the last chunk
	buf     []byte // scratch: held + chunk
}

// newRedactor returns a redactor for the non-empty secrets.
func newRedactor(secrets ...string) *redactor {
	r := &redactor{}
	for _, s := range secrets {
		if s == "" || r.has(s) {
			continue
		}
		r.secrets = append(r.secrets, []byte(s))
		r.maxLen = max(r.maxLen, len(s))
	}
	return r
}

func (r *redactor) has(s string) bool {
	for _, x := range r.secrets {
		if string(x) == s {
			return true
		}
	}
	return false
}

// write appends to dst what of p (after the bytes held from before) can be
// emitted now, redacted, and holds the rest. p is not retained.
func (r *redactor) write(dst, p []byte) []byte {
	data := p
	if len(r.held) > 0 {
		r.buf = append(append(r.buf[:0], r.held...), p...)
		data = r.buf
	}
	dst, rest := r.replace(dst, data, true)
	r.held = append(r.held[:0], rest...)
	return dst
}

// flush appends the held bytes, redacted, at the end of the stream.
func (r *redactor) flush(dst []byte) []byte {
	dst, _ = r.replace(dst, r.held, false)
	r.held = r.held[:0]
	return dst
}

// replace appends data to dst with the secrets replaced. With partial, it
// stops at the first position from which data is a proper prefix of a
// secret and returns that tail, which the next chunk may complete.
func (r *redactor) replace(dst, data []byte, partial bool) ([]byte, []byte) {
	pos := 0
	for {
		hold := len(data)
		if partial {
			hold = r.partialStart(data, pos)
		}
		// The earliest whole match before hold. None can start earlier
		// in the complete stream: it would be in data or start at hold.
		m, l := -1, 0
		for _, s := range r.secrets {
			i := bytes.Index(data[pos:], s)
			if i < 0 || pos+i >= hold {
				continue
			}
			if i += pos; m < 0 || i < m || i == m && len(s) > l {
				m, l = i, len(s)
			}
		}
		if m < 0 {
			return append(dst, data[pos:hold]...), data[hold:]
		}
		dst = append(append(dst, data[pos:m]...), redacted...)
		pos = m + l
	}
}

// partialStart returns the first index i >= pos such that data[i:] is a
// proper prefix of a secret, else len(data).
func (r *redactor) partialStart(data []byte, pos int) int {
	for i := max(pos, len(data)-r.maxLen+1); i < len(data); i++ {
		tail := data[i:]
		for _, s := range r.secrets {
			if len(tail) < len(s) && bytes.HasPrefix(s, tail) {
				return i
			}
		}
	}
	return len(data)
}

// string returns s with the secrets replaced.
func (r *redactor) string(s string) string {
	for _, x := range r.secrets {
		if strings.Contains(s, string(x)) {
			out, _ := r.replace(nil, []byte(s), false)
			return string(out)
		}
	}
	return s
}

// header redacts h in place: every value, and a name holding a secret
// drops its header.
func (r *redactor) header(h http.Header) {
	for k, vs := range h {
		if r.string(k) != k {
			delete(h, k)
			continue
		}
		for i, v := range vs {
			vs[i] = r.string(v)
		}
	}
}
