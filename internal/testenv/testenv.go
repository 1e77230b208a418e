// Package testenv gives integration tests a real engine and test image,
// failing (not skipping) when CI=true and either is missing.
package testenv

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
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

// InCI reports whether missing prerequisites must fail rather than skip.
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable fails the test in CI and skips it elsewhere.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI=true and "+format, args...)
	}
	t.Skipf(format, args...)
}

// Runtime connects to the engine named by DOCKER_HOST (or the default
// socket) and checks it answers.
func Runtime(t testing.TB) *docker.Runtime {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rt, err := docker.New(ctx, docker.Options{})
	if err != nil {
		Unavailable(t, "no container engine: %v", err)
	}
	if _, err := rt.Info(ctx); err != nil {
		Unavailable(t, "no container engine: %v", err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// Config is a configuration for tests: defaults with short timeouts.
func Config() sandboxagent.Config {
	cfg := sandboxagent.DefaultConfig()
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
	if opts.Config == (sandboxagent.Config{}) {
		opts.Config = Config()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := sandboxagent.NewSandbox(ctx, rt, opts)
	if errors.Is(err, sandboxagent.ErrImageNotFound) {
		Unavailable(t, "image %s is missing (build it with .ci/build_base.sh): %v", opts.Image, err)
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
