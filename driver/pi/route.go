package pi

import (
	"fmt"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

var _ sandboxagent.ModelRouter = (*Driver)(nil)

// ModelRoute implements sandboxagent.ModelRouter. A built-in provider
// (no BaseURL) has its endpoint inside pi: give it as BaseURL (with API)
// to route it.
func (d *Driver) ModelRoute() (sandboxagent.ModelRoute, error) {
	if !d.custom() {
		return sandboxagent.ModelRoute{}, fmt.Errorf("%w: pi: built-in provider %q: set Options.BaseURL (and API) to its endpoint to route it through the model proxy, or use egress open",
			sandboxagent.ErrInvalidArgument, d.provider())
	}
	return sandboxagent.ModelRoute{Upstream: d.o.BaseURL, Key: d.o.APIKey}, nil
}

// Routed implements sandboxagent.ModelRouter.
func (d *Driver) Routed(baseURL, token string) sandboxagent.Driver {
	o := d.o
	o.BaseURL, o.APIKey = baseURL, token
	return New(o)
}
