package drivertest

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
)

// The kit links no engine client nor the Docker-bound test environment:
// a driver's unit tests, ours or a third party's, build without them, and
// its end-to-end tests pay only for the engine they pass to StartAgent.
func TestNoEngineDependency(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		prereq.Missing(t, "go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"k8s.io/", "github.com/moby/", "github.com/docker/", "github.com/sandbox-agent/sandbox-agent/runtime/", "github.com/sandbox-agent/sandbox-agent/internal/testenv"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("drivertest depends on %s", dep)
			}
		}
	}
	if !strings.Contains(string(out), "github.com/sandbox-agent/sandbox-agent/fakemodel") {
		t.Errorf("go list printed no dependencies of ours: %q", out)
	}
}
