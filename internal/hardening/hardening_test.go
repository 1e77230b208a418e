package hardening

import (
	"strings"
	"testing"
)

func TestCheckOCIRuntime(t *testing.T) {
	for name, ok := range map[string]bool{
		"": true, "runsc": true, "runc": true, "kata-qemu": true, "gvisor_1.0": true, "A1": true,
		"/usr/bin/runsc": false, "-runsc": false, ".x": false, "run sc": false, "runsc;rm": false,
		strings.Repeat("a", 63): true, strings.Repeat("a", 64): false,
	} {
		if err := CheckOCIRuntime(name); (err == nil) != ok {
			t.Errorf("CheckOCIRuntime(%q) = %v, want ok %v", name, err, ok)
		}
	}
}
