package server

import (
	"errors"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// A create request may name an OCI runtime only where the operator
// configured none, or the same: it cannot loosen the server's isolation.
func TestRequestOCIRuntime(t *testing.T) {
	gvisor := sandboxagent.DefaultConfig()
	gvisor.OCIRuntime = "runsc"
	for _, tc := range []struct {
		name string
		base sandboxagent.Config
		req  string
		ok   bool
	}{
		{"none asked", gvisor, "", true},
		{"the server's", gvisor, "runsc", true},
		{"looser than the server's", gvisor, "runc", false},
		{"any, where none is configured", sandboxagent.DefaultConfig(), "runsc", true},
		{"not a name", sandboxagent.DefaultConfig(), "../runsc", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := requestOptions(&tc.base, CreateRequest{Driver: "pi", OCIRuntime: tc.req})
			if tc.ok != (err == nil) || err != nil && !errors.Is(err, sandboxagent.ErrInvalidArgument) {
				t.Errorf("oci_runtime %q on a server with %q: %v", tc.req, tc.base.OCIRuntime, err)
			}
		})
	}
}
