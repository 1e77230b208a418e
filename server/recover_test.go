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
			SandboxID: "c-" + id, SandboxName: "sandbox-" + id, Adopt: json.RawMessage(`{"version":1,"turns":0}`), Created: now, Updated: now}); err != nil {
			t.Fatal(err)
		}
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
		states[s.Session] = s
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
	if s, ok := states["s-9"]; !ok || s.Turns != 1 {
		t.Errorf("the adopter got states %+v; want ag_1's with session s-9 and 1 turn", states)
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
