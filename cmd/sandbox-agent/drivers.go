package main

import (
	"fmt"
	"sort"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/codex"
	"github.com/sandbox-agent/sandbox-agent/internal/smoke"
)

// endpoint is where a driver's CLI finds its model.
type endpoint = smoke.Endpoint

// driverFactories builds each driver from an endpoint. The cmd package is
// the only place that knows every driver.
func driverFactories() map[string]func(endpoint) sandboxagent.Driver {
	return map[string]func(endpoint) sandboxagent.Driver{
		"codex": func(ep endpoint) sandboxagent.Driver {
			return codex.New(codex.Options{BaseURL: ep.BaseURL, APIKey: ep.APIKey})
		},
	}
}

func driverNames() []string {
	var names []string
	for n := range driverFactories() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func newDriver(name string, ep endpoint) (sandboxagent.Driver, error) {
	f, ok := driverFactories()[name]
	if !ok {
		return nil, fmt.Errorf("unknown driver %q (have: %s)", name, strings.Join(driverNames(), ", "))
	}
	return f(ep), nil
}

// realEndpoint is the endpoint of a run against real models: opencode goes
// to its provider with the key from keyEnv (default ZHIPUAI_CODING_TOKEN);
// the other CLIs go through the gateway.
func (a *app) realEndpoint(name, provider, keyEnv string) (endpoint, error) {
	if name == "opencode" {
		if keyEnv == "" {
			keyEnv = "ZHIPUAI_CODING_TOKEN"
		}
		key := a.getenv(keyEnv)
		if key == "" {
			return endpoint{}, fmt.Errorf("no API key for opencode: set %s (or use --fake-model)", keyEnv)
		}
		return endpoint{Provider: provider, APIKey: key}, nil
	}
	ep := endpoint{BaseURL: a.cfg.GatewayURL, APIKey: a.cfg.GatewayKey}
	if keyEnv != "" {
		ep.APIKey = a.getenv(keyEnv)
	}
	return ep, nil
}
