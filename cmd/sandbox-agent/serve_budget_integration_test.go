//go:build integration

package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// A tenant's budget in serve (serve_tenant_budget_tokens): one agent of
// the tenant spends it, the tenant's second agent is refused its turn
// (402, kind budget_exceeded) before its model is asked, another tenant's
// agent still runs, and the admin has no tenant budget. The count is in
// serve's state (replicas share it: TestStoreLedgerSharesTenantBudgets).
func TestServeTenantBudget(t *testing.T) {
	testenv.Engine(t)
	state := filepath.Join(t.TempDir(), "state.db")
	tokens := map[string]string{}
	for _, tenant := range []string{"acme", "beta"} {
		code, stdout, stderr := runCLI(t, map[string]string{}, "serve", "token", "create", "--tenant", tenant, "--state", state)
		if code != exitOK {
			t.Fatalf("token for %s: exit %d: %s", tenant, code, stderr)
		}
		tokens[tenant] = strings.TrimSpace(stdout)
	}
	r := startServeWith(t, map[string]string{"SANDBOX_AGENT_STATE": state, "SANDBOX_AGENT_SERVE_TENANT_BUDGET_TOKENS": "1000"})
	as := func(tenant string) *serveProc {
		c := *r.serveProc
		if tenant != "admin" {
			c.token = tokens[tenant]
		}
		return &c
	}
	// Each agent's own fake model: the first answer uses 1,100 tokens.
	body := map[string]any{"driver": "pi", "fake_model_script": map[string]any{"responses": []map[string]any{
		{"text": "SPENT", "usage": map[string]int{"input_tokens": 900, "output_tokens": 200}},
		{"text": "MORE", "usage": map[string]int{"input_tokens": 10, "output_tokens": 1}},
	}}}
	turn := func(c *serveProc, id, prompt string) (*http.Response, []byte) {
		t.Helper()
		return c.do(t, http.MethodPost, "/v1/agents/"+id+"/turns", map[string]any{"prompt": prompt})
	}
	// A durable state keeps its agents' sandboxes when serve stops (for
	// the next serve to adopt): each is deleted before serve stops.
	create := func(c *serveProc) string {
		id := c.create(t, body)
		t.Cleanup(func() { r.do(t, http.MethodDelete, "/v1/agents/"+id, nil) })
		return id
	}
	acme := as("acme")
	first := create(acme)
	resp, out := turn(acme, first, "spend it")
	var res struct {
		Reply string
		Usage struct {
			Usage struct {
				InputTokens  int64 `json:"input_tokens"`
				OutputTokens int64 `json:"output_tokens"`
			}
		}
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(out, &res) != nil || res.Reply != "SPENT" {
		t.Fatalf("acme's first turn: %d %s\nserve stderr:\n%s", resp.StatusCode, out, r.stderr.String())
	}
	if got := res.Usage.Usage.InputTokens + res.Usage.Usage.OutputTokens; got < 1100 {
		t.Fatalf("the turn's usage: %d tokens, want at least the 1,100 the fake model served: %s", got, out)
	}
	second := create(acme)
	resp, out = turn(acme, second, "anything left?")
	wantError(t, "acme's second agent, the tenant's budget spent", resp, out, http.StatusPaymentRequired, "budget_exceeded")
	if !strings.Contains(string(out), "tenant acme") {
		t.Errorf("the refusal does not name the tenant's budget: %s", out)
	}
	for _, who := range []string{"beta", "admin"} {
		c := as(who)
		id := create(c)
		if resp, out := turn(c, id, "my own budget"); resp.StatusCode != http.StatusOK {
			t.Errorf("%s's turn: %d %s", who, resp.StatusCode, out)
		}
	}
}
