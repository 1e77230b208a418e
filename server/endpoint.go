package server

import (
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"unicode"
)

// EndpointRequest is the create request's endpoint: the model endpoint of
// this agent instead of the server's. Field names are a public interface.
// Only the admin token may send it (an embedder's own engine): a tenant
// could point the server's model proxy anywhere.
type EndpointRequest struct {
	// BaseURL is the model API (http or https; a loopback address works:
	// the model proxy on the host forwards to it). Empty: opencode goes
	// to its provider's own API, the other CLIs to the server's gateway.
	BaseURL string `json:"base_url,omitempty"`
	// APIKey is the key sent to it; empty: none. A secret: never
	// stored, logged or shown (stored drops it).
	APIKey string `json:"api_key,omitempty"`
	// Provider is opencode's provider id (default as the server's:
	// zhipuai-coding-plan without BaseURL, a custom "sandbox" provider
	// with one).
	Provider string `json:"provider,omitempty"`
	// KeyDropped, set by stored, says the request had an APIKey that the
	// store does not keep: such an agent cannot be adopted after a
	// restart. Never read from a request.
	KeyDropped bool `json:"api_key_dropped,omitempty"`
}

// Limits of an endpoint's fields.
const (
	maxBaseURLLen  = 2048
	maxAPIKeyLen   = 4096
	maxProviderLen = 64
	maxAuditRoot   = 4096
)

// forbiddenField answers a tenant's request for what only the admin may
// ask.
func forbiddenField(field, why string) error {
	return &apiError{status: http.StatusForbidden, kind: KindForbidden, msg: fmt.Sprintf("%s: only the admin token may set it (%s)", field, why)}
}

// checkAdminFields checks the create request's fields that only the admin
// may send: endpoint, audit and audit_root.
func (s *Server) checkAdminFields(p principal, req *CreateRequest) error {
	if ep := req.Endpoint; ep != nil {
		if !p.admin() {
			return forbiddenField("endpoint", "a model endpoint of the request's own is the operator's choice")
		}
		if err := checkEndpoint(ep); err != nil {
			return err
		}
		if req.HasFakeModelScript() {
			return badRequest("endpoint: not with fake_model_script (the fake model is the agent's endpoint)")
		}
		if ep.APIKey != "" && !s.opts.Exclusive {
			// Another replica borrowing the agent would need the key,
			// which only this process knows.
			return badRequest("endpoint.api_key: needs a server of its own state (a SQLite file or :memory:), not replicas on a shared database: the key is never stored")
		}
	}
	if req.Audit != nil && !p.admin() {
		return forbiddenField("audit", "the audit trail is the operator's")
	}
	if req.AuditRoot != "" {
		if !p.admin() {
			return forbiddenField("audit_root", "the audit trail is the operator's")
		}
		if len(req.AuditRoot) > maxAuditRoot || !filepath.IsAbs(req.AuditRoot) || strings.ContainsRune(req.AuditRoot, 0) {
			return badRequest("audit_root: want an absolute path of the server's host")
		}
	}
	return nil
}

// checkEndpoint validates an endpoint as a request sends it.
func checkEndpoint(ep *EndpointRequest) error {
	if ep.KeyDropped {
		return badRequest(`body: json: unknown field "api_key_dropped" in endpoint`)
	}
	if u := ep.BaseURL; u != "" {
		pu, err := url.Parse(u)
		switch {
		case len(u) > maxBaseURLLen:
			return badRequest("endpoint.base_url: over %d characters", maxBaseURLLen)
		case err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" || pu.Opaque != "":
			return badRequest("endpoint.base_url: want an http or https URL, like https://api.example.com/v1")
		case pu.User != nil:
			return badRequest("endpoint.base_url: no credentials in the URL (they would be stored): give the key in endpoint.api_key")
		case pu.RawQuery != "" || pu.Fragment != "":
			return badRequest("endpoint.base_url: no query or fragment")
		}
	}
	if ep.APIKey != "" && len(ep.APIKey) < 8 {
		// Shorter secrets are not redacted from what serve prints.
		return badRequest("endpoint.api_key: want at least 8 characters")
	}
	if len(ep.APIKey) > maxAPIKeyLen {
		return badRequest("endpoint.api_key: over %d characters", maxAPIKeyLen)
	}
	for _, c := range ep.APIKey {
		if c > unicode.MaxASCII || unicode.IsSpace(c) || unicode.IsControl(c) {
			return badRequest("endpoint.api_key: want printable ASCII without spaces")
		}
	}
	if len(ep.Provider) > maxProviderLen || strings.ContainsFunc(ep.Provider, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.')
	}) {
		return badRequest("endpoint.provider %.200q: want up to %d letters, digits, '-', '_' or '.'", ep.Provider, maxProviderLen)
	}
	return nil
}

// keyNotKept is why an agent whose endpoint's key the store dropped
// cannot be adopted by a server that does not know the key.
const keyNotKept = "its endpoint's api_key is never stored, and this server process did not start it: " +
	"it cannot be driven with that key, and would not be with another; DELETE it " +
	"(sandbox-agent gc removes its sandbox) and create it again with the key"
