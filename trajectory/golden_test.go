package trajectory

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// goldenAPI maps a capture's CLI to its API and route.
var goldenAPI = map[string]struct {
	api  API
	path string
}{
	"claude":   {AnthropicMessages, "/v1/messages"},
	"codex":    {OpenAIResponses, "/v1/responses"},
	"opencode": {OpenAIChat, "/v1/chat/completions"},
	"pi":       {OpenAIChat, "/v1/chat/completions"},
	"dsh":      {OpenAIChat, "/v1/chat/completions"},
}

// TestGoldenParsedBeforeForwarded replays the captured fake-model answers
// event by event and checks that the Record holds the text and the whole
// call for any query made once ResponseBody returned for the event that
// completes it, which is before the proxy hands that event to the CLI
// (the parse itself runs on the Record's worker; queries sync with it).
func TestGoldenParsedBeforeForwarded(t *testing.T) {
	files, _ := filepath.Glob("testdata/golden/*.txt")
	if len(files) == 0 {
		t.Fatal("no golden captures (go test -run TestFakeModelTurns -update)")
	}
	for _, f := range files {
		name := filepath.Base(f)
		cliName, rest, _ := strings.Cut(name, "-")
		g := goldenAPI[cliName]
		stream := strings.Contains(rest, "stream=true")
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var want, args string
			if strings.HasPrefix(rest, "call") {
				want = textWant
			} else {
				want = finalWant
			}
			var r Record
			x := r.Begin(http.MethodPost, g.path)
			ct := "application/json"
			if stream {
				ct = "text/event-stream"
			}
			x.Response(200, http.Header{"Content-Type": {ct}})
			// The event in which the text's (and the arguments') last
			// bytes arrive; before it the Record must not claim them.
			tail := func(s string) []byte {
				b, _ := json.Marshal(s)
				b = b[1 : len(b)-1]
				return b[len(b)-4:]
			}
			events := [][]byte{body}
			if stream {
				events = bytes.SplitAfter(body, []byte("\n\n"))
			}
			sawText, sawCall := false, false
			for _, ev := range events {
				x.ResponseBody(ev)
				hasText := r.HasText(want)
				if !sawText && bytes.Contains(ev, tail(want)) {
					if !hasText {
						t.Fatalf("text not held after the event that completed it: %s", ev)
					}
					sawText = true
				}
				if !sawText && hasText {
					t.Fatalf("text held before it was sent: %s", ev)
				}
				if calls := r.ToolCalls(); len(calls) == 1 && args == "" && json.Valid([]byte(calls[0].Arguments)) && strings.Contains(calls[0].Arguments, cmdWant) {
					args, sawCall = calls[0].Arguments, true
					if !bytes.Contains(ev, tail(args)) && !bytes.Contains(ev, []byte(cmdWant)) {
						t.Fatalf("arguments held before the event that completed them: %s", ev)
					}
				}
			}
			x.End(nil)
			if !sawText {
				t.Fatal("text never seen")
			}
			if strings.HasPrefix(rest, "call") != sawCall {
				t.Fatalf("call seen = %v", sawCall)
			}
			if s := r.Summary(); s.Responses != 1 || s.BadEvents != 0 || s.Unparsed != 1 /* no request fed */ {
				t.Fatalf("summary %+v", s)
			}
		})
	}
}
