package main

import (
	"fmt"

	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
)

// realEndpoint is the endpoint of a run against real models: opencode goes
// to its provider with the key from keyEnv (default ZHIPUAI_CODING_TOKEN);
// the other CLIs go through the gateway.
func (a *app) realEndpoint(name, provider, keyEnv string) (drivers.Endpoint, error) {
	if name == "opencode" {
		if keyEnv == "" {
			keyEnv = "ZHIPUAI_CODING_TOKEN"
		}
		key := a.getenv(keyEnv)
		if key == "" {
			return drivers.Endpoint{}, fmt.Errorf("no API key for opencode: set %s (or use --fake-model)", keyEnv)
		}
		a.secret(key)
		return drivers.Endpoint{Provider: provider, APIKey: key}, nil
	}
	ep := drivers.Endpoint{BaseURL: a.cli.gatewayURL, APIKey: a.cli.gatewayKey}
	if keyEnv != "" {
		ep.APIKey = a.getenv(keyEnv)
	}
	a.secret(ep.APIKey)
	return ep, nil
}
