package server

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/metering"
	"github.com/sandbox-agent/sandbox-agent/store/sqlite"
)

// Two servers' tenant meters on one SQLite file (replicas on one
// database): what an agent of one spends, an agent of the other cannot
// spend again; dollars survive the round trip through billionths.
func TestStoreLedgerSharesTenantBudgets(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	prices := metering.Prices{"m": {Input: 1, Output: 2}} // per million tokens
	var tenants []*metering.Tenants
	for range 2 {
		st, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		ts, err := metering.NewTenants(metering.MeterOptions{Prices: prices, Budget: metering.Budget{Tokens: 1000},
			Period: 24 * time.Hour, Ledger: StoreLedger(st)})
		if err != nil {
			t.Fatal(err)
		}
		tenants = append(tenants, ts)
	}
	one, _ := metering.NewMeter(metering.MeterOptions{Prices: prices, Parent: tenants[0].Meter("acme")})
	two, _ := metering.NewMeter(metering.MeterOptions{Prices: prices, Parent: tenants[1].Meter("acme")})
	// A charge reaches the database in the background: Flush waits.
	one.Charge("m", metering.Usage{InputTokens: 600, OutputTokens: 100})
	if err := tenants[0].Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := two.Allow(); err != nil {
		t.Fatalf("700 of 1000 spent: %v", err)
	}
	two.Charge("m", metering.Usage{InputTokens: 300})
	if err := tenants[1].Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var be *metering.BudgetError
	if err := one.Allow(); !errors.As(err, &be) || be.Scope != "tenant acme" {
		t.Fatalf("the tenant's 1000 tokens spent across two servers: %v", err)
	}
	got := tenants[1].Meter("acme").Spent()
	if got.Usage.Tokens() != 1000 || got.Requests != 2 || math.Abs(got.CostUSD-0.0011) > 1e-12 {
		t.Errorf("shared count %+v, want 1000 tokens, 2 requests, $0.0011", got)
	}
	if err := tenants[0].Meter("other").Allow(); err != nil {
		t.Errorf("another tenant: %v", err)
	}
}

func TestNanoUSD(t *testing.T) {
	for in, want := range map[float64]int64{0: 0, 0.0011: 1_100_000, -1: 0, math.NaN(): 0, math.Inf(1): math.MaxInt64, 1e30: math.MaxInt64, 1.5e-9: 2} {
		if got := nanoUSD(in); got != want {
			t.Errorf("nanoUSD(%v) = %d, want %d", in, got, want)
		}
	}
}

// /metrics answers tokens with the metrics scope and the admin's, no
// other; a server without Metrics answers 404.
func TestMetricsRoute(t *testing.T) {
	st := testStore(t)
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "sandbox_agent_agents 0\n") })
	ts := newTestServer(t, nil, func(o *Options) { o.Store, o.Metrics = st, metrics })
	for auth, want := range map[string]int{
		"Bearer " + testToken: http.StatusOK,
		"Bearer " + newToken(t, st, "team-a", 0, ScopeMetrics): http.StatusOK,
		"Bearer " + newToken(t, st, "team-a", 0, ScopeAgents):  http.StatusForbidden,
		"Bearer " + newToken(t, st, "team-a", 0, ScopeRead):    http.StatusForbidden,
		"": http.StatusUnauthorized,
	} {
		if code, _ := call(t, ts, http.MethodGet, "/metrics", auth, ""); code != want {
			t.Errorf("GET /metrics with %.20q: %d, want %d", auth, code, want)
		}
	}
	bare := newTestServer(t, nil)
	if code, _ := call(t, bare, http.MethodGet, "/metrics", "Bearer "+testToken, ""); code != http.StatusNotFound {
		t.Errorf("without Metrics: %d, want 404", code)
	}
}
