package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/store"
)

const testKey = "sk-endpoint-test-0123456789abcdef"

// The admin-only create fields: a tenant's request is a 403 naming the
// field, invalid ones a 400, and nothing starts.
func TestCreateAdminFieldsChecked(t *testing.T) {
	st := testStore(t)
	rs := &recordingStarter{}
	_, ts := newCheckpointServer(t, st, nil, t.TempDir(), func(o *Options) { o.Start = rs.start })
	tenant := "Bearer " + newToken(t, st, "team-a", 0)
	admin := "Bearer " + testToken
	for _, tc := range []struct {
		auth, body string
		status     int
		kind, msg  string
	}{
		{tenant, `{"driver":"pi","endpoint":{"base_url":"http://127.0.0.1:9/v1","api_key":"` + testKey + `"}}`, 403, KindForbidden, "endpoint"},
		{tenant, `{"driver":"pi","audit":false}`, 403, KindForbidden, "audit"},
		{tenant, `{"driver":"pi","audit":true}`, 403, KindForbidden, "audit"},
		{tenant, `{"driver":"pi","audit_root":"/tmp/x"}`, 403, KindForbidden, "audit_root"},
		{admin, `{"driver":"pi","endpoint":{"api_key":"sk-12345678"},"fake_model_script":{"responses":[]}}`, 400, KindInvalidArgument, "fake_model_script"},
		{admin, `{"driver":"pi","endpoint":{"base_url":"ftp://h/v1"}}`, 400, KindInvalidArgument, "base_url"},
		{admin, `{"driver":"pi","endpoint":{"base_url":"/v1"}}`, 400, KindInvalidArgument, "base_url"},
		{admin, `{"driver":"pi","endpoint":{"base_url":"http://user:pass@h/v1"}}`, 400, KindInvalidArgument, "credentials"},
		{admin, `{"driver":"pi","endpoint":{"api_key":"short"}}`, 400, KindInvalidArgument, "8 characters"},
		{admin, `{"driver":"pi","endpoint":{"api_key":"a b"}}`, 400, KindInvalidArgument, "api_key"},
		{admin, `{"driver":"pi","endpoint":{"api_key":"` + strings.Repeat("k", maxAPIKeyLen+1) + `"}}`, 400, KindInvalidArgument, "api_key"},
		{admin, `{"driver":"opencode","endpoint":{"provider":"a/b"}}`, 400, KindInvalidArgument, "provider"},
		{admin, `{"driver":"pi","endpoint":{"api_key_dropped":true}}`, 400, KindInvalidArgument, "api_key_dropped"},
		{admin, `{"driver":"pi","endpoint":{"x":1}}`, 400, KindInvalidArgument, "unknown field"},
		{admin, `{"driver":"pi","audit_root":"relative/audit"}`, 400, KindInvalidArgument, "absolute"},
	} {
		code, e := call(t, ts, "POST", "/v1/agents", tc.auth, tc.body)
		if code != tc.status || e.Kind != tc.kind || !strings.Contains(e.Error, tc.msg) || strings.Contains(e.Error, testKey) || strings.Contains(e.Error, "pass") {
			t.Errorf("%s: %d %+v, want %d %s mentioning %q", tc.body, code, e, tc.status, tc.kind, tc.msg)
		}
	}
	if n := rs.calls.Load(); n != 0 {
		t.Fatalf("the refused creates started %d agents", n)
	}
	// A shared store: the key would be needed by every replica.
	ts2 := newTestServer(t, nil)
	if code, e := call(t, ts2, "POST", "/v1/agents", admin, `{"driver":"pi","endpoint":{"api_key":"`+testKey+`"}}`); code != 400 || !strings.Contains(e.Error, "shared database") {
		t.Errorf("an endpoint key on a shared store: %d %+v", code, e)
	}
}

