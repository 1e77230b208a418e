// Package testenv gives integration tests a real engine and test image,
// failing (not skipping) when CI=true and either is missing (prereq.Missing).
package testenv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/runtime/docker"
)

// DefaultImage is the integration-test image unless
// SANDBOX_AGENT_TEST_IMAGE names another. Busybox images are a poor
// choice: their timeout does not return 124.
const DefaultImage = "debian:stable-slim"

// Image returns the integration-test image.
func Image() string {
	if v := os.Getenv("SANDBOX_AGENT_TEST_IMAGE"); v != "" {
		return v
	}
	return DefaultImage
}

// Runtime connects to the engine named by DOCKER_HOST (or the default
// socket) and checks it answers. DOCKER_HOST is the one switch between
// engines because everything honours it: this helper, the library's
// default runtime, the CLI and the child processes some tests start. For
// Podman: DOCKER_HOST=unix:///run/podman/podman.sock (see .ci/podman.sh).
//
// SANDBOX_AGENT_TEST_ENGINE ("docker" or "podman"), when set, must match
// the engine that answers, so a CI run meant for Podman cannot silently
// test Docker.
func Runtime(t testing.TB) *docker.Runtime {
	t.Helper()
	rt, err := docker.New(context.Background(), docker.Options{})
	if err != nil {
		prereq.Missing(t, "no container engine: %v", err)
	}
	t.Cleanup(func() { rt.Close() })
	info, err := engineInfo(rt)
	if err != nil {
		prereq.Missing(t, "no container engine: %v", err)
	}
	if want := os.Getenv("SANDBOX_AGENT_TEST_ENGINE"); want != "" && want != info.Name {
		t.Fatalf("SANDBOX_AGENT_TEST_ENGINE=%s but the engine at DOCKER_HOST=%q is %s %s", want, os.Getenv("DOCKER_HOST"), info.Name, info.Version)
	}
	return rt
}

// Engine describes the engine the tests run against.
func Engine(t testing.TB) sandboxagent.EngineInfo {
	t.Helper()
	rt := Runtime(t)
	info, err := engineInfo(rt)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

var (
	engineMu     sync.Mutex
	engineCached *sandboxagent.EngineInfo
)

// engineInfo asks the engine once per test process: Podman's /info takes
// seconds, and every test connects. A failure is not cached.
func engineInfo(rt *docker.Runtime) (sandboxagent.EngineInfo, error) {
	engineMu.Lock()
	defer engineMu.Unlock()
	if engineCached != nil {
		return *engineCached, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := rt.Info(ctx)
	if err != nil {
		return info, err
	}
	engineCached = &info
	return info, nil
}

// Config is a configuration for tests: defaults with short timeouts,
// SANDBOX_AGENT_IMAGE_NAME as the image name when set (.ci/run on Podman
// pulls the agent image from a loopback registry under that name), and a
// CLI per turn with SANDBOX_AGENT_PER_TURN=true (the per-turn mode of the
// long-lived drivers).
func Config() sandboxagent.Config {
	cfg := sandboxagent.DefaultConfig()
	cfg.ImageName = os.Getenv("SANDBOX_AGENT_IMAGE_NAME")
	cfg.PerTurn = os.Getenv("SANDBOX_AGENT_PER_TURN") == "true"
	cfg.Timeouts.Start = time.Minute
	cfg.Timeouts.Exec = time.Minute
	cfg.Timeouts.Copy = time.Minute
	cfg.Keepalive = 10 * time.Minute
	return cfg
}

// Sandbox starts a sandbox on the test image and closes it at cleanup.
func Sandbox(t testing.TB, rt sandboxagent.Runtime, opts sandboxagent.SandboxOptions) *sandboxagent.Sandbox {
	t.Helper()
	if opts.Image == "" {
		opts.Image = Image()
	}
	if opts.Config.Timeouts.Start == 0 && opts.Config.AuditRoot == "" {
		opts.Config = Config()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := sandboxagent.NewSandbox(ctx, rt, opts)
	if errors.Is(err, sandboxagent.ErrImageNotFound) {
		prereq.Missing(t, "image %s is missing (build it with .ci/build_base.sh): %v", opts.Image, err)
	}
	if err != nil {
		t.Fatalf("NewSandbox: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return sb
}

// GVisor is the name of the engine's OCI runtime running gVisor's runsc
// (.ci/gvisor.sh registers it as "runsc"). Docker only: the test is
// skipped on another engine, and fails under CI=true when Docker has none.
func GVisor(t testing.TB) string {
	t.Helper()
	if info := Engine(t); info.Name != "docker" {
		t.Skipf("gVisor is registered with Docker here (.ci/gvisor.sh), not %s", info.Name)
	}
	have, err := Runtime(t).OCIRuntimes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for name, bin := range have {
		if filepath.Base(bin) == "runsc" {
			return name
		}
	}
	prereq.Missing(t, "no gVisor runtime registered with Docker (bash .ci/gvisor.sh): have %v", have)
	return ""
}
