//go:build integration && postgres

package main

// Two serve replicas on one Postgres state (SANDBOX_AGENT_TEST_POSTGRES,
// started by .ci/postgres.sh): an agent created through one is listed,
// driven and deleted through the other; a turn's lease keeps the other
// out while it runs, and frees the agent after its replica is killed.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// freshDatabase creates a database of its own on the test's Postgres and
// returns its URL; it is dropped at cleanup.
func freshDatabase(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("SANDBOX_AGENT_TEST_POSTGRES")
	if dsn == "" {
		prereq.Missing(t, "SANDBOX_AGENT_TEST_POSTGRES is not set (bash .ci/postgres.sh start prints it)")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "sa_replicas_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), dsn)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

func TestServeReplicas(t *testing.T) {
	rt := testenv.Runtime(t)
	dsn := freshDatabase(t)
	fm := startGatewayModel(t, []fakemodel.Step{
		{Text: "ONE"},
		{Text: "TWO"},
		{Text: "THREE"},
		{Tool: "shell", Command: "sleep 30; echo slept"},
		{Text: "FIVE"},
	})
	env := []string{"SANDBOX_AGENT_STATE=" + dsn, "GATEWAY_URL=" + fm.URL(), "GATEWAY_KEY=sk-replicas-test-key", "SANDBOX_AGENT_SERVE_LEASE_TTL=3s"}
	dir1, dir2 := t.TempDir(), t.TempDir()
	r1 := startChildServe(t, dir1, env...)
	// The replicas share the admin token.
	if err := os.WriteFile(dir2+"/token", []byte(r1.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r2 := startChildServe(t, dir2, env...)

	resp, out := r1.do(t, http.MethodPost, "/v1/agents", map[string]any{"driver": durableDriver})
	var ag struct{ ID, Container string }
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(out, &ag) != nil {
		t.Fatalf("create on replica 1: %d %s\n%s", resp.StatusCode, out, r1.stderr.String())
	}
	t.Cleanup(func() { _ = rt.Remove(context.Background(), ag.Container) })
	path := "/v1/agents/" + ag.ID
	turn := func(s *childServe, prompt string, want int) turnOf {
		t.Helper()
		resp, out := s.do(t, http.MethodPost, path+"/turns", map[string]any{"prompt": prompt})
		var res turnOf
		if resp.StatusCode != 200 || json.Unmarshal(out, &res) != nil || res.Turn != want || res.Error != "" {
			t.Fatalf("turn %d: %d %s\n%s", want, resp.StatusCode, out, s.stderr.String())
		}
		return res
	}
	turn(r1, "remember the word FIG", 1)
	if resp, out := r2.do(t, http.MethodGet, "/v1/agents", nil); resp.StatusCode != 200 || !bytes.Contains(out, []byte(ag.ID)) {
		t.Errorf("replica 2's list: %d %s", resp.StatusCode, out)
	}
	before := len(fm.Requests())
	turn(r2, "which word, replica two?", 2)
	carried := false
	for _, r := range fm.Requests()[before:] {
		carried = carried || bytes.Contains(r.Body, []byte("remember the word FIG")) && bytes.Contains(r.Body, []byte("which word, replica two?"))
	}
	if !carried {
		t.Errorf("turn 2 on replica 2 did not continue the session")
	}
	turn(r1, "back on replica one", 3)

	// A turn through replica 1 holds the agent's lease: replica 2 gets 409.
	go func() {
		req, _ := http.NewRequest(http.MethodPost, r1.base+path+"/turns", strings.NewReader(`{"prompt":"run the slow command"}`))
		req.Header.Set("Authorization", "Bearer "+r1.token)
		if resp, err := r1.client.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, 2*time.Minute, "turn 4's tool call", func() bool {
		_, out := r2.do(t, http.MethodGet, path+"/turns/4", nil)
		return bytes.Contains(out, []byte(`"tool_call"`))
	})
	resp, out = r2.do(t, http.MethodPost, path+"/turns", map[string]any{"prompt": "too early"})
	wantError(t, "a turn on replica 2 while replica 1 runs one", resp, out, http.StatusConflict, "busy")
	// A client on replica 2 follows turn 4's event stream to its result.
	followed := make(chan turnOf, 1)
	go func() {
		var t4 turnOf
		defer func() { followed <- t4 }()
		req, _ := http.NewRequest(http.MethodGet, r2.base+path+"/turns/4", nil)
		req.Header.Set("Authorization", "Bearer "+r2.token)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := r2.client.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		result := false
		for sc.Scan() {
			line := sc.Text()
			if line == "event: result" {
				result = true
			} else if data, ok := strings.CutPrefix(line, "data: "); ok && result {
				_ = json.Unmarshal([]byte(data), &t4)
				return
			}
		}
	}()
	// Replica 1 dies holding the lease; once it expires, replica 2 records
	// turn 4 as interrupted without being asked to drive the agent (the
	// follower's wait ends, a read shows the agent idle), and drives the
	// agent on.
	r1.kill()
	killed := time.Now()
	select {
	case t4 := <-followed:
		if t4.Kind != "interrupted" {
			t.Errorf("the follower of turn 4 got %+v, want it interrupted", t4)
		}
		t.Logf("turn 4's follower on replica 2 saw it interrupted %v after replica 1's SIGKILL", time.Since(killed).Round(100*time.Millisecond))
	case <-time.After(time.Minute):
		t.Fatalf("the follower of turn 4 on replica 2 still waits a minute after its replica died\n%s", r2.stderr.String())
	}
	if resp, out := r2.do(t, http.MethodGet, path, nil); resp.StatusCode != 200 || !bytes.Contains(out, []byte(`"status":"idle"`)) {
		t.Errorf("the agent after its turn was settled: %d %s", resp.StatusCode, out)
	}
	var t5 turnOf
	waitFor(t, time.Minute, "replica 2 to drive the agent after the lease expired", func() bool {
		resp, out := r2.do(t, http.MethodPost, path+"/turns", map[string]any{"prompt": "and now?"})
		if resp.StatusCode == http.StatusConflict {
			return false
		}
		if resp.StatusCode != 200 || json.Unmarshal(out, &t5) != nil {
			t.Fatalf("turn after the lease expired: %d %s\n%s", resp.StatusCode, out, r2.stderr.String())
		}
		return true
	})
	t.Logf("replica 2 drove the agent %v after replica 1's SIGKILL (lease 3 s)", time.Since(killed).Round(100*time.Millisecond))
	if t5.Turn != 5 {
		t.Errorf("the turn after the lease: %+v, want turn 5", t5)
	}
	resp, out = r2.do(t, http.MethodGet, path+"/turns/4", nil)
	var t4 turnOf
	if resp.StatusCode != 200 || json.Unmarshal(out, &t4) != nil || t4.Kind != "interrupted" {
		t.Errorf("turn 4 after its replica died: %d %.400s", resp.StatusCode, out)
	}
	resp, out = r2.do(t, http.MethodDelete, path, nil)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE on replica 2: %d %s", resp.StatusCode, out)
	}
	if _, err := rt.Inspect(context.Background(), ag.Container); !errors.Is(err, sandboxagent.ErrContainerNotFound) {
		t.Errorf("container %s after DELETE: %v", ag.Container, err)
	}
}
