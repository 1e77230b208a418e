//go:build integration

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// noControls fails t when s holds ESC, BEL, CSI (8-bit or U+009B) or a
// raw bidi override: what a terminal would act on or show disguised.
func noControls(t *testing.T, what, s string) {
	t.Helper()
	if i := strings.IndexAny(s, "\x1b\x07\x9b\u009b\u202e\r"); i >= 0 {
		t.Errorf("%s holds a raw control at %d: %q", what, i, s)
	}
}

// Names of files made in a sandbox reach the terminal escaped; exec's
// stdout into a pipe stays byte-exact.
func TestIntegrationCLITerminalSafetyExec(t *testing.T) {
	testenv.Runtime(t)
	dest := filepath.Join(t.TempDir(), "dest")
	os.Mkdir(dest, 0o755)
	// Two symlinks (skipped, so reported by name) and a regular file
	// (written under its exact name), all named with escapes.
	cmd := `mkdir /tmp/out && cd /tmp/out && ln -s / "$(printf '\033]0;pwned\007')" && ln -s /etc/passwd "$(printf '\033[2J')" && ` +
		`echo x > "$(printf 'f\033[2J')" && printf '\033[2J\033]0;pwned\007\n'`
	code, stdout, stderr := runCLI(t, cliEnv(), "exec", "--image", testenv.Image(), "--download", "/tmp/out:"+dest, "--", "sh", "-c", cmd)
	if code != 0 {
		t.Fatalf("exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	if stdout != "\x1b[2J\x1b]0;pwned\x07\n" {
		t.Errorf("stdout into a pipe is not byte-exact: %q", stdout)
	}
	noControls(t, "stderr", stderr)
	for _, want := range []string{`skipped out/\x1b]0;pwned\x07: `, `skipped out/\x1b[2J: `} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q lacks %q", stderr, want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dest, "out", "f\x1b[2J")); err != nil || string(b) != "x\n" {
		t.Errorf("the regular file: %q %v", b, err)
	}
}

// An agent's reply with terminal controls and a bidi override: escaped on
// stdout, exact (JSON-escaped) with --json; a name it made, escaped in
// the download report.
func TestIntegrationCLITerminalSafetyAsk(t *testing.T) {
	testenv.Engine(t)
	dir := t.TempDir()
	const reply = "\x1b[2J\x1b]0;x\x07 DONE \u202eexe.txt"
	script := filepath.Join(dir, "script.json")
	s, _ := json.Marshal(map[string]any{"responses": []map[string]string{
		{"tool": "shell", "command": `mkdir -p /tmp/o && ln -s / "/tmp/o/$(printf '\033]0;pwned\007')"`},
		{"text": reply},
	}})
	if err := os.WriteFile(script, s, 0o644); err != nil {
		t.Fatal(err)
	}
	ask := func(extra ...string) (string, string) {
		t.Helper()
		dest := filepath.Join(t.TempDir(), "result")
		args := append([]string{"ask", "--driver", agentDriver, "--fake-model", script, "--timeout", "4m", "--no-audit",
			"--download", "/tmp/o:" + dest}, extra...)
		code, stdout, stderr := runCLI(t, cliEnv(), append(args, "Make the link, then answer.")...)
		agentUnavailable(t, code, stderr)
		if code != exitOK {
			t.Fatalf("exit %d\nstdout:\n%q\nstderr:\n%q", code, stdout, stderr)
		}
		noControls(t, "stderr", stderr)
		if !strings.Contains(stderr, `skipped o/\x1b]0;pwned\x07: `) {
			t.Errorf("stderr %q does not report the link by its escaped name", stderr)
		}
		return stdout, stderr
	}

	stdout, _ := ask()
	if want := `\x1b[2J\x1b]0;x\x07 DONE \u202eexe.txt` + "\n"; stdout != want {
		t.Errorf("plain stdout %q, want %q", stdout, want)
	}

	stdout, _ = ask("--json")
	noControls(t, "--json stdout", stdout)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	last := lines[len(lines)-1]
	var rl resultLine
	if err := json.Unmarshal([]byte(last), &rl); err != nil || rl.Kind != "result" {
		t.Fatalf("last line %q: %v", last, err)
	}
	if rl.Reply != reply {
		t.Errorf("--json reply %q, want exactly %q", rl.Reply, reply)
	}
	if !strings.Contains(last, `\u001b[2J\u001b]0;x\u0007 DONE \u202eexe.txt`) {
		t.Errorf("result line %q: the reply is not JSON-escaped as expected", last)
	}
}
