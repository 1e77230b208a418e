//go:build integration

package main

// serve as the Python package runs it (its private engine): create
// requests with the admin's endpoint and audit fields, the rules and
// skills routes, and --stop-on-stdin-eof.

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// auditFiles lists the files under root.
func auditFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return files
}

func TestServeEndpointAuditRulesStdinEOF(t *testing.T) {
	testenv.Runtime(t)
	// The agent's own endpoint: a model on the host's loopback that takes
	// one key only.
	key := fakeKey()
	fm, err := fakemodel.New(fakemodel.Script{ExpectKey: key, Responses: []fakemodel.Step{{Text: "DONE-ENDPOINT"}}}, fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := fm.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer fm.Close()

	pr, pw := io.Pipe()
	saved := serveStdin
	serveStdin = pr
	defer func() { serveStdin = saved }()
	dir := t.TempDir()
	ready, tokenFile, serverAudit := dir+"/ready", dir+"/token", dir+"/audit"
	env := cliEnv()
	env["SANDBOX_AGENT_AUDIT_ROOT"] = serverAudit
	env["SANDBOX_AGENT_CONFIG"] = "/nonexistent/sandbox-agent-test-config.json"
	var stdout, stderr lockedBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- run(context.Background(), []string{"serve", "--state", ":memory:", "--listen", "127.0.0.1:0", "--ready-file", ready,
			"--token-file", tokenFile, "--stop-on-stdin-eof"}, &stdout, &stderr, func(k string) string { return env[k] })
	}()
	defer pw.Close()
	var addr string
	waitFor(t, time.Minute, "serve's ready file", func() bool {
		select {
		case code := <-exited:
			t.Fatalf("serve exited %d before it listened:\n%s", code, stderr.String())
		default:
		}
		b, err := os.ReadFile(ready)
		addr = strings.TrimSpace(string(b))
		return err == nil && strings.Contains(addr, ":")
	})
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	s := &serveProc{base: "http://" + addr, token: strings.TrimSpace(string(tok)), stderr: &stderr, client: &http.Client{Timeout: 4 * time.Minute}}

	// An agent on the endpoint, with no audit trail.
	id := s.create(t, map[string]any{"driver": apiDriver, "audit": false,
		"endpoint": map[string]string{"base_url": fm.URL() + "/v1", "api_key": key}})
	resp, out := s.do(t, http.MethodPost, "/v1/agents/"+id+"/turns", map[string]string{"prompt": "hello"})
	var res struct{ Reply string }
	if resp.StatusCode != 200 || json.Unmarshal(out, &res) != nil || !strings.Contains(res.Reply, "DONE-ENDPOINT") {
		t.Fatalf("a turn on the request's endpoint: %d %s\n%s", resp.StatusCode, out, stderr.String())
	}
	if files := auditFiles(t, serverAudit); len(files) > 0 {
		t.Errorf("audit false wrote %v", files)
	}
	_, out = s.do(t, http.MethodGet, "/v1/agents/"+id, nil)
	if strings.Contains(string(out), key) || strings.Contains(stderr.String(), key) {
		t.Errorf("the endpoint's key was shown: %s\n%s", out, stderr.String())
	}

	// Rules and skills.
	if resp, out := s.do(t, http.MethodPut, "/v1/agents/"+id+"/rules", map[string]string{"rules": "RULES-MARK-1"}); resp.StatusCode != http.StatusNoContent {
		t.Errorf("PUT rules: %d %s", resp.StatusCode, out)
	}
	if resp, out := s.do(t, http.MethodPost, "/v1/agents/"+id+"/skills", map[string]any{"name": "demo",
		"files": map[string]string{"SKILL.md": "---\nname: demo\ndescription: a test\n---\nSKILL-MARK-1\n", "ref/notes.txt": "NOTES"}}); resp.StatusCode != http.StatusNoContent {
		t.Errorf("POST skills: %d %s", resp.StatusCode, out)
	}
	if r := s.exec(t, id, []string{"sh", "-c", `grep -rl -e RULES-MARK-1 -e SKILL-MARK-1 "$HOME" 2>/dev/null | wc -l`}); strings.TrimSpace(r.Stdout) != "2" {
		t.Errorf("the rules and the skill in the sandbox: %+v", r)
	}
	resp, out = s.do(t, http.MethodPost, "/v1/agents/"+id+"/skills", map[string]any{"name": "bad", "files": map[string]string{"README": "x"}})
	wantError(t, "a skill without SKILL.md", resp, out, http.StatusBadRequest, "invalid_argument")
	resp, out = s.do(t, http.MethodPut, "/v1/agents/"+id+"/rules", map[string]any{})
	wantError(t, "rules missing", resp, out, http.StatusBadRequest, "invalid_argument")

	// An agent with its own audit root.
	own := dir + "/own-audit"
	id2 := s.create(t, map[string]any{"driver": apiDriver, "audit_root": own,
		"fake_model_script": map[string]any{"responses": []map[string]string{{"text": "DONE-AUDIT"}}}})
	if resp, out := s.do(t, http.MethodPost, "/v1/agents/"+id2+"/turns", map[string]string{"prompt": "hello"}); resp.StatusCode != 200 {
		t.Fatalf("a turn with audit_root: %d %s", resp.StatusCode, out)
	}
	if files := auditFiles(t, own); len(files) == 0 {
		t.Error("audit_root: nothing written there")
	}
	if files := auditFiles(t, serverAudit); len(files) > 0 {
		t.Errorf("the server's audit root got %v", files)
	}

	// The parent goes: serve stops as on SIGTERM, removing the sandboxes.
	pw.Close()
	start := time.Now()
	select {
	case code := <-exited:
		if code != exitOK {
			t.Errorf("serve exited %d:\n%s", code, stderr.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("serve still runs 2 minutes after standard input ended:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "standard input ended") {
		t.Errorf("serve's log does not say why it stopped:\n%s", stderr.String())
	}
	t.Logf("stopped %v after standard input ended", time.Since(start).Round(time.Millisecond))
}
