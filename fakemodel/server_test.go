package fakemodel

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// trickyContent must reach the file byte for byte.
const trickyContent = "quotes ' \" \\ `tick` $HOME %s %%\nnon-ASCII: héllo – 日本語 🚀\n\ttab\r\n<script>&amp;</script>\x00end-without-newline"

// cliCase describes one CLI: its captured requests and the tools the fake
// must pick from them.
type cliCase struct {
	cli      string
	fixture  string
	shell    string   // expected shell tool name
	cmdKey   string   // its command parameter
	extra    []string // other arguments that must be filled
	write    string   // expected write tool ("" = write through the shell)
	pathKey  string
	contKey  string
	secretHK string // header carrying the key
}

var cliCases = []cliCase{
	{cli: "claude", fixture: "claude-request-1.json", shell: "Bash", cmdKey: "command", extra: []string{"description"},
		write: "Write", pathKey: "file_path", contKey: "content", secretHK: "x-api-key"},
	{cli: "codex", fixture: "codex-request-1.json", shell: "exec_command", cmdKey: "cmd", secretHK: "Authorization"},
	{cli: "opencode", fixture: "opencode-requests.jsonl", shell: "bash", cmdKey: "command",
		write: "write", pathKey: "filePath", contKey: "content", secretHK: "Authorization"},
	{cli: "pi", fixture: "pi-requests.jsonl", shell: "bash", cmdKey: "command",
		write: "write", pathKey: "path", contKey: "content", secretHK: "Authorization"},
	{cli: "dsh", fixture: "dsh-requests.jsonl", shell: "bash", cmdKey: "command", extra: []string{"description"},
		write: "write", pathKey: "file_path", contKey: "content", secretHK: "Authorization"},
}

