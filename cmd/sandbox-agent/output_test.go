package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/egressproxy"
	"github.com/sandbox-agent/sandbox-agent/safetar"
)

const testKey = "sk-test-0123456789abcdef"

// testApp prints into buffers, as run wires a real one, knowing testKey.
func testApp() (*app, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	red := &redactor{}
	red.add(testKey)
	return &app{
		stdout: &msgWriter{w: &out, red: red}, stderr: &msgWriter{w: &errb, red: red},
		rawStdout: &out, rawStderr: &errb, red: red,
	}, &out, &errb
}

// hostile is what an agent may answer: terminal controls, an 8-bit CSI
// (raw and as U+009B), a bidi override, invalid UTF-8, and the key.
const hostile = "done\x1b[2J\x1b]0;x\x07 \u202eexe.txt \x9b6n \u009b6n \xff key=" + testKey

// terminalSafe fails t when b holds a byte or character a terminal acts
// on (keepNL: \n and \t allowed) or the key.
func terminalSafe(t *testing.T, what string, b []byte) {
	t.Helper()
	if !utf8.Valid(b) {
		t.Errorf("%s: invalid UTF-8: %q", what, b)
	}
	for _, r := range string(b) {
		if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == 0x202e {
			t.Errorf("%s: holds %U: %q", what, r, b)
			break
		}
	}
	if bytes.Contains(b, []byte(testKey)) {
		t.Errorf("%s: holds the key: %q", what, b)
	}
}

func TestPrintResultPlain(t *testing.T) {
	a, out, errb := testApp()
	a.printResult(a.jsonOut(), false, sandboxagent.TurnResult{Reply: hostile}, nil)
	want := `done\x1b[2J\x1b]0;x\x07 \u202eexe.txt \x9b6n \u009b6n \xff key=[REDACTED]` + "\n"
	if out.String() != want {
		t.Errorf("stdout %q\nwant   %q", out.String(), want)
	}
	terminalSafe(t, "stdout", out.Bytes())
	if errb.Len() != 0 {
		t.Errorf("stderr %q", errb.String())
	}

	// A failed turn: the error and the CLI's stderr quote the sandbox.
	a, out, errb = testApp()
	de := &sandboxagent.DriverError{Driver: "pi", Stderr: "boom\x1b[31m\nsandbox-agent: all fine " + testKey}
	a.printResult(a.jsonOut(), false, sandboxagent.TurnResult{}, errors.Join(errors.New("turn failed: \x1b]0;t\x07"), de))
	terminalSafe(t, "stderr", errb.Bytes())
	for _, l := range strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n") {
		if strings.HasPrefix(l, "sandbox-agent: all fine") {
			t.Errorf("a quoted line passes for ours: %q", errb.String())
		}
	}
	if !strings.Contains(errb.String(), `turn failed: \x1b]0;t\x07`) || !strings.Contains(errb.String(), "[REDACTED]") {
		t.Errorf("stderr %q", errb.String())
	}
	if out.Len() != 0 {
		t.Errorf("stdout %q after a failed turn", out.String())
	}
}

func TestPrintResultJSON(t *testing.T) {
	a, out, _ := testApp()
	enc := a.jsonOut()
	// A streamed event first, then the result line, as ask --json does.
	_ = enc.Encode(sandboxagent.Event{Kind: sandboxagent.KindText, Payload: sandboxagent.Payload{Text: hostile, Input: json.RawMessage(`{"k":"` + testKey + "\x9b\u202e\\u001b" + `"}`)}})
	a.printResult(enc, true, sandboxagent.TurnResult{Reply: hostile, SessionID: "s1"}, errors.New("failed with "+testKey))
	terminalSafe(t, "json", out.Bytes())
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %q", out.String())
	}
	// The strings are exact but for the key (and invalid UTF-8, which
	// JSON cannot carry: U+FFFD, as encoding/json does).
	exact := strings.ReplaceAll(strings.ReplaceAll(hostile, testKey, "[REDACTED]"), " \x9b6n", " \ufffd6n")
	exact = strings.ReplaceAll(exact, "\xff", "\ufffd")
	var ev sandboxagent.Event
	if err := json.Unmarshal([]byte(lines[0]), &ev); err != nil {
		t.Fatalf("event line %q: %v", lines[0], err)
	}
	if ev.Payload.Text != exact {
		t.Errorf("event text %q\nwant       %q", ev.Payload.Text, exact)
	}
	var in map[string]string
	if err := json.Unmarshal(ev.Payload.Input, &in); err != nil || in["k"] != "[REDACTED]\ufffd\u202e\x1b" {
		t.Errorf("event input %s: %q %v", ev.Payload.Input, in["k"], err)
	}
	var rl resultLine
	if err := json.Unmarshal([]byte(lines[1]), &rl); err != nil {
		t.Fatalf("result line %q: %v", lines[1], err)
	}
	if rl.Kind != "result" || rl.Reply != exact || rl.Error != "failed with [REDACTED]" || rl.SessionID != "s1" {
		t.Errorf("result %+v", rl)
	}
	for _, esc := range []string{`\u001b[2J`, `\u202e`, `\u009b6n`} {
		if !strings.Contains(lines[1], esc) {
			t.Errorf("result line %q lacks %s", lines[1], esc)
		}
	}
}

