package termsafe

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	for _, tc := range []struct{ name, in, want, line string }{
		{"plain", "hello, world", "hello, world", "hello, world"},
		{"lines and tabs", "a\tb\nc", "a\tb\nc", `a\tb\nc`},
		{"emoji and CJK", "ok 👍🏽 日本語 한국어 👨‍👩‍👧 ❤️", "ok 👍🏽 日本語 한국어 👨‍👩‍👧 ❤️", "ok 👍🏽 日本語 한국어 👨‍👩‍👧 ❤️"},
		{"accents and RTL text", "café שלום مرحبا", "café שלום مرحبا", "café שלום مرحبا"},
		{"backslashes stay", `C:\x1b\n`, `C:\x1b\n`, `C:\x1b\n`},
		{"CSI clear screen", "a\x1b[2Jb", `a\x1b[2Jb`, `a\x1b[2Jb`},
		{"CSI colour", "\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`, `\x1b[31mred\x1b[0m`},
		{"OSC title with BEL", "\x1b]0;pwned\x07", `\x1b]0;pwned\x07`, `\x1b]0;pwned\x07`},
		{"OSC with ST", "\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\", `\x1b]8;;http://evil\x1b\link\x1b]8;;\x1b\`, `\x1b]8;;http://evil\x1b\link\x1b]8;;\x1b\`},
		{"carriage return", "safe\rEVIL", `safe\rEVIL`, `safe\rEVIL`},
		{"NUL, BS, DEL", "a\x00b\x08c\x7f", `a\x00b\x08c\x7f`, `a\x00b\x08c\x7f`},
		{"8-bit CSI raw byte", "a\x9b2Jb", `a\x9b2Jb`, `a\x9b2Jb`},
		{"8-bit CSI as U+009B", "a\u009b2Jb", `a\u009b2Jb`, `a\u009b2Jb`},
		{"C1 OSC and ST as UTF-8", "\u009d0;t\u009c", `\u009d0;t\u009c`, `\u009d0;t\u009c`},
		{"NEL", "a\u0085b", `a\u0085b`, `a\u0085b`},
		{"bidi override", "invoice_\u202egpj.exe", `invoice_\u202egpj.exe`, `invoice_\u202egpj.exe`},
		{"bidi embeddings and isolates", "\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069", `\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069`, `\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069`},
		{"marks", "\u200e\u200f\u061c", `\u200e\u200f\u061c`, `\u200e\u200f\u061c`},
		{"invisible", "a\u200bb\u2060c\ufeffd\u00ade", `a\u200bb\u2060c\ufeffd\u00ade`, `a\u200bb\u2060c\ufeffd\u00ade`},
		{"separators", "a\u2028b\u2029c", `a\u2028b\u2029c`, `a\u2028b\u2029c`},
		{"tag characters", "hi\U000e0041\U000e0042", `hi\U000e0041\U000e0042`, `hi\U000e0041\U000e0042`},
		{"invalid UTF-8", "a\xffb\xc3(\xe2\x82", `a\xffb\xc3(\xe2\x82`, `a\xffb\xc3(\xe2\x82`},
		{"real U+FFFD stays", "a\ufffdb", "a\ufffdb", "a\ufffdb"},
		{"fake line", "x\nsandbox-agent: all fine", "x\nsandbox-agent: all fine", `x\nsandbox-agent: all fine`},
		{"empty", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := String(tc.in); got != tc.want {
				t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if got := Line(tc.in); got != tc.line {
				t.Errorf("Line(%q) = %q, want %q", tc.in, got, tc.line)
			}
		})
	}
}

// checkSafe is the promise: valid UTF-8 without a control a terminal
// acts on (String keeps \n and \t; Line keeps neither).
func checkSafe(t *testing.T, in, out string, line bool) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("%q -> %q: invalid UTF-8", in, out)
	}
	for _, r := range out {
		if (r < 0x20 && (line || (r != '\n' && r != '\t'))) || r == 0x7f || (r >= 0x80 && r <= 0x9f) || Unsafe(r) {
			t.Fatalf("%q -> %q: contains %U", in, out, r)
		}
	}
}

func FuzzString(f *testing.F) {
	for _, s := range []string{"", "plain", "\x1b]0;pwned\x07", "\x1b[2J", "\x9b", "\u009b", "\u202e", "\xe2\x82", "a\r\n\tb", "👨‍👩‍👧"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := String(s)
		checkSafe(t, s, out, false)
		checkSafe(t, s, Line(s), true)
		if String(out) != out {
			t.Fatalf("String is not idempotent on %q", s)
		}
		// Nothing is lost but what a terminal would act on: text
		// without such characters is unchanged.
		if utf8.ValidString(s) && !strings.ContainsFunc(s, Unsafe) && out != s {
			t.Fatalf("String(%q) = %q changed safe text", s, out)
		}
	})
}

func TestWriter(t *testing.T) {
	in := "日本\x1b[2J\u202e ok \xff" + "👍\n"
	// Every split of the input into two writes gives String's result:
	// a character cut in two is not mistaken for invalid bytes.
	for i := 0; i <= len(in); i++ {
		var buf bytes.Buffer
		w := NewWriter(&buf)
		if n, err := w.Write([]byte(in[:i])); err != nil || n != i {
			t.Fatalf("write: %d %v", n, err)
		}
		w.Write([]byte(in[i:]))
		w.Flush()
		if buf.String() != String(in) {
			t.Errorf("split at %d: %q, want %q", i, buf.String(), String(in))
		}
	}
	// A stream ending inside a character shows its bytes.
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.Write([]byte("a\xe2\x82"))
	if buf.String() != "a" {
		t.Errorf("before flush: %q", buf.String())
	}
	w.Flush()
	if buf.String() != `a\xe2\x82` {
		t.Errorf("after flush: %q", buf.String())
	}
}
