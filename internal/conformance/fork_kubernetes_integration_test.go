//go:build integration && kubernetes

package conformance_test

import (
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/kubetest"
)

// TestIntegrationKubernetesFork is TestConformanceFork's scenario for pi
// on the cluster KUBECONFIG names: no engine commit there, so the
// checkpoints are archives (the working directory through the hostile-
// archive checks, the session as the driver's dump) under a folder of
// the test's.
func TestIntegrationKubernetesFork(t *testing.T) {
	forkScenario(t, kubetest.Runtime(t), "pi", sandboxagent.WithConfig(forkConfig(t)))
}
