package sandboxagent

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
)

// The root package is the domain: no engine client in its dependencies
// (the Docker client lives in runtime/docker; Kubernetes' client-go, when
// it comes, in runtime/kubernetes), so a user who imports the library
// pays only for the runtime they pick.
func TestRootDependenciesStayEngineFree(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		prereq.Missing(t, "go list: %v", err) // no go tool next to the test binary
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"k8s.io/", "sigs.k8s.io/", "github.com/moby/moby/client", "github.com/docker/docker"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("the root package depends on %s", dep)
			}
		}
	}
	if !strings.Contains(string(out), "github.com/sandbox-agent/sandbox-agent/audit") {
		t.Errorf("go list printed no dependencies of ours: %q", out)
	}
}
