package trajectory

import (
	"bytes"
	"slices"
)

// Redacted replaces a secret (see Record.SetSecrets) in what a Record
// keeps, as the model proxy replaces it in what it sends to the sandbox.
const Redacted = "[REDACTED]"

// minSecret is the shortest secret SetSecrets accepts: shorter strings
// would redact ordinary text.
const minSecret = 4

// secrets replaces literal occurrences of a set of strings: leftmost
// match first, the longest secret at the same position, as the proxy's
// redactor does. The zero value (no secrets) replaces nothing.
type secrets struct {
	list  [][]byte // longest first
	first [256]bool
}

func newSecrets(ss []string) *secrets {
	s := &secrets{}
	for _, x := range ss {
		if len(x) < minSecret || slices.ContainsFunc(s.list, func(b []byte) bool { return string(b) == x }) {
			continue
		}
		s.list = append(s.list, []byte(x))
		s.first[x[0]] = true
	}
	slices.SortFunc(s.list, func(a, b []byte) int { return len(b) - len(a) })
	return s
}

func (s *secrets) none() bool { return s == nil || len(s.list) == 0 }

// replace appends data to dst with the secrets replaced. With partial,
// it stops at the first position from which data is a proper prefix of a
// secret (which more data may complete) and returns that tail.
func (s *secrets) replace(dst, data []byte, partial bool) ([]byte, []byte) {
	if s.none() {
		return append(dst, data...), nil
	}
	from := 0
	for i := 0; i < len(data); {
		if !s.first[data[i]] {
			i++
			continue
		}
		rest := data[i:]
		if partial && s.mayGrow(rest) {
			return append(dst, data[from:i]...), rest
		}
		hit := 0
		for _, x := range s.list {
			if bytes.HasPrefix(rest, x) {
				hit = len(x)
				break
			}
		}
		if hit == 0 {
			i++
			continue
		}
		dst = append(append(dst, data[from:i]...), Redacted...)
		i += hit
		from = i
	}
	return append(dst, data[from:]...), nil
}

// mayGrow reports whether rest is a proper prefix of a secret.
func (s *secrets) mayGrow(rest []byte) bool {
	for _, x := range s.list {
		if len(rest) < len(x) && bytes.HasPrefix(x, rest) {
			return true
		}
	}
	return false
}

// all returns b with every secret replaced.
func (s *secrets) all(b []byte) string {
	if s.none() {
		return string(b)
	}
	out, _ := s.replace(nil, b, false)
	return string(out)
}

// SetSecrets makes the Record redact secrets (strings of at least four
// bytes; shorter ones are ignored) from what it keeps and returns: the
// model's text, reasoning and tool arguments, and the tool results. The
// model proxy redacts the upstream's key from what it sends to the
// sandbox, so a CLI prints Redacted where the upstream sent the key;
// with the same secrets here, its events match. Call it before the first
// exchange begins.
func (r *Record) SetSecrets(ss []string) {
	s := newSecrets(ss)
	r.mu.Lock()
	r.sec = s
	r.mu.Unlock()
}

// str is all for a string, without a copy when there is nothing to do.
func (s *secrets) str(x string) string {
	if s.none() {
		return x
	}
	return s.all([]byte(x))
}