func startServer(t *testing.T, script Script, opts Options) *Server {
	t.Helper()
	s, err := New(script, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestToolSelectionFromFixtures(t *testing.T) {
	for _, c := range cliCases {
		t.Run(c.cli, func(t *testing.T) {
			for _, f := range loadFixtures(t, c.fixture) {
				if !f.hasTools() {
					continue
				}
				var body struct {
					Tools json.RawMessage `json:"tools"`
				}
				mustUnmarshal(t, f.Body, &body)
				tools := parseTools(body.Tools)
				sh, ok := findShell(tools)
				if !ok || sh.Name != c.shell {
					t.Fatalf("shell tool = %q (%v), want %q among %s", sh.Name, ok, c.shell, toolNames(tools))
				}
				if key, argv := sh.commandKey(); key != c.cmdKey || argv {
					t.Errorf("command key = %q argv=%v, want %q", key, argv, c.cmdKey)
				}
				w, ok := findWrite(tools)
				if w.Name != c.write || ok != (c.write != "") {
					t.Errorf("write tool = %q (%v), want %q", w.Name, ok, c.write)
				}
			}
		})
	}
}

func TestToolSelectionShapes(t *testing.T) {
	tests := []struct {
		name, tools string
		shell, key  string
		argv        bool
	}{
		{"anthropic", `[{"name":"Read","input_schema":{"properties":{"file_path":{"type":"string"}}}},
			{"name":"Bash","input_schema":{"properties":{"command":{"type":"string"}},"required":["command"]}}]`, "Bash", "command", false},
		{"chat", `[{"type":"function","function":{"name":"run_shell_command","parameters":{"properties":{"command":{"type":"string"}}}}}]`,
			"run_shell_command", "command", false},
		{"responses legacy shell argv", `[{"type":"function","name":"shell","parameters":{"properties":{"command":{"type":"array","items":{"type":"string"}}}}}]`,
			"shell", "command", true},
		{"enum command is not a shell", `[{"type":"function","function":{"name":"str_replace_editor","parameters":{"properties":{"command":{"type":"string","enum":["view","create"]},"path":{"type":"string"}},"required":["command","path"]}}}]`,
			"", "", false},
		{"by description", `[{"type":"function","function":{"name":"do_it","description":"Runs a shell command","parameters":{"properties":{"cmd":{"type":["string","null"]}},"required":["cmd"]}}}]`,
			"do_it", "cmd", false},
		{"custom tools skipped", `[{"type":"custom","name":"exec"},{"type":"web_search"}]`, "", "", false},
		{"known name beats fuzzy name", `[{"type":"function","name":"shell_helper","parameters":{"properties":{"script":{"type":"string"}}}},
			{"type":"function","name":"exec_command","parameters":{"properties":{"cmd":{"type":"string"}}}}]`, "exec_command", "cmd", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sh, ok := findShell(parseTools(json.RawMessage(tc.tools)))
			if sh.Name != tc.shell || ok != (tc.shell != "") {
				t.Fatalf("shell = %q (%v), want %q", sh.Name, ok, tc.shell)
			}
			if !ok {
				return
			}
			if key, argv := sh.commandKey(); key != tc.key || argv != tc.argv {
				t.Errorf("key = %q argv=%v, want %q %v", key, argv, tc.key, tc.argv)
			}
			call, err := shellCall(sh, "echo 'x'", "d")
			if err != nil {
				t.Fatal(err)
			}
			var args map[string]any
			mustUnmarshal(t, []byte(call.Arguments), &args)
			if tc.argv {
				if fmt.Sprint(args[tc.key]) != "[bash -lc echo 'x']" {
					t.Errorf("argv args: %v", args)
				}
			} else if args[tc.key] != "echo 'x'" {
				t.Errorf("args: %v", args)
			}
		})
	}
}

func TestFillRequired(t *testing.T) {
	tools := parseTools(json.RawMessage(`[{"type":"function","function":{"name":"bash","parameters":{
		"properties":{"command":{"type":"string"},"description":{"type":"string"},"timeoutMs":{"type":"integer","maximum":60000},
		"mode":{"type":"string","enum":["fast","slow"]},"background":{"type":"boolean"},"env":{"type":"object"},"argv":{"type":"array"},
		"retries":{"type":"integer","default":3},"workdir":{"type":"string"},"optional":{"type":"string"}},
		"required":["command","description","timeoutMs","mode","background","env","argv","retries","workdir"]}}}]`))
	call, err := shellCall(tools[0], "ls", "List files")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"argv":[],"background":false,"command":"ls","description":"List files","env":{},"mode":"fast","retries":3,"timeoutMs":60000,"workdir":"."}`
	if call.Arguments != want {
		t.Errorf("arguments\n got %s\nwant %s", call.Arguments, want)
	}
}

// TestCLIFlows replays each CLI's captured requests through a real loopback
// listener, streamed and not: title request, shell call, write call, text
// with thinking, exhaustion.
func TestCLIFlows(t *testing.T) {
	for _, c := range cliCases {
		for _, stream := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stream=%v", c.cli, stream), func(t *testing.T) {
				testCLIFlow(t, c, stream)
			})
		}
	}
}

func testCLIFlow(t *testing.T, c cliCase, stream bool) {
	fixtures := loadFixtures(t, c.fixture)
	var tools, title *fixtureReq
	for i := range fixtures {
		if fixtures[i].hasTools() {
			tools = &fixtures[i]
		} else {
			title = &fixtures[i]
		}
	}
	dir := t.TempDir()
	target := filepath.Join(dir, "sub dir", "it's.txt")
	script := Script{Responses: []Step{
		{Tool: ToolShell, Command: `echo "hi" > /tmp/out.txt`, Thinking: "I will run it.", Text: "Running."},
		{Tool: ToolWrite, Path: target, Content: trickyContent},
		{Thinking: "All done, think ✓", Text: "Finished: ✓ \"ok\"", Usage: &Usage{InputTokens: 1234, OutputTokens: 56}},
	}}
	logFile := filepath.Join(dir, "requests.jsonl")
	s := startServer(t, script, Options{LogFile: logFile})
	base := s.URL()

	var wantSteps []int
	if title != nil {
		tu := send(t, base, *title, stream, nil)
		if tu.Status != 200 || tu.Text != TitleText || tu.ToolName != "" {
			t.Fatalf("title request: %+v", tu)
		}
		if s.Remaining() != 3 {
			t.Fatalf("title request consumed a step")
		}
		wantSteps = append(wantSteps, -1)
	}

	// 1. shell
	tu := send(t, base, *tools, stream, nil)
	checkTurn(t, c, tu, stream)
	if tu.ToolName != c.shell || tu.Thinking != "I will run it." || tu.Text != "Running." {
		t.Fatalf("shell turn: %+v", tu)
	}
	args := tu.args(t)
	if args[c.cmdKey] != `echo "hi" > /tmp/out.txt` {
		t.Errorf("shell args %v", args)
	}
	for _, k := range c.extra {
		if v, _ := args[k].(string); v == "" {
			t.Errorf("argument %q not filled: %v", k, args)
		}
	}
	wantStop(t, c, tu, true)

	// 2. write
	tu = send(t, base, *tools, stream, nil)
	checkTurn(t, c, tu, stream)
	args = tu.args(t)
	if c.write != "" {
		if tu.ToolName != c.write || args[c.pathKey] != target || args[c.contKey] != trickyContent {
			t.Errorf("write turn %s %v", tu.ToolName, args)
		}
	} else {
		if tu.ToolName != c.shell {
			t.Fatalf("write through shell used %q", tu.ToolName)
		}
		cmd, _ := args[c.cmdKey].(string)
		out, err := exec.Command("bash", "-c", cmd).CombinedOutput()
		if err != nil {
			t.Fatalf("write command %q: %v\n%s", cmd, err, out)
		}
		got, err := os.ReadFile(target)
		if err != nil || string(got) != trickyContent {
			t.Errorf("written %q (%v), want %q", got, err, trickyContent)
		}
	}

	// 3. text with thinking and scripted usage
	tu = send(t, base, *tools, stream, nil)
	checkTurn(t, c, tu, stream)
	if tu.ToolName != "" || tu.Text != "Finished: ✓ \"ok\"" || tu.Thinking != "All done, think ✓" {
		t.Errorf("text turn: %+v", tu)
	}
	if tu.InTok != 1234 || tu.OutTok != 56 {
		t.Errorf("scripted usage: in %d out %d", tu.InTok, tu.OutTok)
	}
	wantStop(t, c, tu, false)

	// 4. exhausted
	tu = send(t, base, *tools, stream, nil)
	checkTurn(t, c, tu, stream)
	if tu.Text != DoneText || tu.ToolName != "" || tu.Thinking != "" {
		t.Errorf("exhausted turn: %+v", tu)
	}
	if s.Remaining() != 0 {
		t.Errorf("Remaining = %d", s.Remaining())
	}
	wantSteps = append(wantSteps, 0, 1, 2, -1)

	// The record: every request, secrets redacted, bodies kept.
	reqs := s.Requests()
	var steps []int
	for i, r := range reqs {
		steps = append(steps, r.Step)
		if r.Seq != i+1 || r.Status != 200 || r.API != apiOf(tools.Path) || r.Method != "POST" {
			t.Errorf("request %d: %+v", i, r)
		}
		if got := r.Header.Get(c.secretHK); got == "" || !strings.Contains(got, "[REDACTED]") {
			t.Errorf("header %s = %q, want redacted", c.secretHK, got)
		}
		var body map[string]any
		if err := json.Unmarshal(r.Body, &body); err != nil || body["model"] == nil {
			t.Errorf("recorded body: %v", err)
		}
	}
	if !slices.Equal(steps, wantSteps) {
		t.Errorf("steps = %v, want %v", steps, wantSteps)
	}
	if c.cli == "claude" && reqs[0].Query != "beta=true" {
		t.Errorf("query = %q", reqs[0].Query)
	}

	// The log file holds the same records and no secret.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	var secret string
	for k, v := range tools.Headers {
		if strings.EqualFold(k, c.secretHK) {
			secret = strings.TrimPrefix(v, "Bearer ")
		}
	}
	if secret == "" || bytes.Contains(data, []byte(secret)) {
		t.Errorf("log file leaks the key %q (or fixture has none)", secret)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<24)
	n := 0
	for sc.Scan() {
		var r Request
		mustUnmarshal(t, sc.Bytes(), &r)
		if r.Seq != reqs[n].Seq || r.Step != reqs[n].Step || !bytes.Equal(r.Body, reqs[n].Body) {
			t.Errorf("log line %d differs from Requests()", n)
		}
		n++
	}
	if n != len(reqs) {
		t.Errorf("log has %d lines, want %d", n, len(reqs))
	}
}

// checkTurn checks what every successful answer must have.
func checkTurn(t *testing.T, c cliCase, tu turn, stream bool) {
	t.Helper()
	if tu.Status != 200 {
		t.Fatalf("status %d: %s", tu.Status, tu.Body)
	}
	if tu.InTok <= 0 || tu.OutTok <= 0 {
		t.Errorf("usage missing: in %d out %d", tu.InTok, tu.OutTok)
	}
	if tu.Thinking != "" && tu.ReasoningTokens <= 0 && c.cli != "claude" {
		t.Errorf("reasoning tokens missing")
	}
	if tu.ToolName != "" && tu.CallID == "" {
		t.Errorf("tool call without id")
	}
	if !stream {
		return
	}
	ev := tu.Events
	switch apiOf(loadFixtures(t, c.fixture)[0].Path) {
	case APIMessages:
		if ev[0] != "message_start" || ev[len(ev)-1] != "message_stop" || ev[len(ev)-2] != "message_delta" {
			t.Errorf("messages events: %v", ev)
		}
	case APIResponses:
		if ev[0] != "response.created" || ev[len(ev)-1] != "response.completed" {
			t.Errorf("responses events: %v", ev)
		}
	case APIChat:
		if ev[len(ev)-1] != "[DONE]" {
			t.Errorf("chat events: %v", ev)
		}
	}
}

func wantStop(t *testing.T, c cliCase, tu turn, tool bool) {
	t.Helper()
	want := map[string][2]string{
		APIChat:      {"stop", "tool_calls"},
		APIMessages:  {"end_turn", "tool_use"},
		APIResponses: {"", ""},
	}[apiOf(loadFixtures(t, c.fixture)[0].Path)]
	i := 0
	if tool {
		i = 1
	}
	if tu.Stop != want[i] {
		t.Errorf("stop reason %q, want %q", tu.Stop, want[i])
	}
}

func TestErrorSteps(t *testing.T) {
	apis := []struct {
		cli     string
		fixture string
		check   func(t *testing.T, status int, body []byte)
	}{
		{"claude", "claude-request-1.json", func(t *testing.T, status int, body []byte) {
			var e struct {
				Type  string `json:"type"`
				Error struct{ Type, Message string }
			}
			mustUnmarshal(t, body, &e)
			want := map[int]string{401: "authentication_error", 500: "api_error", 429: "rate_limit_error"}[status]
			if e.Type != "error" || e.Error.Type != want || e.Error.Message == "" {
				t.Errorf("anthropic error body %s", body)
			}
		}},
		{"codex", "codex-request-1.json", checkOpenAIError},
		{"pi", "pi-requests.jsonl", checkOpenAIError},
	}
	for _, a := range apis {
		for _, stream := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stream=%v", a.cli, stream), func(t *testing.T) {
				req := loadFixtures(t, a.fixture)[0]
				noTools := req
				var body map[string]json.RawMessage
				mustUnmarshal(t, req.Body, &body)
				delete(body, "tools")
				noTools.Body, _ = json.Marshal(body)

				// 500 and 429 are consumed once; 401 sticks, even for
				// requests without tools.
				s := startServer(t, Script{Responses: []Step{
					{Error: 500, Message: "boom"}, {Text: "after 500"},
					{Error: 429}, {Text: "after 429"},
					{Error: 401, Message: "invalid api key"}, {Text: "never"},
				}}, Options{})
				for _, want := range []struct {
					status int
					text   string
					f      fixtureReq
				}{
					{500, "", req}, {200, "after 500", req}, {200, TitleText, noTools}, {429, "", req}, {200, "after 429", req},
					{401, "", req}, {401, "", req}, {401, "", noTools},
				} {
					tu := send(t, s.URL(), want.f, stream, nil)
					if tu.Status != want.status || tu.Text != want.text {
						t.Fatalf("got %d %q, want %d %q (%s)", tu.Status, tu.Text, want.status, want.text, tu.Body)
					}
					if tu.Status != 200 {
						a.check(t, tu.Status, tu.Body)
						if !strings.HasPrefix(tu.ContentType, "application/json") {
							t.Errorf("error Content-Type %q", tu.ContentType)
						}
					}
				}
				if got := s.Requests(); got[len(got)-1].Step != 4 || got[0].Step != 0 {
					t.Errorf("error steps recorded as %d, %d", got[0].Step, got[len(got)-1].Step)
				}
				if !strings.Contains(string(send(t, s.URL(), req, stream, nil).Body), "invalid api key") {
					t.Error("message not in body")
				}
			})
		}
	}
}

func checkOpenAIError(t *testing.T, status int, body []byte) {
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	mustUnmarshal(t, body, &e)
	if e.Error.Message == "" || e.Error.Type == "" {
		t.Errorf("openai error body %s", body)
	}
	if status == 401 && e.Error.Code != "invalid_api_key" {
		t.Errorf("401 code %v", e.Error.Code)
	}
}

func TestRepeatOverride(t *testing.T) {
	req := loadFixtures(t, "opencode-requests.jsonl")[1]
	s := startServer(t, Script{Responses: []Step{
		{Error: 401, Repeat: new(false)}, {Error: 503, Repeat: new(true)},
	}}, Options{})
	for _, want := range []int{401, 503, 503, 503} {
		if tu := send(t, s.URL(), req, true, nil); tu.Status != want {
			t.Fatalf("status %d, want %d", tu.Status, want)
		}
	}
}

func TestExpectKey(t *testing.T) {
	s := startServer(t, Script{ExpectKey: "sk-good", Responses: []Step{{Text: "one"}}}, Options{})
	claude := loadFixtures(t, "claude-request-1.json")[0]
	pi := loadFixtures(t, "pi-requests.jsonl")[0]

	tu := send(t, s.URL(), claude, true, nil) // fixture key sk-ant-mock-key
	if tu.Status != 401 || !strings.Contains(string(tu.Body), "authentication_error") {
		t.Fatalf("bad x-api-key: %d %s", tu.Status, tu.Body)
	}
	tu = send(t, s.URL(), pi, true, nil)
	if tu.Status != 401 || !strings.Contains(string(tu.Body), "invalid_api_key") {
		t.Fatalf("bad bearer: %d %s", tu.Status, tu.Body)
	}
	if s.Remaining() != 1 {
		t.Fatal("a rejected request consumed a step")
	}
	if tu = send(t, s.URL(), pi, true, map[string]string{"Authorization": "Bearer sk-good"}); tu.Text != "one" {
		t.Fatalf("good bearer: %+v", tu)
	}
	if tu = send(t, s.URL(), claude, false, map[string]string{"x-api-key": "sk-good"}); tu.Text != DoneText {
		t.Fatalf("good x-api-key: %+v", tu)
	}
	resp, err := http.Get(s.URL() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("models without key: %d", resp.StatusCode)
	}
}

func TestMissingTool(t *testing.T) {
	s, err := New(Script{Responses: []Step{{Tool: ToolShell, Command: "ls"}, {Tool: ToolWrite, Path: "/a"}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	f := fixtureReq{Path: "/v1/chat/completions", Body: json.RawMessage(`{"model":"m","tools":[{"type":"function","function":{"name":"read","parameters":{"properties":{"path":{"type":"string"}}}}}]}`)}
	for _, want := range []string{`tool "shell"`, `tool "write"`} {
		tu := send(t, ts.URL, f, false, nil)
		if tu.Status != 200 || tu.ToolName != "" || !strings.Contains(tu.Text, want) || !strings.Contains(tu.Text, "[read]") {
			t.Errorf("got %+v", tu)
		}
	}
	if s.Remaining() != 0 {
		t.Error("steps not consumed")
	}
}

func TestRoutes(t *testing.T) {
	s, err := New(Script{Responses: []Step{{Text: "x"}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	gz := func(s string) []byte {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		w.Write([]byte(s))
		w.Close()
		return b.Bytes()
	}
	tests := []struct {
		method, path string
		body         []byte
		header       map[string]string
		status       int
		contains     string
	}{
		{"GET", "/v1/models", nil, nil, 200, `"id":"fake-model"`},
		{"GET", "/models", nil, nil, 200, `"object":"list"`},
		{"GET", "/v1/models/claude-x", nil, nil, 200, `"id":"claude-x"`},
		{"HEAD", "/", nil, nil, 200, ""},
		{"HEAD", "/api/hello", nil, nil, 200, ""},
		{"GET", "/", nil, nil, 200, `"ok":true`},
		{"POST", "/v1/messages/count_tokens?beta=true", []byte(`{"model":"m","messages":[]}`), nil, 200, `"input_tokens":`},
		{"GET", "/v1/nope", nil, nil, 404, `"error"`},
		{"POST", "/v1/messages/nope", nil, map[string]string{"anthropic-version": "2023-06-01"}, 404, `"not_found_error"`},
		{"GET", "/v1/chat/completions", nil, nil, 405, `"error"`},
		{"POST", "/v1/responses", []byte(`not json`), nil, 400, `not a JSON object`},
		{"POST", "/v1/messages", []byte(`[1]`), nil, 400, `"invalid_request_error"`},
		{"POST", "/chat/completions", []byte(`{"model":"m"}`), nil, 200, TitleText},
		{"POST", "/v1/chat/completions", gz(`{"model":"m"}`), map[string]string{"Content-Encoding": "gzip"}, 200, TitleText},
		{"POST", "/v1/responses", []byte(`{}`), map[string]string{"Content-Encoding": "zstd"}, 400, "Content-Encoding"},
		// The Anthropic system role in messages and a top-level system are accepted.
		{"POST", "/messages", []byte(`{"model":"m","system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"hi"},{"role":"system","content":"env"}],"tools":[{"name":"Bash","input_schema":{}}]}`), nil, 200, `"text":"x"`},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, ts.URL+tc.path, bytes.NewReader(tc.body))
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.contains) {
				t.Errorf("%d %s, want %d containing %q", resp.StatusCode, b, tc.status, tc.contains)
			}
			if tc.method != "HEAD" && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				t.Errorf("Content-Type %q", resp.Header.Get("Content-Type"))
			}
		})
	}
	reqs := s.Requests()
	if len(reqs) != len(tests) {
		t.Errorf("recorded %d requests, want %d", len(reqs), len(tests))
	}
	if reqs[len(reqs)-1].Step != 0 || s.Remaining() != 0 {
		t.Errorf("messages request with tools did not consume the step")
	}
}

