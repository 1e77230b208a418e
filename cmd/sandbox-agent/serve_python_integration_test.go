//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/sandbox-agent/sandbox-agent/images/catalog"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// The Python client (examples/python) against the real server: serve runs
// in-process on a free port of the loopback, and the client's unittest
// suite drives an agent of SANDBOX_AGENT_TEST_DRIVER (default codex) on the
// fake model through it: stream, ask, exec, files, sessions, typed errors,
// close. Then serve shuts down gracefully on its context.
func TestPythonClient(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		prereq.Missing(t, "python3 is not installed: %v", err)
	}
	driver := os.Getenv("SANDBOX_AGENT_TEST_DRIVER")
	if driver == "" {
		driver = "codex"
	}
	rt := testenv.Runtime(t)
	img, err := catalog.Resolve(driver, "", os.Getenv("SANDBOX_AGENT_IMAGE_NAME"), "")
	if err != nil {
		t.Fatal(err)
	}
	ictx, icancel := context.WithTimeout(context.Background(), time.Minute)
	_, err = rt.Client().ImageInspect(ictx, img)
	icancel()
	if cerrdefs.IsNotFound(err) {
		prereq.Missing(t, "%s image %s is not in the engine's store (.ci/setup builds it)", driver, img)
	} else if err != nil {
		t.Fatalf("inspect %s: %v", img, err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	suite := filepath.Join("examples", "python", "test_sandbox_agent.py")
	if _, err := os.Stat(filepath.Join(root, suite)); err != nil {
		t.Fatal(err)
	}

	srv := startServeWith(t, map[string]string{"SANDBOX_AGENT_IMAGE_POLICY": "never"})
	ctx := context.Background()
	pctx, pcancel := context.WithTimeout(ctx, 20*time.Minute)
	defer pcancel()
	cmd := exec.CommandContext(pctx, python, "-m", "unittest", "-v", suite)
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"SANDBOX_AGENT_URL="+srv.base,
		"SANDBOX_AGENT_TOKEN="+srv.token,
		"SANDBOX_AGENT_TEST_DRIVER="+driver,
		"PYTHONDONTWRITEBYTECODE=1",
		"PYTHONUNBUFFERED=1",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s\nserve's stderr:\n%s", strings.Join(cmd.Args, " "), err, out, srv.stderr.String())
	}
	t.Logf("%s:\n%s", strings.Join(cmd.Args, " "), out)
	if bytes.Contains(out, []byte("skipped")) && bytes.Contains(out, []byte("SANDBOX_AGENT_URL")) {
		t.Fatalf("the server tests were skipped:\n%s", out)
	}

	// The suite closed every agent it made.
	resp, out := srv.do(t, http.MethodGet, "/v1/health", nil)
	var health struct {
		OK     bool `json:"ok"`
		Agents int  `json:"agents"`
	}
	if err := json.Unmarshal(out, &health); err != nil || resp.StatusCode != http.StatusOK || !health.OK || health.Agents != 0 {
		t.Errorf("health after the suite: %s %s (%v); want ok and no agents", resp.Status, out, err)
	}
	if code := srv.stop(t); code != exitOK {
		t.Errorf("serve returned %d after its context ended, want %d", code, exitOK)
	}
}
