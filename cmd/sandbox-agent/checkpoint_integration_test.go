//go:build integration

package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// A checkpoint through the commands users run: ask keeps its sandbox
// (--checkpoint), checkpoint list shows it, ask --from-checkpoint starts
// a new sandbox on it whose CLI continues the first turn's session (the
// model's request carries the first prompt), and checkpoint rm removes
// it, once.
func TestIntegrationCLICheckpoint(t *testing.T) {
	info := testenv.Engine(t)
	// The model: a fake the test holds, reached through the gateway
	// setting, so its requests can be read.
	fm := startGatewayModel(t, []fakemodel.Step{{Text: "ONE"}, {Text: "TWO"}})
	env := cliEnv()
	env["GATEWAY_URL"] = fm.URL()
	env["GATEWAY_KEY"] = "sk-checkpoint-test-key"
	env["SANDBOX_AGENT_CHECKPOINT_ROOT"] = filepath.Join(t.TempDir(), "checkpoints")
	env["SANDBOX_AGENT_TIMEOUT_ASK"] = "4m"

	code, stdout, stderr := runCLI(t, env, "ask", "--driver", agentDriver, "--no-audit", "--checkpoint", "base", "remember the word PLUM")
	agentUnavailable(t, code, stderr)
	if code != exitOK {
		t.Fatalf("ask --checkpoint on %s: exit %d\nstdout:\n%s\nstderr:\n%s", info.Name, code, stdout, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	id, ok := strings.CutPrefix(lines[len(lines)-1], "checkpoint: ")
	if !ok || !strings.HasPrefix(id, "ck-") || lines[0] != "ONE" {
		t.Fatalf("ask --checkpoint printed %q, want the reply then a line checkpoint: ck-…", stdout)
	}
	t.Cleanup(func() { runCLI(t, env, "checkpoint", "rm", id) })

	code, stdout, stderr = runCLI(t, env, "checkpoint", "list", "--json")
	var list []checkpointJSON
	if code != exitOK || json.Unmarshal([]byte(stdout), &list) != nil {
		t.Fatalf("checkpoint list --json: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	var found *checkpointJSON
	for i := range list {
		if list[i].ID == id {
			found = &list[i]
		}
	}
	if found == nil {
		t.Fatalf("checkpoint list --json lacks %s: %s", id, stdout)
	}
	if found.Name != "base" || found.Driver != agentDriver || found.Session == "" || found.Kind == "" || (found.Kind == kindImage) == (found.Image == "") {
		t.Errorf("checkpoint %+v", *found)
	}
	t.Logf("checkpoint %s on %s: %s, %d bytes", id, info.Name, found.Kind, found.Size)

	// A new sandbox on the checkpoint, the driver taken from it: the CLI
	// continues the session, so the model sees the first turn.
	before := len(fm.Requests())
	code, stdout, stderr = runCLI(t, env, "ask", "--from-checkpoint", id, "--no-audit", "--json", "which word?")
	if code != exitOK {
		t.Fatalf("ask --from-checkpoint: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	lines = strings.Split(strings.TrimSpace(stdout), "\n")
	var result resultLine
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &result); err != nil || result.Kind != "result" || result.Reply != "TWO" || result.Checkpoint != "" {
		t.Fatalf("result line %q (%v)", lines[len(lines)-1], err)
	}
	carried := false
	for _, r := range fm.Requests()[before:] {
		if bytes.Contains(r.Body, []byte("remember the word PLUM")) && bytes.Contains(r.Body, []byte("which word?")) {
			carried = true
		}
	}
	if !carried {
		t.Errorf("the model requests from the checkpoint do not carry its turn: the session did not continue")
	}

	code, stdout, stderr = runCLI(t, env, "checkpoint", "rm", id)
	if code != exitOK || strings.TrimSpace(stdout) != id {
		t.Fatalf("checkpoint rm: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, env, "checkpoint", "rm", id)
	if code == exitOK || !strings.Contains(stderr, "checkpoint not found") || !strings.Contains(stderr, id) {
		t.Errorf("checkpoint rm again: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, env, "checkpoint", "list", "--json")
	if code != exitOK || strings.Contains(stdout, id) {
		t.Errorf("checkpoint list after rm: exit %d: %s", code, stdout)
	}
}
