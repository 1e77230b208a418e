package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/store"
)

// Recover records the dead server's running turn as interrupted before
// it returns, adopts in the background, answers reads from the store
// meanwhile, and a call that needs a sandbox waits for its adoption.
func TestRecoverInBackground(t *testing.T) {
	st := testStore(t)
	ctx := context.Background()
	now := time.Now().UTC()
	req, _ := json.Marshal(CreateRequest{Driver: "pi"})
	for _, id := range []string{"ag_1", "ag_2"} {
		if err := st.CreateAgent(ctx, store.Agent{ID: id, Tenant: "admin", Request: req, Driver: "pi", Status: statusIdle,
			SandboxID: "c-" + id, SandboxName: "sandbox-" + id, Adopt: json.RawMessage(`{"version":1,"turns":0,"sandbox_id":"c-` + id + `"}`), Created: now, Updated: now}); err != nil {
			t.Fatal(err)
		}
	}
	// ag_2's server died after turn 1's row was stored as done, before
	// its state was saved: the state is a turn behind the store.
	if err := st.PutTurn(ctx, store.Turn{AgentID: "ag_2", N: 1, Prompt: "p", Status: turnDone, Started: now, Ended: now, Result: json.RawMessage(`{"turn":1}`)}); err != nil {
		t.Fatal(err)
	}
	if rec, err := st.GetAgent(ctx, "ag_2"); err != nil {
		t.Fatal(err)
	} else if rec.Turns = 1; st.UpdateAgent(ctx, rec) != nil {
		t.Fatal("update ag_2")
	}
	// ag_1's first turn ran when its server died; its events name the session.
	if err := st.PutTurn(ctx, store.Turn{AgentID: "ag_1", N: 1, Prompt: "p", Status: turnRunning, Started: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.AppendEvents(ctx, []store.Event{
		{AgentID: "ag_1", Seq: 1, Turn: 1, Kind: "turn_start", Data: json.RawMessage(`{"turn":1}`), Time: now},
		{AgentID: "ag_1", Seq: 2, Turn: 1, Kind: "event", Data: json.RawMessage(`{"kind":"text","session_id":"s-9"}`), Time: now},
	}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	states := map[string]sandboxagent.AgentState{}
	adopt := func(ctx context.Context, _ CreateRequest, state json.RawMessage) (*sandboxagent.Agent, func(), error) {
		var s sandboxagent.AgentState
		_ = json.Unmarshal(state, &s)
		mu.Lock()
		states[s.SandboxID] = s
		mu.Unlock()
		return nil, nil, &sandboxagent.SandboxLostError{Name: "gone", Reason: "removed by the test"}
	}
	gate := make(chan struct{})
	srv, err := New(Options{Token: testToken, Store: st, Exclusive: true, Start: func(context.Context, CreateRequest) (*sandboxagent.Agent, func(), error) {
		return nil, nil, nil
	}, Adopt: func(ctx context.Context, r CreateRequest, state json.RawMessage) (*sandboxagent.Agent, func(), error) {
		<-gate
		return adopt(ctx, r, state)
	}})
	if err != nil {
		t.Fatal(err)
	}
	done, err := srv.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	auth := "Bearer " + testToken

	// Before any adoption ended: the turn is interrupted, the agent reads.
	if code, e := call(t, ts, "GET", "/v1/agents/ag_1", auth, ""); code != http.StatusOK {
		t.Fatalf("GET agent during recovery: %d %+v", code, e)
	}
	resp, err := ts.Client().Do(authed(t, ts, "GET", "/v1/agents/ag_1/turns/1"))
	if err != nil {
		t.Fatal(err)
	}
	var t1 struct {
		Kind      string
		SessionID string `json:"session_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&t1)
	resp.Body.Close()
	if t1.Kind != KindInterrupted || t1.SessionID != "s-9" {
		t.Errorf("turn 1 during recovery: %+v, want interrupted in s-9", t1)
	}
	// A call that needs the sandbox waits for its adoption.
	answered := make(chan int, 1)
	go func() {
		code, _ := call(t, ts, "POST", "/v1/agents/ag_2/exec", auth, `{"cmd":["true"]}`)
		answered <- code
	}()
	select {
	case code := <-answered:
		t.Fatalf("exec answered %d before the adoption ended", code)
	case <-time.After(300 * time.Millisecond):
	}
	close(gate)
	if code := <-answered; code != http.StatusGone {
		t.Errorf("exec on an agent whose sandbox is gone: %d, want 410", code)
	}
	select {
	case r := <-done:
		if r.Adopted != 0 || r.Lost != 2 || r.Err != nil {
			t.Errorf("recovery %+v, want 2 lost", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the recovery never reported")
	}
	mu.Lock()
	if s := states["c-ag_1"]; s.Session != "s-9" || s.Turns != 1 {
		t.Errorf("the adopter got ag_1's state %+v; want session s-9 and 1 turn (the interrupted one)", s)
	}
	if s := states["c-ag_2"]; s.Turns != 1 {
		t.Errorf("the adopter got ag_2's state %+v; want 1 turn (the store's)", s)
	}
	mu.Unlock()
	resp, err = ts.Client().Do(authed(t, ts, "GET", "/v1/agents/ag_1"))
	if err != nil {
		t.Fatal(err)
	}
	var v agentView
	_ = json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	if v.Status != statusLost || !strings.Contains(v.Reason, "removed by the test") {
		t.Errorf("ag_1 after recovery: %+v, want lost with the reason", v)
	}
}

func authed(t *testing.T, ts *httptest.Server, method, path string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	return req
}

// On a shared store, a turn whose replica died (the record busy, the
// lease free) is recorded as interrupted by a read, without an adoption;
// while a replica holds the lease the read changes nothing.
func TestReapDeadReplicasTurn(t *testing.T) {
	st := testStore(t)
	ctx := context.Background()
	now := time.Now().UTC()
	req, _ := json.Marshal(CreateRequest{Driver: "pi"})
	if err := st.CreateAgent(ctx, store.Agent{ID: "ag_1", Tenant: "admin", Request: req, Driver: "pi", Status: statusBusy, Turns: 2,
		SandboxID: "c-1", SandboxName: "sandbox-1", Adopt: json.RawMessage(`{"version":1,"turns":1,"session":"s-1"}`), Created: now, Updated: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutTurn(ctx, store.Turn{AgentID: "ag_1", N: 2, Prompt: "p", Status: turnRunning, Started: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireLease(ctx, "ag_1", "replica-1/x", time.Hour); err != nil {
		t.Fatal(err)
	}
	adopted := 0
	ts := newTestServer(t, nil, func(o *Options) {
		o.Store, o.LeaseTTL = st, 200*time.Millisecond
		o.Adopt = func(context.Context, CreateRequest, json.RawMessage) (*sandboxagent.Agent, func(), error) {
			adopted++
			return nil, nil, &sandboxagent.SandboxLostError{Reason: "test"}
		}
	})
	view := func() agentView {
		resp, err := ts.Client().Do(authed(t, ts, "GET", "/v1/agents/ag_1"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v agentView
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return v
	}
	if v := view(); v.Status != statusBusy {
		t.Errorf("while replica 1 holds the lease: %+v, want busy", v)
	}
	if tr, _ := st.GetTurn(ctx, "ag_1", 2); tr.Status != turnRunning {
		t.Errorf("turn 2 while its lease is held: %s", tr.Status)
	}
	// Replica 1 dies: its lease is let go (as by expiry).
	if err := st.ReleaseLease(ctx, "ag_1", "replica-1/x"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond) // past the half lease the last look waits
	if v := view(); v.Status != statusIdle || v.Turns != 2 {
		t.Errorf("after the lease: %+v, want idle with 2 turns", v)
	}
	if tr, _ := st.GetTurn(ctx, "ag_1", 2); tr.Status != turnInterrupted {
		t.Errorf("turn 2 after its replica died: %s, want interrupted", tr.Status)
	}
	rec, _ := st.GetAgent(ctx, "ag_1")
	var state sandboxagent.AgentState
	if json.Unmarshal(rec.Adopt, &state) != nil || state.Turns != 2 || state.Session != "s-1" {
		t.Errorf("the stored state after the settle: %s, want turns 2 in s-1", rec.Adopt)
	}
	if adopted != 0 {
		t.Errorf("a read adopted the sandbox %d times", adopted)
	}
	if _, err := st.AcquireLease(ctx, "ag_1", "replica-2/y", time.Second); err != nil {
		t.Errorf("the lease after the settle: %v, want free", err)
	}
}
