//go:build integration

package main

// The durable control plane end to end: serve in a child process on a
// SQLite state, SIGKILLed between turns and in the middle of one, then
// started again on the same state; tenants' tokens; idempotency keys.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// durableDriver is long-lived: adoption must bring its CLI back on the
// same session.
const durableDriver = "pi"

// childServe is serve running as a child process (TestMain), killable.
type childServe struct {
	*serveProc
	cmd *exec.Cmd
}

// startChildServe runs serve as a child of the test on dir's ready and
// token files, with env on top of the test's environment.
func startChildServe(t testing.TB, dir string, env ...string) *childServe {
	t.Helper()
	ready := dir + "/ready"
	_ = os.Remove(ready)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), "SANDBOX_AGENT_TEST_SERVE_CHILD="+dir, "SANDBOX_AGENT_AUDIT_ROOT="+dir+"/audit"), env...)
	var stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &childServe{cmd: cmd}
	t.Cleanup(c.kill)
	waitFor(t, 2*time.Minute, "the child serve's address", func() bool {
		b, err := os.ReadFile(ready)
		return err == nil && strings.Contains(string(b), ":")
	})
	addr, _ := os.ReadFile(ready)
	tok, _ := os.ReadFile(dir + "/token")
	c.serveProc = &serveProc{base: "http://" + strings.TrimSpace(string(addr)), token: strings.TrimSpace(string(tok)), stderr: &stderr, client: &http.Client{Timeout: 3 * time.Minute}}
	return c
}

// kill is SIGKILL: no cleanup at all.
func (c *childServe) kill() {
	if c.cmd.ProcessState == nil {
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		_ = c.cmd.Wait()
	}
}

// startGatewayModel serves a fake model with steps on the loopback, for
// serve's gateway setting: its requests stay readable across restarts of
// serve. It stops at cleanup.
func startGatewayModel(t *testing.T, steps []fakemodel.Step) *fakemodel.Server {
	t.Helper()
	fm, err := fakemodel.New(fakemodel.Script{Responses: steps}, fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := fm.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fm.Close() })
	return fm
}

// turnOf reads a turn's JSON.
type turnOf struct {
	Turn       int
	Reply      string
	SessionID  string `json:"session_id"`
	Error      string
	Kind       string
	Running    bool
	EventCount int `json:"event_count"`
	Events     []json.RawMessage
}

