// Package drivers is the table of every driver, built from an endpoint:
// the command line and the conformance suite share it.
package drivers

import (
	"fmt"
	"sort"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/claude"
	"github.com/sandbox-agent/sandbox-agent/driver/codex"
	"github.com/sandbox-agent/sandbox-agent/driver/dsh"
	"github.com/sandbox-agent/sandbox-agent/driver/opencode"
	"github.com/sandbox-agent/sandbox-agent/driver/pi"
	"github.com/sandbox-agent/sandbox-agent/internal/smoke"
)

// Factory builds a driver for an endpoint.
type Factory func(smoke.Endpoint) sandboxagent.Driver

// All returns every driver's factory by name.
func All() map[string]Factory {
	return map[string]Factory{
		"claude": func(ep smoke.Endpoint) sandboxagent.Driver {
			// claude appends /v1/messages itself.
			return claude.New(claude.Options{BaseURL: strings.TrimSuffix(ep.BaseURL, "/v1"), APIKey: ep.APIKey})
		},
		"dsh": func(ep smoke.Endpoint) sandboxagent.Driver {
			return dsh.New(dsh.Options{BaseURL: ep.BaseURL, APIKey: ep.APIKey})
		},
		"opencode": func(ep smoke.Endpoint) sandboxagent.Driver {
			return opencode.New(opencode.Options{BaseURL: ep.BaseURL, APIKey: ep.APIKey, Provider: ep.Provider})
		},
		"pi": func(ep smoke.Endpoint) sandboxagent.Driver {
			return pi.New(pi.Options{BaseURL: ep.BaseURL, APIKey: ep.APIKey})
		},
		"codex": func(ep smoke.Endpoint) sandboxagent.Driver {
			return codex.New(codex.Options{BaseURL: ep.BaseURL, APIKey: ep.APIKey})
		},
	}
}

// Names lists the drivers, sorted.
func Names() []string {
	var names []string
	for n := range All() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New builds the named driver.
func New(name string, ep smoke.Endpoint) (sandboxagent.Driver, error) {
	f, ok := All()[name]
	if !ok {
		return nil, fmt.Errorf("%w: unknown driver %q (have: %s)", sandboxagent.ErrInvalidArgument, name, strings.Join(Names(), ", "))
	}
	return f(ep), nil
}
