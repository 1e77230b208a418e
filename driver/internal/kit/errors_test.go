package kit

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestMessage(t *testing.T) {
	if got := Message("  a\n\tb  c "); got != "a b c" {
		t.Errorf("fold %q", got)
	}
	long := strings.Repeat("é", 400) // 800 bytes
	got := Message(long)
	if len(got) > MaxMessage || !strings.HasSuffix(got, " …") || !utf8.ValidString(got) || !json.Valid([]byte(`"`+got+`"`)) {
		t.Errorf("cut %d bytes %q", len(got), got)
	}
	if s := strings.Repeat("x", MaxMessage); Message(s) != s {
		t.Error("a message of MaxMessage bytes was cut")
	}
	if got := Message(strings.Repeat("ab ", 300)); strings.Contains(got, "  ") || len(got) > MaxMessage {
		t.Errorf("cut at a space %q", got)
	}
	if got := Cut("abcdef", 5); got != "a …" {
		t.Errorf("Cut %q", got)
	}
}

func TestFailure(t *testing.T) {
	f := Failure{Driver: "x", ExitCode: 2, Stderr: "\n boom\nmore \n"}
	de := f.Err("line one\nline two", 401)
	if de.Driver != "x" || de.ExitCode != 2 || de.Status != 401 || de.Message != "line one line two" || de.Stderr != "boom\nmore" {
		t.Errorf("%+v", de)
	}
}

func TestHTTPStatus(t *testing.T) {
	for msg, want := range map[string]int{
		// codex
		"unexpected status 401 Unauthorized: invalid api key":                        401,
		"exceeded retry limit, last status: 429 Too Many Requests, request id: x":    429,
		"stream disconnected before completion: mock model failure":                  0,
		"Missing environment variable: `SANDBOX_AGENT_CODEX_API_KEY`.":               0,
		"unexpected status 503 Service Unavailable: upstream, url: http://h:5000/v1": 503,
		// pi, dsh
		"401 Incorrect API key provided": 401,
		"500 upstream exploded":          500,
		"429: slow down":                 429,
		"403":                            403,
		"Connection error.":              0,
		"200 ok":                         0,
		"4010 x":                         0,
		"":                               0,
		// dsh's failure codes
		"HTTP_401": 401,
		"HTTP_200": 0,
	} {
		if got := HTTPStatus(msg); got != want {
			t.Errorf("HTTPStatus(%q) = %d, want %d", msg, got, want)
		}
	}
	if got := HTTPStatus("no status", "HTTP_502"); got != 502 {
		t.Errorf("second text: %d", got)
	}
}

func TestToolResultText(t *testing.T) {
	for in, want := range map[string]string{
		``:        "",
		`"plain"`: "plain",
		`[{"type":"text","text":"a"},{"type":"image","source":{}},{"type":"text","text":"b"}]`: "a\n[image]\nb",
		`{"x":1}`: `{"x":1}`,
		`[1,2]`:   `[1,2]`,
	} {
		if got := ToolResultText(json.RawMessage(in)); got != want {
			t.Errorf("ToolResultText(%s) = %q, want %q", in, got, want)
		}
	}
}
