// Package drivers is the table of every driver, built from an endpoint:
// the command line, the smoke run and the conformance suite share it.
// versions.json is the one list of CLIs; this table must have a driver for
// each of them (its test checks).
package drivers

import (
	"fmt"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/claude"
	"github.com/sandbox-agent/sandbox-agent/driver/codex"
	"github.com/sandbox-agent/sandbox-agent/driver/dsh"
	"github.com/sandbox-agent/sandbox-agent/driver/opencode"
	"github.com/sandbox-agent/sandbox-agent/driver/pi"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
)

// Endpoint is where a driver's CLI finds its model.
type Endpoint struct {
	BaseURL  string
	APIKey   string
	Provider string // opencode's provider id
}

// Factory builds a driver for an endpoint.
type Factory func(Endpoint) sandboxagent.Driver

var factories = map[string]Factory{
	"claude": func(ep Endpoint) sandboxagent.Driver {
		// claude appends /v1/messages itself.
		return claude.New(claude.Options{BaseURL: strings.TrimSuffix(ep.BaseURL, "/v1"), APIKey: ep.APIKey})
	},
	"dsh": func(ep Endpoint) sandboxagent.Driver {
		return dsh.New(dsh.Options{BaseURL: ep.BaseURL, APIKey: ep.APIKey})
	},
	"opencode": func(ep Endpoint) sandboxagent.Driver {
		return opencode.New(opencode.Options{BaseURL: ep.BaseURL, APIKey: ep.APIKey, Provider: ep.Provider})
	},
	"pi": func(ep Endpoint) sandboxagent.Driver {
		return pi.New(pi.Options{BaseURL: ep.BaseURL, APIKey: ep.APIKey})
	},
	"codex": func(ep Endpoint) sandboxagent.Driver {
		return codex.New(codex.Options{BaseURL: ep.BaseURL, APIKey: ep.APIKey})
	},
}

// All returns every driver's factory by name.
func All() map[string]Factory {
	out := make(map[string]Factory, len(factories))
	for n, f := range factories {
		out[n] = f
	}
	return out
}

// Names lists the drivers in versions.json's order (opencode, codex,
// claude, pi, dsh).
func Names() []string {
	var names []string
	for _, n := range catalog.Versions().CLINames() {
		if _, ok := factories[n]; ok {
			names = append(names, n)
		}
	}
	return names
}

// New builds the named driver.
func New(name string, ep Endpoint) (sandboxagent.Driver, error) {
	f, ok := factories[name]
	if !ok {
		return nil, fmt.Errorf("%w: unknown driver %q (have: %s)", sandboxagent.ErrInvalidArgument, name, strings.Join(Names(), ", "))
	}
	return f(ep), nil
}
