package pi

import (
	"fmt"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/modelproxy"
)

// proxyAPIs map pi's custom-provider APIs to the model proxy's: the
// proxy forwards only these wire APIs' routes.
var proxyAPIs = map[string]modelproxy.API{
	"openai-completions": modelproxy.APIOpenAIChat,
	"openai-responses":   modelproxy.APIOpenAIResponses,
	"anthropic-messages": modelproxy.APIAnthropicMessages,
}

var _ sandboxagent.ModelRouter = (*Driver)(nil)

// ModelRoute implements sandboxagent.ModelRouter. A built-in provider
// (no BaseURL) has its endpoint inside pi: give it as BaseURL (with API)
// to route it.
func (d *Driver) ModelRoute() (sandboxagent.ModelRoute, error) {
	if !d.custom() {
		return sandboxagent.ModelRoute{}, fmt.Errorf("%w: pi: built-in provider %q: set Options.BaseURL (and API) to its endpoint to route it through the model proxy, or use egress open",
			sandboxagent.ErrInvalidArgument, d.provider())
	}
	api, ok := proxyAPIs[d.api()]
	if !ok {
		return sandboxagent.ModelRoute{}, fmt.Errorf("%w: pi: API %q: the model proxy forwards only openai-completions, openai-responses and anthropic-messages; use egress open",
			sandboxagent.ErrInvalidArgument, d.api())
	}
	return sandboxagent.ModelRoute{Upstream: d.o.BaseURL, Key: d.o.APIKey, APIs: []string{string(api)}}, nil
}

// Routed implements sandboxagent.ModelRouter.
func (d *Driver) Routed(baseURL, token string) sandboxagent.Driver {
	o := d.o
	o.BaseURL, o.APIKey = baseURL, token
	return New(o)
}
