//go:build integration

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/internal/gittest"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// TestIntegrationCLIRepo: ask --repo through the command users run, in
// the three modes: the result line names the branch (or the output), the
// host's HEAD and work tree stay as they were.
func TestIntegrationCLIRepo(t *testing.T) {
	testenv.Runtime(t)
	checkCLIRepo(t, cliEnv())
}

// checkCLIRepo is TestIntegrationCLIRepo with env (the engine's).
func checkCLIRepo(t *testing.T, env map[string]string) {
	dir := t.TempDir()
	host := filepath.Join(dir, "host")
	gittest.Init(t, host, map[string]string{"a.txt": "a\n"})
	if err := os.WriteFile(filepath.Join(host, "a.txt"), []byte("the user's edit\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	head, status := gittest.Run(t, host, "rev-parse", "HEAD"), gittest.Run(t, host, "status", "--porcelain")
	script := filepath.Join(dir, "script.json")
	s, _ := json.Marshal(map[string]any{"responses": []map[string]string{
		{"tool": "shell", "command": "echo agent > b.txt && git add b.txt && git commit -qm 'agent: b' && echo left > c.txt"},
		{"text": "DONE"},
	}})
	if err := os.WriteFile(script, s, 0o644); err != nil {
		t.Fatal(err)
	}
	ask := func(extra ...string) resultLine {
		t.Helper()
		args := append([]string{"ask", "--driver", agentDriver, "--fake-model", script, "--json", "--timeout", "4m",
			"--audit-root", filepath.Join(dir, "audit"), "--repo", host, "--author", "Bot <bot@example.com>"}, extra...)
		code, stdout, stderr := runCLI(t, env, append(args, "commit b, leave c")...)
		agentUnavailable(t, code, stderr)
		if code != exitOK {
			t.Fatalf("ask %v: exit %d\nstdout:\n%s\nstderr:\n%s", extra, code, stdout, stderr)
		}
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		var r resultLine
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil || r.Kind != "result" || r.Changes == nil {
			t.Fatalf("last line %q: not a result line with changes (%v)", lines[len(lines)-1], err)
		}
		if gittest.Run(t, host, "rev-parse", "HEAD") != head || gittest.Run(t, host, "status", "--porcelain") != status {
			t.Fatalf("ask %v changed the host's HEAD or work tree", extra)
		}
		return r
	}

	r := ask("--branch", "feature/agent")
	if r.Branch != "feature/agent" || len(r.Changes.Commits) != 2 || !r.Changes.Uncommitted {
		t.Fatalf("branch mode: %+v %+v", r, r.Changes)
	}
	if got := gittest.Run(t, host, "log", "--format=%s|%an", "main..feature/agent"); got != "sandbox-agent: uncommitted work|Bot\nagent: b|Bot" {
		t.Fatalf("the branch's new commits:\n%s", got)
	}
	gittest.Run(t, host, "fsck", "--strict", "--no-dangling")

	patches := filepath.Join(dir, "patches")
	r = ask("--changes", "patch", "--changes-out", patches)
	if r.Branch != "" || r.Changes.Output != patches {
		t.Fatalf("patch mode: %+v %+v", r, r.Changes)
	}
	ents, err := os.ReadDir(patches)
	if err != nil || len(ents) != 2 || !strings.HasPrefix(ents[0].Name(), "0001-") {
		t.Fatalf("patch folder: %v %v", ents, err)
	}
	// The series applies to the base.
	clone := filepath.Join(dir, "clone")
	gittest.Run(t, dir, "clone", "-q", host, clone)
	gittest.Run(t, clone, "am", "-q", filepath.Join(patches, ents[0].Name()), filepath.Join(patches, ents[1].Name()))
	if b, err := os.ReadFile(filepath.Join(clone, "c.txt")); err != nil || string(b) != "left\n" {
		t.Fatalf("c.txt after git am: %q %v", b, err)
	}

	bundle := filepath.Join(dir, "changes.bundle")
	r = ask("--changes", "bundle", "--changes-out", bundle)
	if r.Changes.Output != bundle {
		t.Fatalf("bundle mode: %+v", r.Changes)
	}
	gittest.Run(t, host, "bundle", "verify", "-q", bundle)
	if refs := gittest.Run(t, host, "for-each-ref", "--format=%(refname)"); refs != "refs/heads/feature/agent\nrefs/heads/main" {
		t.Fatalf("the host's refs after the patch and bundle modes:\n%s", refs)
	}
}
