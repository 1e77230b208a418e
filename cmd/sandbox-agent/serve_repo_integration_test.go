//go:build integration

package main

// Repositories over serve's API end to end: an agent created with a
// repo.path under serve_repo_root commits in its sandbox and leaves work
// uncommitted; GET .../changes brings both home as a branch of the host
// repository, whose HEAD does not move. Then the same with a repository
// uploaded as a bundle, whose changes come back as a bundle.

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/internal/gittest"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// repoChangesOf reads GET .../changes' JSON.
type repoChangesOf struct {
	Branch, Tip, Base string
	Commits           []string
	Uncommitted       bool
	Unchanged         bool
}

func TestIntegrationServeRepo(t *testing.T) {
	testenv.Engine(t)
	base := t.TempDir()
	root := filepath.Join(base, "repos")
	host := filepath.Join(root, "proj")
	head := gittest.Init(t, host, map[string]string{"README": "hello\n"})

	r := startServeWith(t, map[string]string{"SANDBOX_AGENT_SERVE_REPO_ROOT": root})
	// Each agent's own fake model: one commit, then a file left
	// uncommitted.
	script := map[string]any{"responses": []map[string]any{
		{"tool": "shell", "command": "echo x > f && git add f && git commit -qm agent && echo y > g"},
		{"text": "REPO-DONE"},
	}}
	turn := func(id string) {
		t.Helper()
		resp, out := r.do(t, http.MethodPost, "/v1/agents/"+id+"/turns", map[string]any{"prompt": "commit something"})
		var res turnOf
		if resp.StatusCode != http.StatusOK || json.Unmarshal(out, &res) != nil || !strings.Contains(res.Reply, "REPO-DONE") {
			t.Fatalf("turn: %d %.600s\nserve stderr:\n%s", resp.StatusCode, out, r.stderr.String())
		}
	}
	changes := func(id string) repoChangesOf {
		t.Helper()
		resp, out := r.do(t, http.MethodGet, "/v1/agents/"+id+"/changes", nil)
		var ch repoChangesOf
		if resp.StatusCode != http.StatusOK || json.Unmarshal(out, &ch) != nil {
			t.Fatalf("GET changes: %d %s\nserve stderr:\n%s", resp.StatusCode, out, r.stderr.String())
		}
		return ch
	}

	// Refusals: a path outside the root, an agent without a repository.
	resp, out := r.do(t, http.MethodPost, "/v1/agents", map[string]any{"driver": "pi", "repo": map[string]any{"path": base}})
	wantError(t, "a path outside serve_repo_root", resp, out, http.StatusBadRequest, "invalid_argument")
	plain := r.create(t, map[string]any{"driver": "pi", "fake_model_script": script})
	resp, out = r.do(t, http.MethodGet, "/v1/agents/"+plain+"/changes", nil)
	wantError(t, "changes of an agent without a repository", resp, out, http.StatusConflict, "conflict")

	t.Run("path", func(t *testing.T) {
		id := r.create(t, map[string]any{"driver": "pi", "fake_model_script": script, "repo": map[string]any{"path": "proj"}})
		turn(id)
		ch := changes(id)
		if !strings.HasPrefix(ch.Branch, "sandbox-agent/") || len(ch.Commits) != 2 || !ch.Uncommitted || ch.Base != head {
			t.Fatalf("changes %+v", ch)
		}
		if tip := gittest.Run(t, host, "rev-parse", "refs/heads/"+ch.Branch); tip != ch.Tip {
			t.Errorf("branch %s is at %s, want %s", ch.Branch, tip, ch.Tip)
		}
		if n := gittest.Run(t, host, "rev-list", "--count", head+".."+ch.Branch); n != "2" {
			t.Errorf("%s commits on the branch past HEAD, want 2", n)
		}
		if files := gittest.Run(t, host, "ls-tree", "--name-only", ch.Branch); files != "README\nf\ng" {
			t.Errorf("the branch's files: %q", files)
		}
		if got := gittest.Run(t, host, "rev-parse", "HEAD"); got != head {
			t.Errorf("host HEAD moved: %s, was %s", got, head)
		}
		if st := gittest.Run(t, host, "status", "--porcelain"); st != "" {
			t.Errorf("host work tree changed: %q", st)
		}
		if ch := changes(id); !ch.Unchanged {
			t.Errorf("a second sync: %+v, want unchanged", ch)
		}
	})

	t.Run("bundle", func(t *testing.T) {
		bundle := filepath.Join(base, "proj.bundle")
		gittest.Run(t, host, "bundle", "create", "-q", bundle, "main")
		data, err := os.ReadFile(bundle)
		if err != nil {
			t.Fatal(err)
		}
		resp, out := r.do(t, http.MethodPost, "/v1/agents", map[string]any{"driver": "pi", "fake_model_script": script,
			"repo": map[string]any{"bundle": base64.StdEncoding.EncodeToString([]byte("# v2 git bundle\nbogus\n"))}})
		wantError(t, "a bundle that is not one", resp, out, http.StatusUnprocessableEntity, "unsafe_archive")
		id := r.create(t, map[string]any{"driver": "pi", "fake_model_script": script,
			"repo": map[string]any{"bundle": base64.StdEncoding.EncodeToString(data), "branch": "agent-work"}})
		turn(id)
		resp, out = r.do(t, http.MethodGet, "/v1/agents/"+id+"/changes?format=bundle", nil)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-git-bundle" || resp.Header.Get("X-Sandbox-Agent-Branch") != "agent-work" {
			t.Fatalf("GET changes?format=bundle: %d %v %.300s\nserve stderr:\n%s", resp.StatusCode, resp.Header, out, r.stderr.String())
		}
		got := filepath.Join(base, "changes.bundle")
		if err := os.WriteFile(got, out, 0o644); err != nil {
			t.Fatal(err)
		}
		// The bundle applies to a clone of the repository sent.
		clone := filepath.Join(base, "clone")
		gittest.Run(t, base, "clone", "-q", host, clone)
		gittest.Run(t, clone, "bundle", "verify", "-q", got)
		gittest.Run(t, clone, "fetch", "-q", got, "agent-work:agent-work")
		if n := gittest.Run(t, clone, "rev-list", "--count", "main..agent-work"); n != "2" {
			t.Errorf("%s commits in the bundle past main, want 2", n)
		}
		if tip := gittest.Run(t, clone, "rev-parse", "agent-work"); tip != resp.Header.Get("X-Sandbox-Agent-Tip") {
			t.Errorf("the bundle's branch is at %s, the header says %s", tip, resp.Header.Get("X-Sandbox-Agent-Tip"))
		}
		// Deleting the agent removes its bare repository.
		if resp, out := r.do(t, http.MethodDelete, "/v1/agents/"+id, nil); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("DELETE: %d %s", resp.StatusCode, out)
		}
		matches, _ := filepath.Glob(filepath.Join(os.TempDir(), "sandbox-agent-repos-*", id+".git"))
		if len(matches) != 0 {
			t.Errorf("the agent's bare repository stays: %v", matches)
		}
	})
}
