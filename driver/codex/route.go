package codex

import (
	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/modelproxy"
)

var _ sandboxagent.ModelRouter = (*Driver)(nil)

// ModelRoute implements sandboxagent.ModelRouter.
func (d *Driver) ModelRoute() (sandboxagent.ModelRoute, error) {
	// codex speaks only the Responses API (wire_api = "responses"; chat
	// is refused by the CLI) and lists no models for a custom provider.
	return sandboxagent.ModelRoute{Upstream: d.baseURL(), Key: d.o.APIKey, APIs: []string{string(modelproxy.APIOpenAIResponses)}}, nil
}

// Routed implements sandboxagent.ModelRouter.
func (d *Driver) Routed(baseURL, token string) sandboxagent.Driver {
	o := d.o
	o.BaseURL, o.APIKey = baseURL, token
	return New(o)
}
