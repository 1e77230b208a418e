package codex

import sandboxagent "github.com/sandbox-agent/sandbox-agent"

var _ sandboxagent.ModelRouter = (*Driver)(nil)

// ModelRoute implements sandboxagent.ModelRouter.
func (d *Driver) ModelRoute() (sandboxagent.ModelRoute, error) {
	return sandboxagent.ModelRoute{Upstream: d.baseURL(), Key: d.o.APIKey}, nil
}

// Routed implements sandboxagent.ModelRouter.
func (d *Driver) Routed(baseURL, token string) sandboxagent.Driver {
	o := d.o
	o.BaseURL, o.APIKey = baseURL, token
	return New(o)
}
