//go:build integration

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// serve_pool_size: the first create of a kind starts cold and makes a
// pool; the next identical create takes its ready agent (warm CLI) and
// answers; a create of another kind (another model) does not; the hits
// and misses are in /metrics; serve's stop removes the ready agent.
func TestIntegrationServePool(t *testing.T) {
	fm := startGatewayModel(t, nil) // DONE to everything
	r := startServeWith(t, map[string]string{"SANDBOX_AGENT_SERVE_POOL_SIZE": "1",
		"GATEWAY_URL": fm.URL() + "/v1", "GATEWAY_KEY": "sk-pool-test-key"})
	// metric is the value of the series name{labels…} (more labels, such
	// as engine, allowed).
	metric := func(name string, labels ...string) float64 {
		t.Helper()
		resp, out := r.do(t, http.MethodGet, "/metrics", nil)
		if resp.StatusCode != 200 {
			t.Fatalf("GET /metrics: %d %s", resp.StatusCode, out)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			series, v, ok := strings.Cut(sc.Text(), " ")
			if !ok || !strings.HasPrefix(series, name+"{") {
				continue
			}
			all := true
			for _, l := range labels {
				all = all && strings.Contains(series, l)
			}
			if all {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
		return 0
	}
	body := map[string]any{"driver": "pi", "keepalive": 600}
	r.create(t, body) // cold: the pool is made beside it
	waitFor(t, 3*time.Minute, "the pool's ready agent", func() bool {
		return metric("sandbox_agent_pool_ready", `driver="pi"`) == 1
	})
	if n := len(fm.Requests()); n != 0 {
		t.Fatalf("the model got %d requests before any turn (a warm-up reached it?)", n)
	}
	id := r.create(t, body)
	if hits := metric("sandbox_agent_pool_takes_total", `driver="pi"`, `outcome="hit"`); hits != 1 {
		t.Fatalf("pool hits %v after the second create, want 1", hits)
	}
	for i := 1; i <= 2; i++ {
		resp, out := r.do(t, http.MethodPost, "/v1/agents/"+id+"/turns", map[string]any{"prompt": "reply DONE"})
		var turn struct {
			Reply     string `json:"reply"`
			SessionID string `json:"session_id"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(out, &turn) != nil || turn.Reply != fakemodel.DoneText || turn.SessionID == "" {
			t.Fatalf("pooled agent's turn %d: %d %s", i, resp.StatusCode, out)
		}
	}
	// Another kind of request: its own (new) pool, not this one's agent.
	r.create(t, map[string]any{"driver": "pi", "keepalive": 600, "model": "other-model"})
	if hits := metric("sandbox_agent_pool_takes_total", `driver="pi"`, `outcome="hit"`); hits != 1 {
		t.Errorf("pool hits %v after a create of another model, want still 1", hits)
	}
	waitFor(t, 3*time.Minute, "the pool to refill and the other kind's pool", func() bool {
		return metric("sandbox_agent_pool_ready", `driver="pi"`) == 2
	})
	// This process's sandboxes: 3 handed out, 2 ready; none after the stop.
	rt := testenv.Runtime(t)
	mine := map[string]string{sandboxagent.LabelManaged: "true", sandboxagent.LabelPID: strconv.Itoa(os.Getpid())}
	if got, err := rt.List(context.Background(), mine); err != nil || len(got) != 5 {
		t.Errorf("sandboxes before the stop: %d %v, want 5 (3 agents, 2 ready in pools)", len(got), err)
	}
	if code := r.stop(t); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, r.stderr.String())
	}
	if got, err := rt.List(context.Background(), mine); err != nil || len(got) != 0 {
		t.Errorf("sandboxes after the stop: %d %v, want none", len(got), err)
	}
}
