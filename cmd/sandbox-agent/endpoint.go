package main

import (
	"fmt"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
	"github.com/sandbox-agent/sandbox-agent/server"
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

// requestEndpoint is the endpoint a serve create request names (its
// endpoint field, the admin's): its base URL (empty: opencode's provider,
// the gateway for the other CLIs), its key and no other (empty: none),
// and opencode's provider (default zhipuai-coding-plan without a base URL,
// the driver's custom provider with one). The key is redacted from
// everything serve prints.
func (a *app) requestEndpoint(name string, req server.EndpointRequest) (drivers.Endpoint, error) {
	if req.KeyDropped && req.APIKey == "" {
		// An adopted agent's stored request: its key was never stored,
		// and another must not be used in its place.
		return drivers.Endpoint{}, fmt.Errorf("%w: endpoint: the agent's api_key is not kept (never stored): it cannot be driven with it after a restart", sandboxagent.ErrInvalidArgument)
	}
	ep := drivers.Endpoint{BaseURL: req.BaseURL, APIKey: req.APIKey, Provider: req.Provider}
	switch {
	case name == "opencode" && ep.BaseURL == "" && ep.Provider == "":
		ep.Provider = "zhipuai-coding-plan"
	case name != "opencode" && ep.BaseURL == "":
		ep.BaseURL = a.cli.gatewayURL
	}
	a.secret(ep.APIKey)
	return ep, nil
}