func TestServeDurable(t *testing.T) {
	rt := testenv.Runtime(t)
	// The model: one fake the test holds, reached through the gateway
	// setting, so its requests can be read across the server's restarts.
	fm := startGatewayModel(t, []fakemodel.Step{
		{Text: "ONE"},
		{Text: "TWO"},
		{Tool: "shell", Command: "sleep 20; echo slept"},
		{Text: "AFTER"},
		{Text: "FOUR"},
	})
	dir := t.TempDir()
	env := []string{"SANDBOX_AGENT_STATE=" + dir + "/state.db", "GATEWAY_URL=" + fm.URL(), "GATEWAY_KEY=sk-durable-test-key"}

	s := startChildServe(t, dir, env...)
	resp, out := s.do(t, http.MethodPost, "/v1/agents", map[string]any{"driver": durableDriver}, "Idempotency-Key: create-1")
	var ag struct{ ID, Container, Tenant string }
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(out, &ag) != nil {
		t.Fatalf("create: %d %s\n%s", resp.StatusCode, out, s.stderr.String())
	}
	path := "/v1/agents/" + ag.ID
	t.Cleanup(func() {
		if _, err := rt.Inspect(context.Background(), ag.Container); err == nil {
			_ = rt.Remove(context.Background(), ag.Container)
		}
	})
	// A retried create with the same key makes no second sandbox.
	resp, out = s.do(t, http.MethodPost, "/v1/agents", map[string]any{"driver": durableDriver}, "Idempotency-Key: create-1")
	var again struct{ ID string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal(out, &again) != nil || again.ID != ag.ID || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retried create: %d %s", resp.StatusCode, out)
	}

	resp, out = s.do(t, http.MethodPost, path+"/turns", map[string]any{"prompt": "remember the word PLUM"}, "Idempotency-Key: turn-1")
	var t1 turnOf
	if resp.StatusCode != 200 || json.Unmarshal(out, &t1) != nil || t1.Turn != 1 || t1.SessionID == "" {
		t.Fatalf("turn 1: %d %s", resp.StatusCode, out)
	}
	// A retried turn with the same key answers turn 1 again, no turn 2.
	resp, out = s.do(t, http.MethodPost, path+"/turns", map[string]any{"prompt": "remember the word PLUM"}, "Idempotency-Key: turn-1")
	var t1again turnOf
	if resp.StatusCode != 200 || json.Unmarshal(out, &t1again) != nil || t1again.Turn != 1 || t1again.Reply != t1.Reply {
		t.Errorf("retried turn: %d %s", resp.StatusCode, out)
	}

	// SIGKILL between turns; the restarted server has the agent, its turn
	// and its session, and the next turn continues it.
	s.kill()
	s = startChildServe(t, dir, env...)
	resp, out = s.do(t, http.MethodGet, path, nil)
	var got struct {
		Status    string
		Turns     int
		SessionID string `json:"session_id"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(out, &got) != nil || got.Status != "idle" || got.Turns != 1 || got.SessionID != t1.SessionID {
		t.Fatalf("agent after a SIGKILL: %d %s (want idle, 1 turn, session %s)\n%s", resp.StatusCode, out, t1.SessionID, s.stderr.String())
	}
	resp, out = s.do(t, http.MethodGet, path+"/turns/1", nil)
	if resp.StatusCode != 200 || !bytes.Contains(out, []byte("PLUM")) {
		t.Errorf("turn 1 after a SIGKILL: %d %.300s", resp.StatusCode, out)
	}
	before := len(fm.Requests())
	resp, out = s.do(t, http.MethodPost, path+"/turns", map[string]any{"prompt": "which word?"})
	var t2 turnOf
	if resp.StatusCode != 200 || json.Unmarshal(out, &t2) != nil || t2.Turn != 2 || t2.Reply != "TWO" {
		t.Fatalf("turn 2 after a SIGKILL: %d %s\n%s", resp.StatusCode, out, s.stderr.String())
	}
	carried := false
	for _, r := range fm.Requests()[before:] {
		if bytes.Contains(r.Body, []byte("remember the word PLUM")) && bytes.Contains(r.Body, []byte("which word?")) {
			carried = true
		}
	}
	if !carried {
		t.Errorf("turn 2's model requests do not carry turn 1: the session did not continue")
	}

	// SIGKILL in the middle of a turn (the CLI runs a 20 s command): the
	// turn is recorded as interrupted with the events seen so far, the
	// watch stream replays from Last-Event-ID, and the next turn works.
	turnDone := make(chan struct{})
	go func() {
		defer close(turnDone)
		req, _ := http.NewRequest(http.MethodPost, s.base+path+"/turns", strings.NewReader(`{"prompt":"run the slow command"}`))
		req.Header.Set("Authorization", "Bearer "+s.token)
		if resp, err := s.client.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, 2*time.Minute, "turn 3's tool call", func() bool {
		_, out := s.do(t, http.MethodGet, path+"/turns/3", nil)
		return bytes.Contains(out, []byte(`"tool_call"`))
	})
	s.kill()
	<-turnDone
	s = startChildServe(t, dir, env...)
	resp, out = s.do(t, http.MethodGet, path+"/turns/3", nil)
	var t3 turnOf
	if resp.StatusCode != 200 || json.Unmarshal(out, &t3) != nil || t3.Kind != "interrupted" || t3.Running || len(t3.Events) == 0 {
		t.Errorf("turn 3 after a SIGKILL mid-turn: %d %.500s", resp.StatusCode, out)
	}
	// Every message of the agent, replayed from id 0, in order, none lost.
	ids := watchIDs(t, s.serveProc, path, 0)
	if len(ids) < 6 {
		t.Errorf("watch from Last-Event-ID 0: ids %v", ids)
	}
	for i, id := range ids {
		if id != int64(i+1) {
			t.Fatalf("watch replay ids %v: want 1..n without a gap", ids)
		}
	}
	if tail := watchIDs(t, s.serveProc, path, ids[2]); len(tail) != len(ids)-3 || tail[0] != ids[3] {
		t.Errorf("watch from Last-Event-ID %d: %v, want %v", ids[2], tail, ids[3:])
	}
	resp, out = s.do(t, http.MethodPost, path+"/turns", map[string]any{"prompt": "and now?"})
	var t4 turnOf
	if resp.StatusCode != 200 || json.Unmarshal(out, &t4) != nil || t4.Turn != 4 || t4.Error != "" {
		t.Errorf("turn 4 after an interrupted turn: %d %s\n%s", resp.StatusCode, out, s.stderr.String())
	}

	// DELETE removes the sandbox and the record.
	resp, out = s.do(t, http.MethodDelete, path, nil)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", resp.StatusCode, out)
	}
	if _, err := rt.Inspect(context.Background(), ag.Container); !errors.Is(err, sandboxagent.ErrContainerNotFound) {
		t.Errorf("container %s after DELETE: %v", ag.Container, err)
	}
	s.kill()
	s = startChildServe(t, dir, env...)
	resp, out = s.do(t, http.MethodGet, path, nil)
	wantError(t, "a deleted agent after a restart", resp, out, 404, "not_found")
}

// watchIDs reads the agent's watch stream from Last-Event-ID after until
// it has been quiet for a second, and returns the ids it carried.
func watchIDs(t *testing.T, s *serveProc, path string, after int64) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.base+path+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", fmt.Sprint(after))
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ids []int64
	quiet := time.AfterFunc(2*time.Second, cancel)
	_ = readSSEIDs(resp.Body, func(id int64) {
		ids = append(ids, id)
		quiet.Reset(time.Second)
	})
	return ids
}
