package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sandbox-agent/sandbox-agent/internal/termsafe"
)

// Everything the command line prints may quote a sandbox (file names,
// replies, CLI stderr, egress hosts) or an upstream, so it passes one of
// three doors (docs/cli.md, "Terminal safety"):
//   - messages (a.stdout, a.stderr): redacted, then termsafe.String,
//     whatever the destination;
//   - JSON lines (a.jsonOut): redacted, exact strings, with the
//     characters a terminal acts on written as \u escapes;
//   - exec's data (a.rawStdout, a.rawStderr): byte-exact, escaped only
//     when the destination is a terminal.

// redacted replaces a known secret wherever it is printed.
const redacted = "[REDACTED]"

// minSecretLen: shorter "secrets" are not redacted; replacing every
// "test" or "x" would garble output more than it protects.
const minSecretLen = 8

// redactor holds the secrets of this run (API keys, the gateway key, the
// serve token). The library already redacts them from errors and the
// audit; this is defence in depth at print time.
type redactor struct {
	mu      sync.RWMutex
	secrets []string
}

// add registers s; safe for concurrent use (serve starts agents at once).
func (r *redactor) add(s string) {
	if len(s) < minSecretLen {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range r.secrets {
		if k == s {
			return
		}
	}
	r.secrets = append(r.secrets, s)
	// Longest first, so a secret containing another is replaced whole.
	for i := len(r.secrets) - 1; i > 0 && len(r.secrets[i]) > len(r.secrets[i-1]); i-- {
		r.secrets[i], r.secrets[i-1] = r.secrets[i-1], r.secrets[i]
	}
}

func (r *redactor) redact(s string) string {
	if r == nil {
		return s
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, k := range r.secrets {
		if strings.Contains(s, k) {
			s = strings.ReplaceAll(s, k, redacted)
		}
	}
	return s
}

// secret registers k with the run's redactor. The built-in gateway key is
// a public placeholder, not a secret: redacting it would only garble
// text that happens to contain it.
func (a *app) secret(k string) {
	if k != defaultSettings().gatewayKey {
		a.red.add(k)
	}
}

// msgWriter prints messages for a person: each write is redacted, then
// escaped. Writers print a message per write (fmt, slog, tabwriter's
// cells), so a secret or a character is not cut between two.
type msgWriter struct {
	w   io.Writer
	red *redactor
}

func (m *msgWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(m.w, termsafe.String(m.red.redact(string(p)))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// jsonWriter prints the JSON lines of --json. Each write is whole JSON
// values (json.Encoder writes one value per call). Inside every string
// the secrets are redacted and the characters termsafe would escape (DEL,
// C1, bidi and format characters; encoding/json already escapes C0) are
// written as \u escapes: the decoded strings are the exact ones, the
// bytes are safe on a terminal. Invalid UTF-8 becomes U+FFFD, as
// encoding/json does for strings.
type jsonWriter struct {
	w   io.Writer
	red *redactor
}

func (j *jsonWriter) Write(p []byte) (int, error) {
	if _, err := j.w.Write(safeJSON(p, j.red)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// safeJSON rewrites the string literals of the JSON text p that need it
// and copies the rest verbatim.
func safeJSON(p []byte, red *redactor) []byte {
	var out bytes.Buffer
	out.Grow(len(p))
	for i := 0; i < len(p); {
		if p[i] != '"' {
			out.WriteByte(p[i])
			i++
			continue
		}
		end := i + 1
		for end < len(p) && p[end] != '"' {
			if p[end] == '\\' {
				end++
			}
			end++
		}
		if end >= len(p) {
			// Not JSON from our encoder: print it as a message would be.
			out.WriteString(termsafe.String(red.redact(string(p[i:]))))
			break
		}
		out.Write(safeLiteral(p[i:end+1], red))
		i = end + 1
	}
	return out.Bytes()
}

// safeLiteral returns the JSON string literal lit, rewritten only when it
// holds a secret, invalid UTF-8 or a character a terminal acts on.
func safeLiteral(lit []byte, red *redactor) []byte {
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		return []byte(strconv.Quote(termsafe.Line(red.redact(string(lit)))))
	}
	clean := utf8.Valid(lit) && !bytes.ContainsFunc(lit, termsafe.Unsafe)
	r := red.redact(s)
	if clean && r == s {
		return lit
	}
	enc, _ := json.Marshal(r) // a string always marshals
	var b bytes.Buffer
	for _, c := range string(enc) {
		if !termsafe.Unsafe(c) {
			b.WriteRune(c)
			continue
		}
		if c > 0xffff {
			r1, r2 := utf16.EncodeRune(c)
			writeU(&b, r1)
			writeU(&b, r2)
		} else {
			writeU(&b, c)
		}
	}
	return b.Bytes()
}

func writeU(b *bytes.Buffer, r rune) {
	h := strconv.FormatInt(int64(r), 16)
	b.WriteString(`\u` + strings.Repeat("0", 4-len(h)) + h)
}

// jsonOut is where --json lines go.
func (a *app) jsonOut() *json.Encoder {
	return json.NewEncoder(&jsonWriter{w: a.rawStdout, red: a.red})
}

// line is s for a one-line context (a file name, a host, a detail).
func line(s string) string { return termsafe.Line(s) }

// errText is an error's message for stderr: continuation lines (joined
// errors, quoted output) are indented, so none passes for a line of ours.
func errText(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "\n  ")
}