func TestSafeJSONKeepsCleanLiterals(t *testing.T) {
	red := &redactor{}
	red.add(testKey)
	for _, in := range []string{
		`{"kind":"text","payload":{"text":"héllo 日本 👍 \"q\" \\ \u003c"},"n":[1,2.5,null,true]}` + "\n",
		`{"a":"\u001b[2J","b":"\u202e"}` + "\n",
	} {
		if got := string(safeJSON([]byte(in), red)); got != in {
			t.Errorf("safeJSON(%s) = %s", in, got)
		}
	}
	// A key split by an escape is still the key once decoded.
	in := `{"k":"` + testKey[:2] + `\u002d` + testKey[3:] + `"}`
	if got := string(safeJSON([]byte(in), red)); got != `{"k":"[REDACTED]"}` {
		t.Errorf("escaped key: %s", got)
	}
	// Beyond U+FFFF: a surrogate pair, as JSON needs.
	if got := string(safeJSON([]byte(`["a`+"\U000e0041"+`"]`), red)); got != `["a\udb40\udc41"]` {
		t.Errorf("tag character: %s", got)
	}
}

func TestReportSkippedEscapesNames(t *testing.T) {
	a, _, errb := testApp()
	a.reportSkipped("/work", sandboxagent.DownloadReport{
		Skipped: []safetar.Skipped{
			{Name: "out/\x1b]0;pwned\x07", Reason: "symlink"},
			{Name: "out/\x1b[2J\nsandbox-agent: fine", Reason: "fifo"},
		},
		SkippedOmitted: 3,
	})
	want := "sandbox-agent: download /work: skipped out/\\x1b]0;pwned\\x07: symlink\n" +
		"sandbox-agent: download /work: skipped out/\\x1b[2J\\nsandbox-agent: fine: fifo\n" +
		"sandbox-agent: download /work: skipped 3 more\n"
	if errb.String() != want {
		t.Errorf("got  %q\nwant %q", errb.String(), want)
	}
}

func TestFailRedactsAndEscapes(t *testing.T) {
	a, _, errb := testApp()
	if code := a.fail(errors.New("copy /tmp/\x1b[2J: key " + testKey + "\nsandbox-agent: fake")); code != exitError {
		t.Errorf("exit %d", code)
	}
	want := "sandbox-agent: copy /tmp/\\x1b[2J: key [REDACTED]\n  sandbox-agent: fake\n"
	if errb.String() != want {
		t.Errorf("got  %q\nwant %q", errb.String(), want)
	}
}

func TestEgressDenialEscapesHost(t *testing.T) {
	a, _, errb := testApp()
	opts := sandboxagent.SandboxOptions{Egress: sandboxagent.EgressNone}
	a.egressNotes(&opts)
	opts.OnEgress(egressproxy.Record{Host: "evil\x1b]0;t\x07.org\nsandbox-agent: ok", Port: 443, Reason: "not on the allow-list"})
	want := "sandbox-agent: egress to evil\\x1b]0;t\\x07.org\\nsandbox-agent: ok:443 denied: not on the allow-list\n"
	if errb.String() != want {
		t.Errorf("got  %q\nwant %q", errb.String(), want)
	}
}

func TestExecStreamsExactIntoPipes(t *testing.T) {
	a, out, errb := testApp()
	stdout, stderr, flush := a.execStreams()
	data := "\x1b[2J\xff\u202e" + testKey
	stdout.Write([]byte(data))
	stderr.Write([]byte(data))
	flush()
	// Not a terminal: data, byte for byte.
	if out.String() != data || errb.String() != data {
		t.Errorf("stdout %q stderr %q, want %q", out.String(), errb.String(), data)
	}
}

func TestRedactor(t *testing.T) {
	r := &redactor{}
	r.add("short")           // too short to redact
	r.add("sk-abcdefgh")     // contained in the next
	r.add("sk-abcdefgh-xyz") // longest first
	r.add("sk-abcdefgh")
	if got := r.redact("a short sk-abcdefgh-xyz sk-abcdefgh"); got != "a short [REDACTED] [REDACTED]" {
		t.Errorf("redact: %q", got)
	}
	if len(r.secrets) != 2 {
		t.Errorf("secrets %q", r.secrets)
	}
}

// The keys run knows from the environment never reach the output.
func TestRunRedactsEnvironmentKeys(t *testing.T) {
	key := "zk-from-the-environment-42"
	code, _, stderr := runCLI(t, map[string]string{"ZHIPUAI_CODING_TOKEN": key}, "exec", "--env", "X", "--", key)
	if code != exitError || strings.Contains(stderr, key) || !strings.Contains(stderr, "want KEY=VALUE") {
		t.Errorf("exit %d stderr %q", code, stderr)
	}
	code, _, stderr = runCLI(t, map[string]string{"GATEWAY_KEY": key}, "exec", "--upload", key, "--", "true")
	if code != exitError || strings.Contains(stderr, key) || !strings.Contains(stderr, `--upload "[REDACTED]"`) {
		t.Errorf("exit %d stderr %q", code, stderr)
	}
}

// The key an endpoint uses is redacted from then on; the built-in gateway
// placeholder is not a secret.
func TestEndpointKeysAreRedacted(t *testing.T) {
	a, _, errb := testApp()
	a.cli = defaultSettings()
	a.getenv = func(k string) string {
		return map[string]string{"MY_KEY": "sk-mine-0123456789", "ZHIPUAI_CODING_TOKEN": "zk-0123456789"}[k]
	}
	for _, n := range []string{"claude", "opencode"} {
		if _, err := a.realEndpoint(n, "p", ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.realEndpoint("pi", "", "MY_KEY"); err != nil {
		t.Fatal(err)
	}
	a.fail(errors.New("keys: sk-mine-0123456789 zk-0123456789 " + defaultSettings().gatewayKey))
	if want := "sandbox-agent: keys: [REDACTED] [REDACTED] sk-sandbox-agent\n"; errb.String() != want {
		t.Errorf("got %q, want %q", errb.String(), want)
	}
}
