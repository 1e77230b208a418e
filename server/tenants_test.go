package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/store"
	"github.com/sandbox-agent/sandbox-agent/store/sqlite"
)

// testStore is a fresh in-memory SQLite store.
func testStore(t testing.TB) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// storedAgent adds a lost agent of tenant to st (a lost agent needs no
// sandbox: the routes that read work on it, the others answer 410).
func storedAgent(t *testing.T, st store.Store, id, tenant string) {
	t.Helper()
	now := time.Now().UTC()
	req, _ := json.Marshal(CreateRequest{Driver: "pi"})
	if err := st.CreateAgent(context.Background(), store.Agent{
		ID: id, Tenant: tenant, Request: req, Driver: "pi", Status: statusLost, Reason: "removed by the test", Created: now, Updated: now,
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutTurn(context.Background(), store.Turn{AgentID: id, N: 1, Prompt: "hello " + tenant, Status: turnDone, Started: now, Ended: now,
		Result: json.RawMessage(fmt.Sprintf(`{"turn":1,"prompt":"hello %s","reply":"hi","exit_code":0,"started":%q,"duration_ms":5,"event_count":1}`, tenant, now.Format(time.RFC3339Nano)))}); err != nil {
		t.Fatal(err)
	}
	evs := []store.Event{
		{AgentID: id, Seq: 1, Turn: 1, Kind: "turn_start", Data: json.RawMessage(`{"turn":1,"prompt":"hello"}`), Time: now},
		{AgentID: id, Seq: 2, Turn: 1, Kind: "event", Data: json.RawMessage(`{"kind":"text","payload":{"text":"hi"},"time":"2026-12-02T00:00:00Z","line":1,"turn":1}`), Time: now},
		{AgentID: id, Seq: 3, Turn: 1, Kind: "turn_end", Data: json.RawMessage(`{"turn":1,"prompt":"hello","reply":"hi","exit_code":0,"event_count":1}`), Time: now},
	}
	if err := st.AppendEvents(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
}

func newToken(t *testing.T, st store.Store, tenant string, ttl time.Duration, scopes ...string) string {
	t.Helper()
	tok, _, err := CreateToken(context.Background(), st, TokenRequest{Tenant: tenant, Scopes: scopes, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// agentRoutes is every route about one agent, with {id} to fill in.
var agentRoutes = []string{"GET /v1/agents/{id}", "DELETE /v1/agents/{id}", "POST /v1/agents/{id}/turns", "GET /v1/agents/{id}/turns",
	"GET /v1/agents/{id}/turns/1", "GET /v1/agents/{id}/events", "POST /v1/agents/{id}/exec", "GET /v1/agents/{id}/files",
	"PUT /v1/agents/{id}/files", "GET /v1/agents/{id}/sessions", "POST /v1/agents/{id}/sessions", "GET /v1/agents/{id}/sessions/s",
	"DELETE /v1/agents/{id}/sessions/s", "POST /v1/agents/{id}/sessions/s/fork", "GET /v1/agents/{id}/sessions/s/events",
	"PUT /v1/agents/{id}/session", "POST /v1/agents/{id}/checkpoints", "POST /v1/agents/{id}/fork",
	"GET /v1/agents/{id}/changes", "PUT /v1/agents/{id}/rules", "POST /v1/agents/{id}/skills"}

// TestTenants: a tenant's agents are invisible to another tenant on every
// route; scopes bound what a token may do; revoked and expired tokens are
// refused; the admin sees everything.
func TestTenants(t *testing.T) {
	for _, exclusive := range []bool{false, true} {
		t.Run(fmt.Sprintf("exclusive=%v", exclusive), func(t *testing.T) { testTenants(t, exclusive) })
	}
}

func testTenants(t *testing.T, exclusive bool) {
	st := testStore(t)
	ts := newTestServer(t, nil, func(o *Options) { o.Store, o.Exclusive = st, exclusive })
	storedAgent(t, st, "ag_a", "team-a")
	storedAgent(t, st, "ag_b", "team-b")
	a := "Bearer " + newToken(t, st, "team-a", 0, ScopeAgents)
	b := "Bearer " + newToken(t, st, "team-b", 0, ScopeAgents)
	readOnly := "Bearer " + newToken(t, st, "team-a", 0, ScopeRead)

	// Another tenant's agent is a 404 on every route: the same answer as
	// an id that does not exist.
	for _, r := range agentRoutes {
		method, path, _ := strings.Cut(strings.ReplaceAll(r, "{id}", "ag_a"), " ")
		if code, e := call(t, ts, method, path, b, "{}"); code != http.StatusNotFound || e.Kind != KindNotFound || strings.Contains(e.Error, "team-a") {
			t.Errorf("team-b %s: %d %+v, want 404", r, code, e)
		}
	}
	// Its own (lost) agent: readable; the sandbox's routes are 410.
	for _, r := range agentRoutes {
		method, path, _ := strings.Cut(strings.ReplaceAll(r, "{id}", "ag_a"), " ")
		if method == "DELETE" && path == "/v1/agents/ag_a" || strings.HasSuffix(path, "/events") {
			continue // below
		}
		body := "{}"
		if method == "POST" && strings.HasSuffix(path, "/turns") {
			body = `{"prompt":"hi"}`
		}
		code, e := call(t, ts, method, path, a, body)
		switch {
		case method == "GET" && (path == "/v1/agents/ag_a" || strings.Contains(path, "/turns")):
			if code != http.StatusOK {
				t.Errorf("team-a %s: %d %+v, want 200", r, code, e)
			}
		case code != http.StatusGone || e.Kind != KindLost:
			t.Errorf("team-a %s: %d %+v, want 410 lost", r, code, e)
		}
	}
	// Lists: each tenant its own; the admin all.
	for _, tc := range []struct {
		auth string
		want []string
	}{{a, []string{"ag_a"}}, {b, []string{"ag_b"}}, {"Bearer " + testToken, []string{"ag_a", "ag_b"}}} {
		if got := listIDs(t, ts, tc.auth); strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("list: %v, want %v", got, tc.want)
		}
	}
	// Scopes: read-only cannot change anything.
	for _, r := range []string{"POST /v1/agents", "DELETE /v1/agents/ag_a", "POST /v1/agents/ag_a/turns", "POST /v1/agents/ag_a/exec",
		"POST /v1/agents/ag_a/checkpoints", "POST /v1/agents/ag_a/fork", "DELETE /v1/checkpoints/ck-00", "GET /v1/agents/ag_a/changes"} {
		method, path, _ := strings.Cut(r, " ")
		if code, e := call(t, ts, method, path, readOnly, `{"driver":"pi"}`); code != http.StatusForbidden || e.Kind != KindForbidden {
			t.Errorf("read-only %s: %d %+v, want 403", r, code, e)
		}
	}
	if code, _ := call(t, ts, "GET", "/v1/agents/ag_a/turns", readOnly, ""); code != http.StatusOK {
		t.Errorf("read-only GET turns: %d", code)
	}
	// Revoked and expired tokens: 401.
	toks, err := st.ListTokens(context.Background(), "team-b")
	if err != nil || len(toks) != 1 {
		t.Fatal(toks, err)
	}
	if err := st.RevokeToken(context.Background(), toks[0].ID, time.Now().UTC()); err != nil {
		t.Fatal(err)
	}
	expired := "Bearer " + newToken(t, st, "team-a", time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	for _, auth := range []string{b, expired, "Bearer sat_" + strings.Repeat("0", 64)} {
		if code, e := call(t, ts, "GET", "/v1/agents", auth, ""); code != http.StatusUnauthorized || e.Kind != KindUnauthorized {
			t.Errorf("%.20s…: %d %+v, want 401", auth, code, e)
		}
	}
	// DELETE of a lost agent removes its record.
	if code, e := call(t, ts, "DELETE", "/v1/agents/ag_a", a, ""); code != http.StatusNoContent {
		t.Errorf("DELETE lost agent: %d %+v", code, e)
	}
	if code, _ := call(t, ts, "GET", "/v1/agents/ag_a", a, ""); code != http.StatusNotFound {
		t.Errorf("GET after DELETE: %d", code)
	}
}

func listIDs(t *testing.T, ts *httptest.Server, auth string) []string {
	t.Helper()
	req, _ := http.NewRequest("GET", ts.URL+"/v1/agents", nil)
	req.Header.Set("Authorization", auth)
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct{ Agents []agentView }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range list.Agents {
		ids = append(ids, a.ID)
	}
	return ids
}

// TestTenantAgentLimit: serve_tenant_max_agents counts the tenant's
// stored agents and answers 429 with Retry-After; the admin has no
// tenant limit.
func TestTenantAgentLimit(t *testing.T) {
	st := testStore(t)
	starts := 0
	ts := newTestServer(t, nil, func(o *Options) {
		o.Store, o.TenantMaxAgents = st, 1
		o.Start = func(context.Context, CreateRequest) (*sandboxagent.Agent, func(), error) {
			starts++
			return nil, nil, fmt.Errorf("no engine: %w", sandboxagent.ErrEngineUnavailable)
		}
	})
	storedAgent(t, st, "ag_a", "team-a")
	req, _ := http.NewRequest("POST", ts.URL+"/v1/agents", strings.NewReader(`{"driver":"pi"}`))
	req.Header.Set("Authorization", "Bearer "+newToken(t, st, "team-a", 0))
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "serve_tenant_max_agents") || starts != 0 {
		t.Errorf("over the tenant's limit: %d %s (Retry-After %q, starts %d)", resp.StatusCode, body, resp.Header.Get("Retry-After"), starts)
	}
	if code, e := call(t, ts, "POST", "/v1/agents", "Bearer "+newToken(t, st, "team-b", 0), `{"driver":"pi"}`); code != http.StatusServiceUnavailable || starts != 1 {
		t.Errorf("another tenant: %d %+v (starts %d), want the starter's 503", code, e, starts)
	}
	if code, _ := call(t, ts, "POST", "/v1/agents", "Bearer "+testToken, `{"driver":"pi"}`); code != http.StatusServiceUnavailable || starts != 2 {
		t.Errorf("the admin: %d (starts %d), want the starter's 503", code, starts)
	}
}

// TestIdempotentCreateReplay: a key that made an agent answers that agent
// again (200, Idempotent-Replayed), without starting anything; a key in
// progress is a 409; the same key on another route is a 422.
func TestIdempotentCreateReplay(t *testing.T) {
	st := testStore(t)
	starts := 0
	ts := newTestServer(t, nil, func(o *Options) {
		o.Store = st
		o.Start = func(context.Context, CreateRequest) (*sandboxagent.Agent, func(), error) {
			starts++
			return nil, nil, fmt.Errorf("no engine: %w", sandboxagent.ErrEngineUnavailable)
		}
	})
	storedAgent(t, st, "ag_a", AdminTenant)
	ctx := context.Background()
	for _, k := range []store.Idempotency{
		{Tenant: AdminTenant, Key: "k-done", Route: "create_agent", Ref: "ag_a", Created: time.Now().UTC()},
		{Tenant: AdminTenant, Key: "k-busy", Route: "create_agent", Created: time.Now().UTC()},
		{Tenant: AdminTenant, Key: "k-turn", Route: "turn:ag_a", Created: time.Now().UTC()},
	} {
		if _, _, err := st.ClaimIdempotency(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	post := func(key string) (*http.Response, []byte) {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/agents", strings.NewReader(`{"driver":"pi"}`))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Idempotency-Key", key)
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, body := post("k-done")
	if resp.StatusCode != 200 || resp.Header.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(body), `"id":"ag_a"`) {
		t.Errorf("k-done: %d %s", resp.StatusCode, body)
	}
	if resp, body = post("k-busy"); resp.StatusCode != http.StatusConflict || resp.Header.Get("Retry-After") == "" {
		t.Errorf("k-busy: %d %s", resp.StatusCode, body)
	}
	if resp, body = post("k-turn"); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("k-turn on create: %d %s", resp.StatusCode, body)
	}
	if resp, body = post("bad key"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a key with a space: %d %s", resp.StatusCode, body)
	}
	if starts != 0 {
		t.Errorf("%d starts, want none", starts)
	}
	// A failed create frees its key: the retry runs again.
	post("k-new")
	post("k-new")
	if starts != 2 {
		t.Errorf("a failed create's key: %d starts, want 2", starts)
	}
}

// TestWatchReplay: the watch stream replays the stored messages after
// Last-Event-ID, with their ids.
func TestWatchReplay(t *testing.T) {
	st := testStore(t)
	ts := newTestServer(t, nil, func(o *Options) { o.Store = st })
	storedAgent(t, st, "ag_a", AdminTenant)
	for _, tc := range []struct {
		last string
		want string
	}{{"0", "1,2,3"}, {"1", "2,3"}, {"3", ""}} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/agents/ag_a/events", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Last-Event-ID", tc.last)
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body) // ends with the timeout
		resp.Body.Close()
		cancel()
		var ids []string
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, "id: "); ok {
				ids = append(ids, v)
			}
		}
		if got := strings.Join(ids, ","); got != tc.want {
			t.Errorf("Last-Event-ID %s: ids %q, want %q\n%s", tc.last, got, tc.want, body)
		}
	}
	if code, e := call(t, ts, "GET", "/v1/agents/ag_a/turns/1", "Bearer "+testToken, ""); code != 200 {
		t.Errorf("GET turn 1: %d %+v", code, e)
	}
}