// The admin's endpoint reaches the Starter whole, key included; the store
// keeps it without the key (api_key_dropped), the view never shows it,
// and the audit fields are kept as given.
func TestCreateEndpointKeyNotStored(t *testing.T) {
	st := testStore(t)
	rs := &recordingStarter{}
	_, ts := newCheckpointServer(t, st, nil, t.TempDir(), func(o *Options) { o.Start = rs.start })
	root := filepath.Join(t.TempDir(), "audit")
	body := `{"driver":"opencode","endpoint":{"base_url":"http://127.0.0.1:8080/v1","api_key":"` + testKey + `","provider":"local"},"audit":false,"audit_root":"` + root + `"}`
	code, out := callBody(t, ts, "POST", "/v1/agents", "Bearer "+testToken, body)
	var view agentView
	if code != http.StatusCreated || json.Unmarshal(out, &view) != nil || strings.Contains(string(out), testKey) {
		t.Fatalf("create: %d %s", code, out)
	}
	rs.mu.Lock()
	got := rs.reqs[0]
	rs.mu.Unlock()
	if ep := got.Endpoint; ep == nil || ep.APIKey != testKey || ep.BaseURL != "http://127.0.0.1:8080/v1" || ep.Provider != "local" || ep.KeyDropped {
		t.Errorf("the Starter's endpoint: %+v", got.Endpoint)
	}
	if got.Audit == nil || *got.Audit || got.AuditRoot != root {
		t.Errorf("the Starter's audit fields: %v %q", got.Audit, got.AuditRoot)
	}
	rec, err := st.GetAgent(context.Background(), view.ID)
	if err != nil {
		t.Fatal(err)
	}
	var req CreateRequest
	if err := json.Unmarshal(rec.Request, &req); err != nil || strings.Contains(string(rec.Request), testKey) {
		t.Fatalf("stored request %s: %v", rec.Request, err)
	}
	if ep := req.Endpoint; ep == nil || ep.APIKey != "" || !ep.KeyDropped || ep.BaseURL != "http://127.0.0.1:8080/v1" || ep.Provider != "local" {
		t.Errorf("stored endpoint: %+v", req.Endpoint)
	}
	if req.Audit == nil || *req.Audit || req.AuditRoot != root {
		t.Errorf("stored audit fields: %s", rec.Request)
	}
	code, out = callBody(t, ts, "GET", "/v1/agents/"+view.ID, "Bearer "+testToken, "")
	if code != 200 || strings.Contains(string(out), testKey) || strings.Contains(string(out), "endpoint") {
		t.Errorf("GET: %d %s", code, out)
	}
}

