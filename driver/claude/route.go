package claude

import sandboxagent "github.com/sandbox-agent/sandbox-agent"

// DefaultBaseURL is Anthropic's API, where the CLI goes without a BaseURL.
const DefaultBaseURL = "https://api.anthropic.com"

var _ sandboxagent.ModelRouter = (*Driver)(nil)

// ModelRoute implements sandboxagent.ModelRouter.
func (d *Driver) ModelRoute() (sandboxagent.ModelRoute, error) {
	u := d.o.BaseURL
	if u == "" {
		u = DefaultBaseURL
	}
	return sandboxagent.ModelRoute{Upstream: u, Key: d.o.APIKey}, nil
}

// Routed implements sandboxagent.ModelRouter.
func (d *Driver) Routed(baseURL, token string) sandboxagent.Driver {
	o := d.o
	o.BaseURL, o.APIKey = baseURL, token
	return New(o)
}
