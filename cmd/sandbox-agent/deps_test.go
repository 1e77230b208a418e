package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
)

// The binary links client-go only in a build with the tag kubernetes: it
// costs 50 MB and tens of milliseconds at every start (docs/kubernetes.md).
func TestKubernetesOnlyUnderItsTag(t *testing.T) {
	tests := []struct {
		tags     string
		wantK8s  bool
		wantNode bool // seccomp install's package, in every build
	}{
		{"", false, true},
		{"kubernetes", true, true},
	}
	for _, tt := range tests {
		t.Run("tags="+tt.tags, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-tags", tt.tags, "-deps", ".").Output()
			if err != nil {
				prereq.Missing(t, "go list: %v", err) // no go tool next to the test binary
			}
			deps := string(out)
			if got := strings.Contains(deps, "\nk8s.io/client-go/"); got != tt.wantK8s {
				t.Errorf("links client-go: %v, want %v", got, tt.wantK8s)
			}
			if got := strings.Contains(deps, "/runtime/kubernetes/nodeseccomp\n"); got != tt.wantNode {
				t.Errorf("links nodeseccomp: %v, want %v", got, tt.wantNode)
			}
		})
	}
}
