//go:build integration && kubernetes

package sandboxagent_test

import (
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/kubetest"
)

// With the kubernetes tag, BenchmarkScale runs on the cluster KUBECONFIG
// names: go test -tags integration,kubernetes -run '^$' -bench '^BenchmarkScale$'
// -benchtime 1x . (SANDBOX_AGENT_SCALE_N sandboxes; the test cluster's
// node holds about 35 at kubetest's CPU request).
func init() {
	scaleRuntime = func(b *testing.B) sandboxagent.Runtime { return kubetest.Runtime(b) }
}
