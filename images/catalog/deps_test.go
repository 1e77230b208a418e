package catalog

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
)

// The catalog is below the library: it imports nothing of the module's
// root package (which imports it), nor any other package of the module.
func TestCatalogImportsNothingOfTheModule(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		prereq.Missing(t, "go list: %v", err) // no go tool next to the test binary
	}
	const module = "github.com/sandbox-agent/sandbox-agent"
	deps := strings.Fields(string(out))
	for _, dep := range deps {
		if (dep == module || strings.HasPrefix(dep, module+"/")) && dep != module+"/images/catalog" {
			t.Errorf("images/catalog depends on %s", dep)
		}
	}
	if len(deps) == 0 || deps[len(deps)-1] != module+"/images/catalog" {
		t.Errorf("go list printed no dependencies of ours: %q", out)
	}
}