// An agent whose stored request had an endpoint key is not adopted by a
// server that does not know the key: it is lost with the reason, and the
// Adopter is never asked (it would drive it with no key, or another).
func TestAdoptEndpointKeyLost(t *testing.T) {
	st := testStore(t)
	ctx := context.Background()
	now := time.Now().UTC()
	for id, ep := range map[string]*EndpointRequest{
		"ag_key":   {BaseURL: "http://127.0.0.1:8080/v1", APIKey: testKey},
		"ag_nokey": {BaseURL: "http://127.0.0.1:8080/v1"},
	} {
		req, _ := json.Marshal(stored(CreateRequest{Driver: "pi", Endpoint: ep}))
		if err := st.CreateAgent(ctx, store.Agent{ID: id, Tenant: AdminTenant, Request: req, Driver: "pi", Status: statusIdle,
			SandboxID: "c-" + id, SandboxName: "sandbox-" + id, Adopt: json.RawMessage(`{"version":1,"turns":0,"sandbox_id":"c-` + id + `"}`), Created: now, Updated: now}); err != nil {
			t.Fatal(err)
		}
	}
	var adopted atomic.Int32
	var keyless atomic.Bool
	srv, err := New(Options{Token: testToken, Store: st, Exclusive: true,
		Start: func(context.Context, CreateRequest) (*sandboxagent.Agent, func(), error) { return nil, nil, nil },
		Adopt: func(_ context.Context, r CreateRequest, _ json.RawMessage) (*sandboxagent.Agent, func(), error) {
			adopted.Add(1)
			keyless.Store(r.Endpoint != nil && r.Endpoint.BaseURL != "" && !r.Endpoint.KeyDropped)
			return nil, nil, &sandboxagent.SandboxLostError{Name: "x", Reason: "removed by the test"}
		}})
	if err != nil {
		t.Fatal(err)
	}
	done, err := srv.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.Lost != 2 {
			t.Errorf("recovery %+v, want 2 lost", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the recovery never reported")
	}
	if n := adopted.Load(); n != 1 || !keyless.Load() {
		t.Errorf("the Adopter was asked %d times (keyless agent: %v), want once, for the agent without a key", n, keyless.Load())
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	code, out := callBody(t, ts, "GET", "/v1/agents/ag_key", "Bearer "+testToken, "")
	var v agentView
	if code != 200 || json.Unmarshal(out, &v) != nil || v.Status != statusLost || !strings.Contains(v.Reason, "api_key is never stored") {
		t.Errorf("the agent with a key after recovery: %d %s", code, out)
	}
	// Its branches' key is unknown too.
	if code, e := call(t, ts, "POST", "/v1/agents/ag_key/fork", "Bearer "+testToken, `{"count":1}`); code != http.StatusConflict && code != http.StatusGone {
		t.Errorf("fork of an agent whose key is gone: %d %+v, want 409 or 410", code, e)
	}
}

// The request's audit fields become the agent's configuration; absent,
// the server's stays.
func TestRequestAudit(t *testing.T) {
	base := sandboxagent.DefaultConfig()
	base.AuditEnabled, base.AuditRoot = true, "/srv/audit"
	off, on := false, true
	for _, tc := range []struct {
		name    string
		req     CreateRequest
		enabled bool
		root    string
	}{
		{"the server's", CreateRequest{Driver: "pi"}, true, "/srv/audit"},
		{"off", CreateRequest{Driver: "pi", Audit: &off}, false, "/srv/audit"},
		{"on", CreateRequest{Driver: "pi", Audit: &on, AuditRoot: "/tmp/a"}, true, "/tmp/a"},
		{"root", CreateRequest{Driver: "pi", AuditRoot: "/tmp/b"}, true, "/tmp/b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := requestConfig(&base, nil, tc.req)
			if err != nil || cfg.AuditEnabled != tc.enabled || cfg.AuditRoot != tc.root {
				t.Errorf("audit %v, root %q (%v); want %v, %q", cfg.AuditEnabled, cfg.AuditRoot, err, tc.enabled, tc.root)
			}
		})
	}
	if _, err := requestConfig(&base, nil, CreateRequest{Driver: "pi", AuditRoot: "rel"}); err == nil {
		t.Error("a relative audit_root was taken")
	}
}

// The rules and skills routes are agent routes: unknown agents are 404s,
// lost ones 410s, a read-only token's a 403.
func TestRulesSkillsRoutes(t *testing.T) {
	st := testStore(t)
	_, ts := newCheckpointServer(t, st, nil, t.TempDir())
	storedAgent(t, st, "ag_lost", "team-a")
	reader := "Bearer " + newToken(t, st, "team-a", 0, ScopeRead)
	for _, p := range []string{"PUT /v1/agents/{id}/rules", "POST /v1/agents/{id}/skills"} {
		method, path, _ := strings.Cut(p, " ")
		body := `{"rules":"be brief"}`
		if method == "POST" {
			body = `{"name":"x","files":{"SKILL.md":"hi"}}`
		}
		for _, tc := range []struct {
			id, auth string
			status   int
			kind     string
		}{
			{"ag_nope", "Bearer " + testToken, 404, KindNotFound},
			{"ag_lost", "Bearer " + testToken, 410, KindLost},
			{"ag_lost", reader, 403, KindForbidden},
		} {
			if code, e := call(t, ts, method, strings.Replace(path, "{id}", tc.id, 1), tc.auth, body); code != tc.status || e.Kind != tc.kind {
				t.Errorf("%s on %s: %d %+v, want %d %s", p, tc.id, code, e, tc.status, tc.kind)
			}
		}
	}
}
