// Package termsafe makes untrusted text safe to print on a terminal.
//
// Text from a sandbox (file names, agent replies, CLI stderr) may carry
// terminal controls: an escape sequence can retitle the window, clear the
// screen, rewrite earlier lines or, on some terminals, answer back as if
// typed. Bidi overrides and other invisible format characters can make
// text read differently from what it is. Such characters are not dropped
// but shown escaped (\x1b, \u202e), so the reader sees they were there.
// Backslashes are left alone: ordinary text (paths, code) stays readable.
package termsafe

import (
	"io"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// String returns s with every character a terminal could act on escaped:
// C0 controls but newline and tab (a carriage return can overwrite a
// line, so it is escaped too), DEL, C1 controls (U+0080–U+009F: 8-bit
// CSI, OSC…), invalid UTF-8 bytes (\xNN: a terminal may read a lone 0x9b
// as CSI), and the format characters that can disguise text (bidi
// overrides and isolates, zero-width and invisible characters, line and
// paragraph separators). Other text, emoji and CJK included, is unchanged.
func String(s string) string { return escape(s, false) }

// Line is String for one-line contexts (a file name, a progress line):
// newline and tab are escaped too, so the text cannot fake a line of its
// own or shift columns.
func Line(s string) string { return escape(s, true) }

// Unsafe reports whether String escapes r (Line also escapes \n and \t).
func Unsafe(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r == 0x7f:
		return true
	case r < 0x80:
		return false
	case r <= 0x9f: // C1 controls
		return true
	case r == 0x200c || r == 0x200d:
		// ZWNJ and ZWJ shape scripts and join emoji sequences.
		return false
	case r == 0x2028 || r == 0x2029:
		// Separators break lines where a reader sees none.
		return true
	}
	// Cf: bidi controls (U+202A–U+202E, U+2066–U+2069, U+200E/F,
	// U+061C), zero-width space, word joiner, BOM, tag characters…
	return unicode.Is(unicode.Cf, r)
}

func escape(s string, line bool) string {
	// The common case, nothing to escape, costs one scan and no copy.
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || Unsafe(r) || (line && (r == '\n' || r == '\t')) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			writeX(&b, s[i])
		case line && r == '\n':
			b.WriteString(`\n`)
		case line && r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80 && Unsafe(r):
			writeX(&b, byte(r))
		case Unsafe(r):
			if r > 0xffff {
				b.WriteString(`\U`)
				b.WriteString(pad(strconv.FormatInt(int64(r), 16), 8))
			} else {
				b.WriteString(`\u`)
				b.WriteString(pad(strconv.FormatInt(int64(r), 16), 4))
			}
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func writeX(b *strings.Builder, c byte) {
	b.WriteString(`\x`)
	b.WriteByte(hexDigits[c>>4])
	b.WriteByte(hexDigits[c&0xf])
}

func pad(h string, n int) string {
	return strings.Repeat("0", max(0, n-len(h))) + h
}

// Writer escapes a stream as String does, for output that is passed
// through to a terminal as it comes (a command's stdout). A character
// split across writes is held back until its end arrives, so it is not
// mistaken for invalid bytes; Flush writes what is held.
type Writer struct {
	mu   sync.Mutex
	w    io.Writer
	tail []byte // the start of a character cut off by the last write
}

// NewWriter returns a Writer escaping to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write escapes p and writes it; it reports len(p) on success.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	buf := append(w.tail, p...)
	w.tail = nil
	// Hold back an incomplete character at the end (at most 3 bytes).
	cut := len(buf)
	for k := 1; k <= utf8.UTFMax-1 && k <= len(buf); k++ {
		c := buf[len(buf)-k]
		if utf8.RuneStart(c) {
			if c >= 0xc0 && !utf8.FullRune(buf[len(buf)-k:]) {
				cut = len(buf) - k
			}
			break
		}
	}
	w.tail = append([]byte(nil), buf[cut:]...)
	if cut == 0 {
		return len(p), nil
	}
	if _, err := io.WriteString(w.w, String(string(buf[:cut]))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes a held-back partial character, escaped: the stream ended
// inside it.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.tail) == 0 {
		return nil
	}
	t := w.tail
	w.tail = nil
	_, err := io.WriteString(w.w, String(string(t)))
	return err
}
