package fakemodel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseScriptValid(t *testing.T) {
	s, err := ParseScript([]byte(`{
	  "expect_key": "sk-good",
	  "responses": [
	    {"tool": "shell", "command": "echo hi > /tmp/out.txt"},
	    {"tool": "write", "path": "/tmp/a.py", "content": "print(1)\n", "text": "writing"},
	    {"tool": "write", "path": "/tmp/empty"},
	    {"thinking": "optional reasoning text", "text": "DONE", "usage": {"input_tokens": 10, "output_tokens": 2}},
	    {"error": 401, "message": "invalid api key"},
	    {"error": 500},
	    {"error": 429, "repeat": true},
	    {"error": 403, "repeat": false}
	  ]}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.ExpectKey != "sk-good" || len(s.Responses) != 8 {
		t.Fatalf("got %+v", s)
	}
	if got := s.Responses[1]; got.Tool != ToolWrite || got.Path != "/tmp/a.py" || got.Content != "print(1)\n" {
		t.Errorf("write step: %+v", got)
	}
	if u := s.Responses[3].Usage; u == nil || u.InputTokens != 10 || u.OutputTokens != 2 {
		t.Errorf("usage: %+v", u)
	}
	sticky := []bool{false, false, false, false, true, false, true, false}
	for i, want := range sticky {
		if got := s.Responses[i].IsError() && s.Responses[i].Sticky(); got != want {
			t.Errorf("responses[%d] sticky = %v, want %v", i, got, want)
		}
	}

	empty, err := ParseScript([]byte(`{}`))
	if err != nil || len(empty.Responses) != 0 {
		t.Errorf("empty script: %+v, %v", empty, err)
	}
}

func TestParseScriptInvalid(t *testing.T) {
	tests := []struct {
		name, script string
		want         []string // fragments of the error
	}{
		{"not json", `{"responses": [`, []string{"script"}},
		{"empty", ``, []string{"empty"}},
		{"trailing", `{"responses": []} {}`, []string{"trailing"}},
		{"unknown top field", `{"responses": [], "expected_key": "x"}`, []string{"expected_key"}},
		{"unknown step field", `{"responses": [{"text": "a"}, {"tool": "shell", "cmd": "ls"}]}`, []string{"responses[1]", `"cmd"`}},
		{"shell without command", `{"responses": [{"text": "a"}, {"text": "b"}, {"tool": "shell"}]}`, []string{"responses[2]", "command"}},
		{"shell with path", `{"responses": [{"tool": "shell", "command": "ls", "path": "/x"}]}`, []string{"responses[0]", "not path"}},
		{"write without path", `{"responses": [{"tool": "write", "content": "x"}]}`, []string{"responses[0]", "path"}},
		{"write with command", `{"responses": [{"tool": "write", "path": "/a", "command": "ls"}]}`, []string{"responses[0]", "not command"}},
		{"unknown tool", `{"responses": [{"tool": "edit", "path": "/a"}]}`, []string{"responses[0]", `unknown tool "edit"`}},
		{"error too low", `{"responses": [{"error": 200}]}`, []string{"responses[0]", "400 and 599"}},
		{"error too high", `{"responses": [{"error": 600}]}`, []string{"responses[0]", "400 and 599"}},
		{"error with text", `{"responses": [{"error": 500, "text": "x"}]}`, []string{"responses[0]", "error step cannot"}},
		{"message without error", `{"responses": [{"text": "a", "message": "m"}]}`, []string{"responses[0]", "error steps"}},
		{"repeat without error", `{"responses": [{"text": "a", "repeat": true}]}`, []string{"responses[0]", "error steps"}},
		{"empty step", `{"responses": [{"text": "a"}, {}]}`, []string{"responses[1]", "none of tool, text or error"}},
		{"content without tool", `{"responses": [{"content": "a"}]}`, []string{"responses[0]", "need tool"}},
		{"negative usage", `{"responses": [{"text": "a", "usage": {"input_tokens": -1, "output_tokens": 1}}]}`, []string{"responses[0]", "negative"}},
		{"wrong type", `{"responses": [{"error": "401"}]}`, []string{"responses[0]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseScript([]byte(tc.script))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadScript(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(good, []byte(`{"responses": [{"text": "hello"}]}`), 0o644)
	os.WriteFile(bad, []byte(`{"responses": [{"tool": "shell"}]}`), 0o644)
	if s, err := LoadScript(good); err != nil || s.Responses[0].Text != "hello" {
		t.Errorf("good: %+v %v", s, err)
	}
	if _, err := LoadScript(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "responses[0]") {
		t.Errorf("bad: %v", err)
	}
	if _, err := LoadScript(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("missing file: no error")
	}
}

func TestNewValidates(t *testing.T) {
	_, err := New(Script{Responses: []Step{{Tool: "shell"}}}, Options{})
	if err == nil || !strings.Contains(err.Error(), "responses[0]") {
		t.Errorf("New with invalid script: %v", err)
	}
}

func TestResetRestartsScript(t *testing.T) {
	srv, err := New(Script{Responses: []Step{{Error: 401, Message: "bad"}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Reset(Script{Responses: []Step{{Tool: "bogus"}}}); err == nil {
		t.Fatal("invalid script accepted")
	}
	if err := srv.Reset(Script{Responses: []Step{{Text: "a"}, {Text: "b"}}}); err != nil {
		t.Fatal(err)
	}
	if srv.Remaining() != 2 {
		t.Fatalf("remaining %d", srv.Remaining())
	}
}
