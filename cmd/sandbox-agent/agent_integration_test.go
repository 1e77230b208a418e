//go:build integration

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/internal/smoke"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// agentDriver is the agent CLI this suite runs end to end against the
// built-in fake model. pi has the smallest image; it is the agent run of
// the engine suite on Podman, so .ci/run gives Podman its image (pulled
// from a loopback registry, under SANDBOX_AGENT_IMAGE_NAME: .ci/podman.sh
// "$(sandbox-agent images which pi)"). On Docker the conformance suite
// runs every driver too.
const agentDriver = "pi"

// agentUnavailable skips (fails in CI) when the agent image is not in the
// engine's store.
func agentUnavailable(t *testing.T, code int, stderr string) {
	t.Helper()
	if code == exitError && strings.Contains(stderr, "image not found") {
		img, _ := catalog.Resolve(agentDriver, "", os.Getenv("SANDBOX_AGENT_IMAGE_NAME"), "")
		prereq.Missing(t, "%s image %s is not in the engine's store (Docker: .ci/setup; Podman: .ci/podman.sh %s): %s", agentDriver, img, img, stderr)
	}
}

// One agent turn through the command users run: the CLI in its image
// (no network) reaches the fake model on the host's loopback through the
// model proxy, runs a
// shell tool, answers, and what it wrote comes back with --download.
func TestIntegrationCLIAgentAsk(t *testing.T) {
	info := testenv.Engine(t)
	checkAgentAsk(t, info.Name, cliEnv())
}

// checkAgentAsk runs that turn with env (and extra flags) on the engine
// called engine.
func checkAgentAsk(t *testing.T, engine string, env map[string]string, extra ...string) {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "script.json")
	const command = "mkdir -p /tmp/agent && echo made-by-the-agent > /tmp/agent/out.txt"
	s, _ := json.Marshal(map[string]any{"responses": []map[string]string{
		{"tool": "shell", "command": command},
		{"text": "DONE"},
	}})
	if err := os.WriteFile(script, s, 0o644); err != nil {
		t.Fatal(err)
	}
	audit := filepath.Join(dir, "audit")
	dest := filepath.Join(dir, "result")
	args := append([]string{"ask", "--driver", agentDriver, "--fake-model", script,
		"--json", "--timeout", "4m", "--audit-root", audit, "--download", "/tmp/agent:" + dest}, extra...)
	code, stdout, stderr := runCLI(t, env, append(args, "Create /tmp/agent/out.txt, then answer DONE.")...)
	agentUnavailable(t, code, stderr)
	if code != exitOK {
		t.Fatalf("%s on %s: exit %d\nstdout:\n%s\nstderr:\n%s", agentDriver, engine, code, stdout, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var result resultLine
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &result); err != nil || result.Kind != "result" {
		t.Fatalf("last line %q is not a result line (%v)", lines[len(lines)-1], err)
	}
	if result.Reply != "DONE" || result.ExitCode != 0 || result.Error != "" || result.SessionID == "" {
		t.Errorf("result %+v", result)
	}
	var sawCall, sawDone bool
	for _, l := range lines[:len(lines)-1] {
		var e sandboxagent.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("not an event line: %q (%v)", l, err)
		}
		switch e.Kind {
		case sandboxagent.KindToolCall:
			sawCall = sawCall || strings.Contains(e.Payload.Command, "made-by-the-agent")
		case sandboxagent.KindDone:
			sawDone = e.Payload.Text == "DONE"
		}
	}
	if !sawCall || !sawDone {
		t.Errorf("tool_call seen %v, done DONE %v; events:\n%s", sawCall, sawDone, stdout)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "out.txt")); err != nil || string(b) != "made-by-the-agent\n" {
		t.Errorf("downloaded out.txt = %q, %v", b, err)
	}
	if result.AuditDir == "" || !strings.HasPrefix(result.AuditDir, audit+string(filepath.Separator)) {
		t.Errorf("audit dir %q not under %s", result.AuditDir, audit)
	} else if _, err := os.Stat(filepath.Join(result.AuditDir, "session.jsonl")); err != nil {
		t.Errorf("audit: %v", err)
	}
	t.Logf("%s turn on %s passed", agentDriver, engine)
}

// The smoke command for one driver: every step of the seed's behaviours
// (sessions, fork, skills, dump/load across containers, a bad key) on the
// engine under test.
func TestIntegrationCLIAgentSmoke(t *testing.T) {
	info := testenv.Engine(t)
	checkAgentSmoke(t, info.Name, cliEnv())
}

// The smoke for pi and claude with every sandbox under gVisor (runsc on
// Docker, .ci/gvisor.sh): the CLIs, the relay to the model proxy through
// the bind-mounted sockets, the files in and out (through exec), the
// sessions' dump and load.
func TestIntegrationCLIAgentSmokeGVisor(t *testing.T) {
	runsc := testenv.GVisor(t)
	checkSmoke(t, "docker+"+runsc, cliEnv(), []string{"pi", "claude"}, "--oci-runtime", runsc)
}

// checkAgentSmoke runs smoke for agentDriver with env (and extra flags)
// on the engine called engine.
func checkAgentSmoke(t *testing.T, engine string, env map[string]string, extra ...string) {
	t.Helper()
	checkSmoke(t, engine, env, []string{agentDriver}, extra...)
}

// checkSmoke runs smoke for the drivers with env (and extra flags) on the
// engine called engine.
func checkSmoke(t *testing.T, engine string, env map[string]string, drivers []string, extra ...string) {
	t.Helper()
	env["SANDBOX_AGENT_TIMEOUT_ASK"] = "4m"
	args := append(append([]string{"smoke"}, drivers...), "--fake-model", "--json")
	code, stdout, stderr := runCLI(t, env, append(args, extra...)...)
	var results []smoke.StepResult
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if line == "" {
			continue
		}
		var r smoke.StepResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not a JSON step line: %q (%v)", line, err)
		}
		results = append(results, r)
		if r.Status == smoke.Fail && strings.Contains(r.Detail, "image not found") {
			agentUnavailable(t, exitError, r.Detail)
		}
		t.Logf("%-9s %-15s %-4s %6.1fs %s", r.Driver, r.Step, r.Status, r.Seconds, r.Detail)
		if r.Status == smoke.Fail {
			t.Errorf("%s/%s on %s: %s", r.Driver, r.Step, engine, r.Detail)
		}
	}
	if len(results) != len(drivers)*len(smoke.Steps) {
		t.Errorf("%d step results, want %d (stderr %s)", len(results), len(drivers)*len(smoke.Steps), stderr)
	}
	if (code != exitOK) != t.Failed() {
		t.Errorf("exit %d does not match the step results (stderr %s)", code, stderr)
	}
}
