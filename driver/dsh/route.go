package dsh

import (
	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/modelproxy"
)

// DeepSeekBaseURL is DeepSeek's API, where dsh's DeepSeek adapter goes
// without a BaseURL.
const DeepSeekBaseURL = "https://api.deepseek.com"

var _ sandboxagent.ModelRouter = (*Driver)(nil)

// ModelRoute implements sandboxagent.ModelRouter.
func (d *Driver) ModelRoute() (sandboxagent.ModelRoute, error) {
	u := d.o.BaseURL
	if u == "" {
		u = DeepSeekBaseURL
	}
	// Both the DeepSeek adapter and the generic route (pi-ai's
	// openai-completions) append /chat/completions to the base URL.
	return sandboxagent.ModelRoute{Upstream: u, Key: d.o.APIKey, APIs: []string{string(modelproxy.APIOpenAIChat)}}, nil
}

// Routed implements sandboxagent.ModelRouter. The adapter stays the same
// (DeepSeek's, when it was implied by an empty BaseURL).
func (d *Driver) Routed(baseURL, token string) sandboxagent.Driver {
	o := d.o
	o.DeepSeek = d.deepSeek()
	o.BaseURL, o.APIKey = baseURL, token
	return New(o)
}
