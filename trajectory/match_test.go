package trajectory

import (
	"net/http"
	"strings"
	"testing"
)

func TestOutputMatches(t *testing.T) {
	long := strings.Repeat("line of output\n", 50)
	for _, tc := range []struct {
		name, sent, reported string
		want                 bool
	}{
		{"claude placeholder, as sent", "(Bash completed with no output)", "(Bash completed with no output)", true},
		{"opencode placeholder", "(no output)", "(no output)", true},
		{"pi empty report of a placeholder", "(no output)", "", true},
		{"whitespace differs", "a  b\n\nc\n", "a b c", true},
		{"codex envelope, empty output", "Chunk ID: facc9a\nWall time: 0.0000 seconds\nProcess exited with code 0\nOriginal token count: 0\nOutput:\n", "", true},
		{"codex envelope", "Exit code: 0\nWall time: 1.2 seconds\nOutput:\nhi\n", "hi\n", true},
		{"codex envelope, other output", "Exit code: 0\nWall time: 1.2 seconds\nOutput:\nhi\n", "bye", false},
		{"part of the output", "stdout line\nstderr line", "stdout line", true},
		{"cut for the model", "head\n[... 120 lines truncated ...]\ntail", "head\n" + long + "tail", true},
		{"codex inline cut", "start…1200 tokens truncated…end", "start" + long + "end", true},
		{"cut, piece missing", "head\n[... 120 lines truncated ...]\ntail", "head\n" + long, false},
		{"forged", "(no output)", "root:x:0:0", false},
		{"empty report of real output", "hi", "", false},
		{"header-like text is not an envelope", "hello\nOutput:\nhi", "hi", true}, // contained all the same
	} {
		if got := OutputMatches(tc.sent, tc.reported); got != tc.want {
			t.Errorf("%s: OutputMatches(%q, %q) = %v", tc.name, tc.sent, tc.reported, got)
		}
	}
}

func TestCommandMatches(t *testing.T) {
	for _, tc := range []struct {
		args, command string
		want          bool
	}{
		{`{"command":"echo hi > /tmp/out.txt"}`, "echo hi > /tmp/out.txt", true},
		{`{"cmd":"echo hi > /tmp/out.txt"}`, "/bin/bash -lc 'echo hi > /tmp/out.txt'", true},
		{`{"cmd":"echo 'a b'"}`, `/bin/bash -lc 'echo '"'"'a b'"'"''`, true},
		{`{"cmd":"echo \"x\""}`, `bash -c "echo \"x\""`, true},
		{`{"command":["bash","-lc","make test"]}`, "make test", true},
		{`{"command":["bash","-lc","make test"]}`, "bash -lc make test", true},
		{`{"type":"exec","command":["ls","-la"]}`, "ls -la", true},
		{`{"script":"ls\n  -la"}`, "ls -la", true},
		{`{"cmd":"echo hi"}`, "/bin/bash -lc 'echo hi; rm -rf /'", false},
		{`{"cmd":"echo hi"}`, "/bin/bash -lc 'echo hi' extra", false},
		{`{"path":"/tmp/x"}`, "/tmp/x", false},
		{`not json`, "x", false},
		{`{"cmd":"x"}`, "  ", false},
	} {
		if got := CommandMatches(ToolCall{Arguments: tc.args}, tc.command); got != tc.want {
			t.Errorf("CommandMatches(%s, %q) = %v", tc.args, tc.command, got)
		}
	}
}

// TestReferenceRequests parses the CLIs' captured second requests: the
// tool result counts only once a response of the Record asked for its call.
func TestReferenceRequests(t *testing.T) {
	for _, tc := range []struct {
		file, path, callResp, id, out string
	}{
		{"claude-request-2-after-tool.json", "/v1/messages",
			`{"type":"message","content":[{"type":"tool_use","id":"toolu_mock_c7e77bfe4f2243e0","name":"Bash","input":{"command":"echo hi > /tmp/out.txt","description":"Write hi to /tmp/out.txt"}}],"stop_reason":"tool_use"}`,
			"toolu_mock_c7e77bfe4f2243e0", "(Bash completed with no output)"},
		{"codex-request-2-after-tool.json", "/v1/responses",
			`{"object":"response","status":"completed","output":[{"type":"function_call","id":"fc_mock_2","call_id":"call_mock_b4376da47f78","name":"exec_command","arguments":"{\"cmd\": \"echo hi > /tmp/out.txt\"}"}]}`,
			"call_mock_b4376da47f78", "Chunk ID: facc9a\nWall time: 0.0000 seconds\nProcess exited with code 0\nOriginal token count: 0\nOutput:\n"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			req := loadCaptured(t, tc.file)[0]
			json := http.Header{"Content-Type": {"application/json"}}
			// Without the call in the Record, the result is history.
			var lone Record
			x := lone.Begin("POST", tc.path)
			x.RequestBody(req.Body)
			x.End(nil)
			if _, ok := lone.ToolResult(tc.id); ok {
				t.Fatal("a result for a call the Record never saw counted")
			}

			var r Record
			x = r.Begin("POST", tc.path)
			x.RequestBody([]byte(`{"tools":[{"name":"x"}]}`))
			x.Response(200, json)
			x.ResponseBody([]byte(tc.callResp))
			x.End(nil)
			x = r.Begin("POST", tc.path)
			x.RequestBody(req.Body[:len(req.Body)/2])
			if _, ok := r.ToolResult(tc.id); ok {
				t.Fatal("half a request parsed")
			}
			x.RequestBody(req.Body[len(req.Body)/2:])
			// The body is whole: a query parses it before End.
			res, ok := r.ToolResult(tc.id)
			if !ok || res.Output != tc.out || res.Exchange != 2 {
				t.Fatalf("ToolResult = %+v, %v", res, ok)
			}
			if !r.ResultMatches(tc.id, "") {
				t.Error("empty CLI output does not match")
			}
			x.End(nil)
			if s := r.Summary(); s.ToolResults != 1 || s.Unparsed != 0 {
				t.Errorf("summary %+v", s)
			}
		})
	}
}
