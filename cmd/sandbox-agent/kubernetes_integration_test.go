//go:build integration && kubernetes

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/internal/kubetest"
)

// kubeEnv points the command line at the cluster kubetest found.
func kubeEnv(t *testing.T) map[string]string {
	rt := kubetest.Runtime(t)
	return map[string]string{
		"SANDBOX_AGENT_RUNTIME": "kubernetes", "KUBECONFIG": os.Getenv("KUBECONFIG"),
		"SANDBOX_AGENT_KUBERNETES_NAMESPACE": rt.Namespace(),
		"SANDBOX_AGENT_IMAGE_NAME":           os.Getenv("SANDBOX_AGENT_IMAGE_NAME"),
	}
}

// The agent turn and the smoke steps of the Docker suite, on Kubernetes:
// the CLI in a pod reaches the fake model on this host through the exec
// tunnel and the model proxy. The test cluster's network plugin enforces
// no NetworkPolicy, so the agents run under --egress open (the key still
// stays on the host) and the default, egress model, must be refused.
func TestIntegrationKubernetesAgent(t *testing.T) {
	env := kubeEnv(t)
	t.Run("ask", func(t *testing.T) { checkAgentAsk(t, "kubernetes", env, "--egress", "open") })
	t.Run("smoke", func(t *testing.T) { checkAgentSmoke(t, "kubernetes", env, "--egress", "open") })
	t.Run("egress model refused", func(t *testing.T) {
		script := filepath.Join(t.TempDir(), "s.json")
		if err := os.WriteFile(script, []byte(`{"responses":[{"text":"hi"}]}`), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runCLI(t, env, "ask", "--driver", agentDriver, "--fake-model", script, "hi")
		if code != exitError || !strings.Contains(stderr, "does not enforce NetworkPolicy") {
			t.Fatalf("exit %d, stdout %q, stderr %q; want 125 and the NetworkPolicy finding", code, stdout, stderr)
		}
	})
}
