package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sandbox-agent/sandbox-agent/store"
)

// staleClaim: a key claimed this long ago whose request never recorded
// what it made was claimed by a server that died; it is free again.
const staleClaim = 15 * time.Minute

// maxKeyLen bounds an Idempotency-Key (a UUID is 36 characters).
const maxKeyLen = 255

// idempotencyKey is the request's Idempotency-Key header ("" when none).
func idempotencyKey(r *http.Request) (string, error) {
	k := r.Header.Get("Idempotency-Key")
	if len(k) > maxKeyLen {
		return "", badRequest("Idempotency-Key: over %d characters", maxKeyLen)
	}
	for _, c := range k {
		if c < 0x21 || c > 0x7e {
			return "", badRequest("Idempotency-Key: want printable ASCII without spaces")
		}
	}
	return k, nil
}

// claim records a tenant's key for route, or returns the record that
// holds it (mine false). The same key on another route is a conflict.
func (s *Server) claim(ctx context.Context, tenant, key, route string) (store.Idempotency, bool, error) {
	want := store.Idempotency{Tenant: tenant, Key: key, Route: route, Created: time.Now().UTC()}
	k, mine, err := s.st.ClaimIdempotency(ctx, want)
	if err == nil && !mine && k.Ref == "" && time.Since(k.Created) > staleClaim {
		// Its request died with its server before it made anything.
		if err = s.st.ReleaseIdempotency(ctx, tenant, key); err == nil {
			k, mine, err = s.st.ClaimIdempotency(ctx, want)
		}
	}
	if err != nil {
		return k, false, fmt.Errorf("idempotency key: %w", err)
	}
	if !mine && k.Route != route {
		return k, false, &apiError{status: http.StatusUnprocessableEntity, kind: KindConflict, msg: "Idempotency-Key " + key + " was used for another request"}
	}
	return k, mine, nil
}

// unclaim forgets a key whose request failed: a retry tries again.
func (s *Server) unclaim(tenant, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.st.ReleaseIdempotency(ctx, tenant, key); err != nil {
		s.log.Warn("release idempotency key", "err", err)
	}
}

func inProgress(key string) error {
	return &apiError{status: http.StatusConflict, kind: KindConflict, msg: "a request with Idempotency-Key " + key + " is in progress: retry later", retryAfter: 1}
}

// replayCreate answers a retried create with the agent the first request
// made (200, Idempotent-Replayed: true).
func (s *Server) replayCreate(w http.ResponseWriter, r *http.Request, k store.Idempotency) {
	if k.Ref == "" {
		writeError(w, inProgress(k.Key))
		return
	}
	rec, err := s.st.GetAgent(r.Context(), k.Ref)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, notFound("the agent Idempotency-Key %s created, %s, was deleted", k.Key, k.Ref))
		return
	}
	if err != nil {
		writeError(w, err)
		return
	}
	s.mu.Lock()
	a := s.agents[rec.ID]
	s.mu.Unlock()
	w.Header().Set("Idempotent-Replayed", "true")
	writeJSON(w, http.StatusOK, a.view(rec))
}

// turnRef is a turn's number as an idempotency record keeps it.
func turnRef(n int) string { return strconv.Itoa(n) }
