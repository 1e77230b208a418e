package opencode

import (
	"fmt"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/modelproxy"
)

// providerURLs are the endpoints of opencode's built-in providers that
// can be routed through the model proxy (from models.dev, which opencode
// ships); the proxy forwards there and the provider's options.baseURL
// points opencode at the proxy.
var providerURLs = map[string]string{
	"zhipuai-coding-plan": "https://open.bigmodel.cn/api/coding/paas/v4",
	"zhipuai":             "https://open.bigmodel.cn/api/paas/v4",
	"zai-coding-plan":     "https://api.z.ai/api/coding/paas/v4",
	"anthropic":           "https://api.anthropic.com/v1",
	"openai":              "https://api.openai.com/v1",
}

// providerAPIs are the wire APIs of those providers, by their npm package:
// @ai-sdk/anthropic calls /messages below the /v1 base, opencode drives
// @ai-sdk/openai through its Responses model, and the others (and a
// custom BaseURL) are @ai-sdk/openai-compatible, /chat/completions.
var providerAPIs = map[string]modelproxy.API{
	"anthropic": modelproxy.APIAnthropicMessages,
	"openai":    modelproxy.APIOpenAIResponses,
}

// apis are the wire APIs the configured provider speaks.
func (d *Driver) apis() []string {
	api, ok := providerAPIs[d.o.Provider]
	if !ok || d.custom() {
		api = modelproxy.APIOpenAIChat
	}
	return []string{string(api)}
}

var _ sandboxagent.ModelRouter = (*Driver)(nil)

// ModelRoute implements sandboxagent.ModelRouter.
func (d *Driver) ModelRoute() (sandboxagent.ModelRoute, error) {
	if d.custom() {
		return sandboxagent.ModelRoute{Upstream: d.o.BaseURL, Key: d.o.APIKey, APIs: d.apis()}, nil
	}
	u, ok := providerURLs[d.o.Provider]
	if !ok {
		return sandboxagent.ModelRoute{}, fmt.Errorf("%w: opencode: provider %q: its endpoint is unknown here; set Options.BaseURL to route it through the model proxy, or use egress open",
			sandboxagent.ErrInvalidArgument, d.o.Provider)
	}
	return sandboxagent.ModelRoute{Upstream: u, Key: d.o.APIKey, APIs: d.apis()}, nil
}

// Routed implements sandboxagent.ModelRouter. A built-in provider stays
// itself (its models and wire API); only its baseURL moves.
func (d *Driver) Routed(baseURL, token string) sandboxagent.Driver {
	o := d.o
	o.APIKey = token
	if d.custom() {
		o.BaseURL = baseURL
	} else {
		o.routedURL = baseURL
	}
	return New(o)
}
