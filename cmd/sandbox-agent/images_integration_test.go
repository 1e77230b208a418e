//go:build integration

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandbox-agent/sandbox-agent/images/catalog"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// runID names the repositories of one test run: registries are shared
// (CI's), and the engine must lack the test's images at first.
func runID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// image_policy end to end with a real registry: ask pulls the agent image
// from it (progress on stderr) and completes; with the registry empty it
// builds the image from the Dockerfiles in the binary (Docker: its layer
// cache makes that quick) and completes; with image_policy=never it fails
// with the typed error and its hint. Each case uses a repository of its
// own, so the engine has none of its images at first.
func TestIntegrationCLIImagePolicy(t *testing.T) {
	rt := testenv.Runtime(t)
	info := testenv.Engine(t)
	reg := testenv.Registry(t)
	run := runID()
	cli := rt.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	removeRepo := func(repo string) {
		for _, n := range []string{catalog.BaseName, agentDriver} {
			img, _ := catalog.Versions().Image(n, repo)
			cli.ImageRemove(context.Background(), img.Tag, client.ImageRemoveOptions{Force: true})
		}
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "script.json")
	if err := os.WriteFile(script, []byte(`{"responses":[{"text":"IMAGE-OK"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ask := func(repo string, env map[string]string) (int, string, string) {
		e := cliEnv()
		e["SANDBOX_AGENT_IMAGE_NAME"] = repo
		e["SSL_CERT_FILE"] = os.Getenv("SSL_CERT_FILE") // the build trusts it, as .ci/setup's did (same layers)
		for k, v := range env {
			e[k] = v
		}
		return runCLI(t, e, "ask", "--driver", agentDriver, "--fake-model", script, "--no-audit", "hi")
	}

	t.Run("pulled from the registry", func(t *testing.T) {
		repo := reg + "/pull-" + run
		t.Cleanup(func() { removeRepo(repo) })
		src, err := catalog.Resolve(agentDriver, "", os.Getenv("SANDBOX_AGENT_IMAGE_NAME"), "")
		if err != nil {
			t.Fatal(err)
		}
		dst, _ := catalog.Versions().Image(agentDriver, repo)
		if _, err := cli.ImageTag(ctx, client.ImageTagOptions{Source: src, Target: dst.Tag}); err != nil {
			prereq.Missing(t, "agent image %s: %v", src, err)
		}
		eng, err := dockerEngine(ctx, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer eng.close()
		if err := eng.images.Push(ctx, dst.Tag, nil); err != nil {
			t.Fatalf("push %s: %v", dst.Tag, err)
		}
		if _, err := cli.ImageRemove(ctx, dst.Tag, client.ImageRemoveOptions{}); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := ask(repo, nil)
		if code != exitOK || strings.TrimSpace(stdout) != "IMAGE-OK" {
			t.Fatalf("exit %d stdout %q stderr:\n%s", code, stdout, stderr)
		}
		if !strings.Contains(stderr, dst.Tag+" is not in the engine: pulling it") || !strings.Contains(stderr, "pulled "+dst.Tag) {
			t.Errorf("no pull progress on stderr:\n%s", stderr)
		}
	})
	t.Run("built when the registry has nothing", func(t *testing.T) {
		if info.Name != "docker" {
			t.Logf("build fallback checked on Docker only: %s has no layer cache of the agent images (a cold npm install)", info.Name)
			return
		}
		repo := reg + "/build-" + run
		t.Cleanup(func() { removeRepo(repo) })
		code, stdout, stderr := ask(repo, nil)
		img, _ := catalog.Versions().Image(agentDriver, repo)
		if code != exitOK || strings.TrimSpace(stdout) != "IMAGE-OK" {
			t.Fatalf("exit %d stdout %q stderr:\n%s", code, stdout, stderr)
		}
		if !strings.Contains(stderr, "its registry does not have it: building "+img.Tag) || !strings.Contains(stderr, "==> built "+img.Tag) {
			t.Errorf("no build progress on stderr:\n%s", stderr)
		}
	})
	t.Run("never: the typed error and its hint", func(t *testing.T) {
		repo := reg + "/never-" + run
		code, _, stderr := ask(repo, map[string]string{"SANDBOX_AGENT_IMAGE_POLICY": "never"})
		if code != exitError || !strings.Contains(stderr, "image_policy never") ||
			!strings.Contains(stderr, "build it with `sandbox-agent images build "+agentDriver+"`") {
			t.Errorf("exit %d stderr:\n%s", code, stderr)
		}
		code, _, stderr = ask(repo, map[string]string{"SANDBOX_AGENT_IMAGE_POLICY": "pull"})
		if code != exitError || !strings.Contains(stderr, "its registry does not have it (or refused it without a login); push it there") {
			t.Errorf("pull only: exit %d stderr:\n%s", code, stderr)
		}
	})
}
