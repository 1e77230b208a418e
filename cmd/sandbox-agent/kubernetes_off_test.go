//go:build !kubernetes

package main

import (
	"errors"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// A build without the Kubernetes runtime refuses runtime kubernetes with a
// typed error naming the builds that have it, for every command that
// connects.
func TestKubernetesNotBuilt(t *testing.T) {
	if !errors.Is(errNoKubernetes, sandboxagent.ErrEngineUnavailable) {
		t.Fatalf("errNoKubernetes = %v, want ErrEngineUnavailable", errNoKubernetes)
	}
	env := map[string]string{"SANDBOX_AGENT_RUNTIME": "kubernetes"}
	for _, args := range [][]string{{"exec", "--", "true"}, {"version"}, {"gc", "--dry-run"}} {
		t.Run(args[0], func(t *testing.T) {
			code, _, stderr := runCLI(t, env, args...)
			if code != exitError || !strings.Contains(stderr, "built without the Kubernetes runtime") || !strings.Contains(stderr, "-tags kubernetes") {
				t.Errorf("exit %d, stderr %q: want %d and the built-without error", code, stderr, exitError)
			}
		})
	}
}
