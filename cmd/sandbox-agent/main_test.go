package main

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/images/catalog"
)

// runCLI runs the command in-process with an empty environment (plus env).
func runCLI(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	getenv := func(k string) string {
		if k == "SANDBOX_AGENT_CONFIG" && env[k] == "" {
			return "/nonexistent/sandbox-agent-test-config.json"
		}
		return env[k]
	}
	code := run(context.Background(), args, &out, &errb, getenv)
	return code, out.String(), errb.String()
}

func TestUsageAndErrors(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"no args", nil, nil, exitError, ""},
		{"help", nil, []string{"--help"}, exitOK, ""},
		{"unknown command", nil, []string{"frobnicate"}, exitError, `unknown command "frobnicate"`},
		{"exec without command", nil, []string{"exec"}, exitError, "no command given"},
		{"exec bad env flag", nil, []string{"exec", "--env", "NOEQUALS", "--", "true"}, exitError, "want KEY=VALUE"},
		{"exec bad upload", nil, []string{"exec", "--upload", "relative", "--", "true"}, exitError, "HOST_PATH:/CONTAINER_PATH"},
		{"exec bad download", nil, []string{"exec", "--download", "rel:x", "--", "true"}, exitError, "/CONTAINER_PATH:HOST_PATH"},
		{"exec unknown flag", nil, []string{"exec", "--nope", "--", "true"}, exitError, "flag provided but not defined"},
		{"bad config env", map[string]string{"SANDBOX_AGENT_TIMEOUT_EXEC": "soon"}, []string{"gc"}, exitError, `config key "timeout_exec"`},
		{"exec bad egress", nil, []string{"exec", "--egress", "wide", "--", "true"}, exitError, `egress "wide" (want none, model or open)`},
		{"exec bad allow host", nil, []string{"exec", "--allow-host", "*", "--", "true"}, exitError, `allow host "*"`},
		{"exec allow host with a scheme", nil, []string{"exec", "--allow-host", "https://x.org", "--", "true"}, exitError, `--allow-host`},
		{"ask bad egress", nil, []string{"ask", "--driver", "pi", "--egress", "wide", "hi"}, exitError, `egress "wide"`},
		{"smoke bad egress", nil, []string{"smoke", "--egress", "wide", "pi"}, exitError, `egress "wide"`},
		{"smoke bad allow host", nil, []string{"smoke", "--allow-host", "10.0.0.1", "pi"}, exitError, `allow host "10.0.0.1"`},
		{"bad egress env", map[string]string{"SANDBOX_AGENT_EGRESS": "all"}, []string{"gc"}, exitError, `config key "egress" from environment variable SANDBOX_AGENT_EGRESS`},
		{"bad allow hosts env", map[string]string{"SANDBOX_AGENT_ALLOW_HOSTS": "ok.org,*.com"}, []string{"gc"}, exitError, `config key "allow_hosts"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tt.env, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.wantCode, stderr)
			}
			if !strings.Contains(stderr, tt.wantErr) {
				t.Errorf("stderr %q does not contain %q", stderr, tt.wantErr)
			}
		})
	}
}

func TestParseCopySpecs(t *testing.T) {
	up := []struct {
		in, host, ctr string
		ok            bool
	}{
		{"./a:/tmp/a", "./a", "/tmp/a", true},
		{"C:/x:/tmp/x", "C:/x", "/tmp/x", true},
		{"with:colon/f:/tmp/f", "with:colon/f", "/tmp/f", true},
		{"noctr", "", "", false},
		{":/tmp/x", "", "", false},
	}
	for _, tt := range up {
		c, err := parseUpload(tt.in)
		if (err == nil) != tt.ok || (tt.ok && (c.host != tt.host || c.ctr != tt.ctr)) {
			t.Errorf("parseUpload(%q) = %+v, %v", tt.in, c, err)
		}
	}
	down := []struct {
		in, ctr, host string
		ok            bool
	}{
		{"/tmp/out.txt:./out.txt", "/tmp/out.txt", "./out.txt", true},
		{"/tmp/d:/abs/host:with:colons", "/tmp/d", "/abs/host:with:colons", true},
		{"tmp/x:y", "", "", false},
		{"/tmp/x:", "", "", false},
		{"/tmp/x", "", "", false},
	}
	for _, tt := range down {
		c, err := parseDownload(tt.in)
		if (err == nil) != tt.ok || (tt.ok && (c.host != tt.host || c.ctr != tt.ctr)) {
			t.Errorf("parseDownload(%q) = %+v, %v", tt.in, c, err)
		}
	}
}

func TestParseInterspersed(t *testing.T) {
	tests := []struct {
		args []string
		pos  string
		fake bool
	}{
		{[]string{"claude", "codex", "--fake-model"}, "claude,codex", true},
		{[]string{"--fake-model", "all"}, "all", true},
		{[]string{"a", "--", "--fake-model"}, "a,--fake-model", false},
		{nil, "", false},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fake := fs.Bool("fake-model", false, "")
		pos, err := parseInterspersed(fs, tt.args)
		if err != nil || strings.Join(pos, ",") != tt.pos || *fake != tt.fake {
			t.Errorf("%v: pos %v fake %v err %v", tt.args, pos, *fake, err)
		}
	}
}

func TestImagesNames(t *testing.T) {
	code, out, stderr := runCLI(t, nil, "images", "names")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := append([]string{"base"}, catalog.Versions().CLINames()...)
	if got := strings.Fields(out); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("images names = %v, want %v", got, want)
	}
	if code, _, stderr := runCLI(t, nil, "images", "names", "extra"); code != exitError || !strings.Contains(stderr, "takes no arguments") {
		t.Errorf("images names extra: exit %d, stderr %q", code, stderr)
	}
}