func TestConcurrentConsumption(t *testing.T) {
	const n = 40
	steps := make([]Step, n)
	for i := range steps {
		steps[i] = Step{Text: fmt.Sprintf("step %d", i)}
	}
	s := startServer(t, Script{Responses: steps}, Options{})
	req := loadFixtures(t, "pi-requests.jsonl")[0]
	texts := make([]string, n+5)
	var wg sync.WaitGroup
	for i := range texts {
		wg.Go(func() { texts[i] = send(t, s.URL(), req, i%2 == 0, nil).Text })
	}
	wg.Wait()
	seen := map[string]int{}
	for _, tx := range texts {
		seen[tx]++
	}
	for i := range n {
		if seen[fmt.Sprintf("step %d", i)] != 1 {
			t.Errorf("step %d answered %d times", i, seen[fmt.Sprintf("step %d", i)])
		}
	}
	if seen[DoneText] != 5 {
		t.Errorf("DONE answered %d times, want 5", seen[DoneText])
	}
}

func TestStartLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:0", "example.com:80", "nonsense"} {
		s, _ := New(Script{}, Options{})
		if err := s.Start(addr); err == nil {
			s.Close()
			t.Errorf("Start(%q) accepted", addr)
		}
	}
	s := startServer(t, Script{}, Options{})
	if !strings.HasPrefix(s.URL(), "http://127.0.0.1:") {
		t.Errorf("URL %q", s.URL())
	}
	if err := s.Start(""); err == nil {
		t.Error("second Start accepted")
	}
	s2, _ := New(Script{}, Options{AllowNonLoopback: true})
	if err := s2.Start("0.0.0.0:0"); err != nil {
		t.Errorf("AllowNonLoopback: %v", err)
	} else {
		s2.Close()
	}
}

func TestWriteCommand(t *testing.T) {
	dir := t.TempDir()
	for i, p := range []string{filepath.Join(dir, "a.txt"), filepath.Join(dir, "x", "y z", "q'uote.txt"), "rel/file.txt"} {
		content := fmt.Sprintf("%d:%s", i, trickyContent)
		cmd := exec.Command("bash", "-c", writeCommand(p, content))
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != content {
			t.Errorf("%s: %q %v", p, got, err)
		}
	}
}

func TestPiecesKeepRunes(t *testing.T) {
	s := strings.Repeat("日本語🚀a", 50)
	ps := pieces(s)
	if len(ps) < 2 || strings.Join(ps, "") != s {
		t.Fatalf("pieces: %d", len(ps))
	}
	for _, p := range ps {
		if !json.Valid([]byte(fmt.Sprintf("%q", p))) || !strings.HasPrefix(s[strings.Index(s, p):], p) {
			t.Fatal("bad piece")
		}
		for _, r := range p {
			if r == 0xFFFD {
				t.Fatal("piece splits a rune")
			}
		}
	}
}
