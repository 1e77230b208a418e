package server

import (
	"errors"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/metering"
)

// A create request may name only the server's OCI runtime or one its
// operator allows: it cannot loosen the server's isolation.
func TestRequestOCIRuntime(t *testing.T) {
	gvisor := sandboxagent.DefaultConfig()
	gvisor.OCIRuntime = "runsc"
	for _, tc := range []struct {
		name    string
		base    sandboxagent.Config
		allowed []string
		req     string
		ok      bool
	}{
		{"none asked", gvisor, nil, "", true},
		{"the server's", gvisor, nil, "runsc", true},
		{"looser than the server's", gvisor, nil, "runc", false},
		{"none allowed: the engine's default stays", sandboxagent.DefaultConfig(), nil, "runc", false},
		{"allowed", sandboxagent.DefaultConfig(), []string{"runsc", "kata"}, "kata", true},
		{"not allowed", gvisor, []string{"kata"}, "runc", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := requestOptions(&tc.base, tc.allowed, nil, CreateRequest{Driver: "pi", OCIRuntime: tc.req})
			if tc.ok != (err == nil) || err != nil && !errors.Is(err, sandboxagent.ErrInvalidArgument) {
				t.Errorf("oci_runtime %q on a server with %q: %v", tc.req, tc.base.OCIRuntime, err)
			}
		})
	}
}

// A create request's disk limit may be smaller than the server's, never
// larger or none.
func TestRequestDisk(t *testing.T) {
	limited := sandboxagent.DefaultConfig()
	limited.DiskBytes = 2 << 30
	unlimited := sandboxagent.DefaultConfig()
	unlimited.DiskBytes = -1
	for _, tc := range []struct {
		name string
		base sandboxagent.Config
		req  string
		ok   bool
	}{
		{"smaller", limited, "1g", true},
		{"larger", limited, "3g", false},
		{"none on a limited server", limited, "none", false},
		{"none on the default", sandboxagent.DefaultConfig(), "none", false},
		{"none where the operator said none", unlimited, "none", true},
		{"the default or less on the default", sandboxagent.DefaultConfig(), "10g", true},
		{"more than the default on the default", sandboxagent.DefaultConfig(), "20g", false},
		{"too small", sandboxagent.DefaultConfig(), "1m", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := requestOptions(&tc.base, nil, nil, CreateRequest{Driver: "pi", Disk: tc.req})
			if tc.ok != (err == nil) || err != nil && !errors.Is(err, sandboxagent.ErrInvalidArgument) {
				t.Errorf("disk %q on a server with %d: %v", tc.req, tc.base.DiskBytes, err)
			}
		})
	}
}

// A create request's budget is checked: negative or not finite limits are
// invalid arguments.
func TestRequestBudget(t *testing.T) {
	base := sandboxagent.DefaultConfig()
	for _, tc := range []struct {
		b  metering.Budget
		ok bool
	}{
		{metering.Budget{Tokens: 1000}, true},
		{metering.Budget{USD: 2.5}, true},
		{metering.Budget{Tokens: -1}, false},
		{metering.Budget{USD: -0.1}, false},
	} {
		_, err := requestOptions(&base, nil, nil, CreateRequest{Driver: "pi", Budget: &tc.b})
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("budget %+v: %v", tc.b, err)
		}
	}
}
