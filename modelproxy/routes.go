package modelproxy

import (
	"fmt"
	"net/url"
	pathpkg "path"
	"strings"
)

// API names a model wire API, whose routes the proxy forwards.
type API string

// The wire APIs the five CLIs speak.
const (
	APIAnthropicMessages API = "anthropic-messages" // Anthropic Messages: claude, opencode's and pi's anthropic
	APIOpenAIChat        API = "openai-chat"        // OpenAI Chat Completions: opencode, pi, dsh
	APIOpenAIResponses   API = "openai-responses"   // OpenAI Responses: codex, opencode's openai, pi
)

// AllAPIs are the APIs an empty Options.APIs allows.
var AllAPIs = []API{APIAnthropicMessages, APIOpenAIChat, APIOpenAIResponses}

// route is one allowed method and path below the upstream's base path. A
// final "*" stands for one segment (a model id).
type route struct{ method, path string }

// apiRoutes are what the CLIs call (captured in the reference fixtures)
// plus the read-only model listing of each API. Anthropic's SDKs append
// "/v1/messages" to a base URL without a path (claude, pi), while
// opencode's anthropic base already ends in /v1: hence both forms there.
// The OpenAI SDKs append "/chat/completions" or "/responses" to a base
// that carries its own version, so no "/v1" is added for them.
var apiRoutes = map[API][]route{
	APIAnthropicMessages: {
		{"POST", "/messages"}, {"POST", "/v1/messages"},
		{"POST", "/messages/count_tokens"}, {"POST", "/v1/messages/count_tokens"},
		{"GET", "/models"}, {"GET", "/v1/models"},
		{"GET", "/models/*"}, {"GET", "/v1/models/*"},
		// claude's connection warm-up; a HEAD answer has no body.
		{"HEAD", "/api/hello"},
	},
	APIOpenAIChat: {
		{"POST", "/chat/completions"},
		{"GET", "/models"}, {"GET", "/models/*"},
	},
	APIOpenAIResponses: {
		{"POST", "/responses"},
		{"GET", "/models"}, {"GET", "/models/*"},
	},
}

// routesFor returns the union of apis' routes, checking the names.
func routesFor(apis []API) ([]route, error) {
	if len(apis) == 0 {
		apis = AllAPIs
	}
	seen := map[route]bool{}
	var rs []route
	for _, a := range apis {
		list, ok := apiRoutes[a]
		if !ok {
			return nil, fmt.Errorf("modelproxy: unknown API %q (want one of %q, %q, %q)", a, APIAnthropicMessages, APIOpenAIChat, APIOpenAIResponses)
		}
		for _, r := range list {
			if !seen[r] {
				seen[r] = true
				rs = append(rs, r)
			}
		}
	}
	return rs, nil
}

// allowed reports whether the request line may be forwarded: both the
// decoded and the escaped path must be the upstream's base path followed
// by exactly one allowed route. Exact matching already refuses "..",
// "//", encoded slashes and dots, and trailing slashes; the character and
// clean-path checks are a second line (some servers read "..;" or "..\"
// as a parent directory).
func (p *Proxy) allowed(method string, u *url.URL) bool {
	return allowedPath(p.routes, method, u.Path, p.prefix) && allowedPath(p.routes, method, u.EscapedPath(), p.escPrefix)
}

func allowedPath(routes []route, method, path, prefix string) bool {
	rest, ok := strings.CutPrefix(path, prefix)
	if !ok || !strings.HasPrefix(rest, "/") || strings.ContainsAny(rest, `\;%`) || pathpkg.Clean(rest) != rest {
		return false
	}
	for _, r := range routes {
		if r.method == method && matchRoute(r.path, rest) {
			return true
		}
	}
	return false
}

// matchRoute matches rest against pattern, where a final "*" is one
// non-empty segment made of the characters model ids use.
func matchRoute(pattern, rest string) bool {
	head, wild := strings.CutSuffix(pattern, "*")
	if !wild {
		return rest == pattern
	}
	id, ok := strings.CutPrefix(rest, head)
	if !ok || id == "" || id[0] == '.' {
		return false
	}
	for _, c := range []byte(id) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("-_.:@+", c) >= 0:
		default:
			return false
		}
	}
	return true
}
