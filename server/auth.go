package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/store"
)

// Scopes a token may carry. A public interface (serve token create
// --scope).
const (
	// ScopeAdmin: every right, over every tenant's agents.
	ScopeAdmin = "admin"
	// ScopeAgents: create, drive and delete the tenant's own agents (and
	// read them).
	ScopeAgents = "agents"
	// ScopeRead: read the tenant's agents, turns, events, files and
	// sessions; change nothing.
	ScopeRead = "read"
	// ScopeMetrics: monitoring: the server's health (and metrics), no
	// agent route.
	ScopeMetrics = "metrics"
)

// Scopes lists the scopes, for help texts and validation.
func Scopes() []string { return []string{ScopeAdmin, ScopeAgents, ScopeRead, ScopeMetrics} }

// AdminTenant is the tenant of the admin token (--token-file).
const AdminTenant = "admin"

// principal is who sent a request.
type principal struct {
	tenant string
	scopes []string
}

func (p principal) admin() bool { return slices.Contains(p.scopes, ScopeAdmin) }

// can reports whether p may do what needs scope.
func (p principal) can(scope string) bool {
	switch {
	case p.admin(), slices.Contains(p.scopes, scope):
		return true
	case scope == ScopeRead:
		return slices.Contains(p.scopes, ScopeAgents)
	}
	return false
}

// owns reports whether p may see an agent of tenant.
func (p principal) owns(tenant string) bool { return p.admin() || p.tenant == tenant }

type principalKey struct{}

// who is the request's principal (set by Handler).
func who(r *http.Request) principal {
	p, _ := r.Context().Value(principalKey{}).(principal)
	return p
}

// tokenPrefix starts every token the server issues, so a leaked one is
// recognisable (secret scanners) and told apart from the admin token.
const tokenPrefix = "sat_"

// hashToken is what the store keeps of a token.
func hashToken(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}

// TokenRequest describes a token to create.
type TokenRequest struct {
	Tenant string
	Scopes []string
	// TTL is the token's lifetime; 0: it does not expire.
	TTL time.Duration
}

// CreateToken issues a token: it returns the token itself (shown once:
// the store keeps its hash) and its record.
func CreateToken(ctx context.Context, st store.Store, req TokenRequest) (string, store.Token, error) {
	if err := checkTenant(req.Tenant); err != nil {
		return "", store.Token{}, err
	}
	if len(req.Scopes) == 0 {
		req.Scopes = []string{ScopeAgents}
	}
	for _, sc := range req.Scopes {
		if !slices.Contains(Scopes(), sc) {
			return "", store.Token{}, fmt.Errorf("%w: scope %q: want one of %s", sandboxagent.ErrInvalidArgument, sc, strings.Join(Scopes(), ", "))
		}
	}
	if req.TTL < 0 {
		return "", store.Token{}, fmt.Errorf("%w: token lifetime %v: want a positive duration", sandboxagent.ErrInvalidArgument, req.TTL)
	}
	secret := make([]byte, 32)
	id := make([]byte, 6)
	_, _ = rand.Read(secret)
	_, _ = rand.Read(id)
	tok := tokenPrefix + hex.EncodeToString(secret)
	now := time.Now().UTC()
	rec := store.Token{ID: "tok_" + hex.EncodeToString(id), Hash: hashToken(tok), Tenant: req.Tenant, Scopes: slices.Clone(req.Scopes), Created: now}
	if req.TTL > 0 {
		rec.Expires = now.Add(req.TTL)
	}
	if err := st.CreateToken(ctx, rec); err != nil {
		return "", store.Token{}, fmt.Errorf("create token: %w", err)
	}
	return tok, rec, nil
}

// checkTenant accepts tenant names that read well in logs and URLs.
func checkTenant(t string) error {
	if t == "" || len(t) > 64 || t == AdminTenant {
		return fmt.Errorf("%w: tenant %q: want a name of 1 to 64 characters other than %q", sandboxagent.ErrInvalidArgument, t, AdminTenant)
	}
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%w: tenant %q: want letters, digits, '-', '_' or '.'", sandboxagent.ErrInvalidArgument, t)
		}
	}
	return nil
}

var errDenied = &apiError{status: http.StatusUnauthorized, kind: KindUnauthorized, msg: "missing, wrong, expired or revoked bearer token"}

// authenticate finds the principal of a bearer token: the admin token,
// or one of the store's that is neither expired nor revoked.
func (s *Server) authenticate(ctx context.Context, tok string) (principal, error) {
	if subtle.ConstantTimeCompare([]byte(tok), []byte(s.opts.Token)) == 1 {
		return principal{tenant: AdminTenant, scopes: []string{ScopeAdmin}}, nil
	}
	if !strings.HasPrefix(tok, tokenPrefix) {
		return principal{}, errDenied
	}
	rec, err := s.st.TokenByHash(ctx, hashToken(tok))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return principal{}, errDenied
	case err != nil:
		return principal{}, fmt.Errorf("check token: %w", err)
	case !rec.Revoked.IsZero(), !rec.Expires.IsZero() && !time.Now().Before(rec.Expires):
		return principal{}, errDenied
	}
	return principal{tenant: rec.Tenant, scopes: rec.Scopes}, nil
}

// forbidden answers a request its token's scopes do not allow.
func forbidden(scope string) error {
	return &apiError{status: http.StatusForbidden, kind: KindForbidden, msg: "the token lacks the " + scope + " scope"}
}

// routeScope is the scope a request needs.
func routeScope(r *http.Request) string {
	// GET .../changes moves a branch of the host repository: a write.
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && !strings.HasSuffix(r.URL.Path, "/changes") {
		return ScopeRead
	}
	return ScopeAgents
}
