// Package kubetest gives the Kubernetes integration tests a real cluster,
// failing (not skipping) when CI=true and there is none. It is apart from
// testenv so that only those tests link client-go.
package kubetest

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/runtime/kubernetes"
)

// Namespace is where the Kubernetes tests run their pods unless
// SANDBOX_AGENT_KUBERNETES_NAMESPACE names another.
const Namespace = "default"

// Runtime connects to the cluster named by KUBECONFIG (.ci/k8s.sh
// start prints it) and checks the API server answers; it fails in CI
// and skips elsewhere when there is none. The tests that call it carry
// the build tag kubernetes as well as integration: the README's test
// command runs without a cluster, .ci/run's Kubernetes step with one.
// Pods use images the node already has (imagePullPolicy IfNotPresent;
// .ci/k8s.sh import, or the loopback registry under
// SANDBOX_AGENT_IMAGE_NAME).
func Runtime(t testing.TB) *kubernetes.Runtime {
	t.Helper()
	if os.Getenv("KUBECONFIG") == "" {
		prereq.Missing(t, "no cluster: KUBECONFIG is not set (bash .ci/k8s.sh start; eval \"$(bash .ci/k8s.sh env)\")")
	}
	ns := os.Getenv("SANDBOX_AGENT_KUBERNETES_NAMESPACE")
	if ns == "" {
		ns = Namespace
	}
	// 50m a sandbox: the 2-core test node holds ~35 sandboxes at once
	// (the scale round); their limits are the library's defaults.
	// .ci/k8s.sh puts sandbox-agent's seccomp profile on the node.
	rt, err := kubernetes.New(context.Background(), kubernetes.Options{Namespace: ns, PullPolicy: corev1.PullIfNotPresent, CPURequest: "50m", SeccompLocalhost: true})
	if err != nil {
		prereq.Missing(t, "no cluster: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := rt.Info(ctx); err != nil {
		prereq.Missing(t, "no cluster at KUBECONFIG=%s: %v", os.Getenv("KUBECONFIG"), err)
	}
	return rt
}

// PolicyEnforced says whether the tests expect the cluster's network
// plugin to enforce NetworkPolicy: SANDBOX_AGENT_TEST_NETWORKPOLICY is
// "enforced" (the default: .ci/k8s.sh runs kube-router's policy
// controller) or "unenforced" (after `k8s.sh netpol off`, or on a cluster
// whose plugin ignores policies: then egress none and model must be refused).
func PolicyEnforced(t testing.TB) bool {
	t.Helper()
	switch v := os.Getenv("SANDBOX_AGENT_TEST_NETWORKPOLICY"); v {
	case "", "enforced":
		return true
	case "unenforced":
		return false
	default:
		t.Fatalf("SANDBOX_AGENT_TEST_NETWORKPOLICY=%q: want enforced or unenforced", v)
		return false
	}
}
