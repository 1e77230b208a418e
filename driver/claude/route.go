package claude

import (
	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/modelproxy"
)

// DefaultBaseURL is Anthropic's API, where the CLI goes without a BaseURL.
const DefaultBaseURL = "https://api.anthropic.com"

var _ sandboxagent.ModelRouter = (*Driver)(nil)

// ModelRoute implements sandboxagent.ModelRouter.
func (d *Driver) ModelRoute() (sandboxagent.ModelRoute, error) {
	u := d.o.BaseURL
	if u == "" {
		u = DefaultBaseURL
	}
	// claude calls POST /v1/messages (and probes HEAD /api/hello).
	return sandboxagent.ModelRoute{Upstream: u, Key: d.o.APIKey, APIs: []string{string(modelproxy.APIAnthropicMessages)}}, nil
}

// Routed implements sandboxagent.ModelRouter.
func (d *Driver) Routed(baseURL, token string) sandboxagent.Driver {
	o := d.o
	o.BaseURL, o.APIKey = baseURL, token
	return New(o)
}
