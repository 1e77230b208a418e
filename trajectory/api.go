package trajectory

import (
	"net/http"
	"strings"
)

// API is the wire protocol of a completion request.
type API string

// The completion APIs the five CLIs and the fake model speak.
const (
	AnthropicMessages API = "anthropic-messages" // POST …/messages (claude)
	OpenAIChat        API = "openai-chat"        // POST …/chat/completions (opencode, pi, dsh)
	OpenAIResponses   API = "openai-responses"   // POST …/responses (codex)
)

// DetectAPI returns the API of a request by its method and path, or "" when
// it is not a completion (count_tokens, models, probes, Responses
// sub-routes such as …/responses/compact): those carry no model answer.
// Matching is by suffix, as upstreams differ in their prefix (/v1, /openai/v1).
func DetectAPI(method, path string) API {
	if method != http.MethodPost {
		return ""
	}
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	path = strings.TrimSuffix(path, "/")
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		return OpenAIChat
	case strings.HasSuffix(path, "/responses"):
		return OpenAIResponses
	case strings.HasSuffix(path, "/messages"):
		return AnthropicMessages
	}
	return ""
}
