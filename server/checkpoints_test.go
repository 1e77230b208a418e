package server

// Checkpoint routes without an engine: the checkpoints are records put in
// the store (and a fake engine's images, an archive folder), agents are
// lost ones or a starter's nil agents. Making a checkpoint of a live agent
// needs a sandbox: TestServeCheckpoint (cmd/sandbox-agent) covers it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint/checkpointtest"
	"github.com/sandbox-agent/sandbox-agent/store"
)

// testCheckpoint is a committed checkpoint of a pi agent.
func testCheckpoint(id string, size int64) sandboxagent.Checkpoint {
	return sandboxagent.Checkpoint{
		ID: id, Name: "before the refactor", Created: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC), Parent: "sandbox-agent-x",
		Owner: "serve-test", Driver: "pi", Model: "glm", BaseImage: "sandbox-agent/pi:1", Image: sandboxagent.CheckpointRepo + ":" + id,
		Size: size, Session: "sess-1", WorkDir: "/home/agent/work", Egress: sandboxagent.EgressModel, MemoryBytes: 1 << 30,
	}
}

func putCheckpoint(t *testing.T, st store.Store, tenant string, c sandboxagent.Checkpoint) {
	t.Helper()
	data, _ := json.Marshal(c)
	if err := st.PutCheckpoint(context.Background(), store.Checkpoint{ID: c.ID, Tenant: tenant, AgentID: "ag_" + c.ID[3:], Created: c.Created, Size: c.Size, Data: data}); err != nil {
		t.Fatal(err)
	}
}

// newCheckpointServer is a Server on st with the fake engine and an
// archive root, and its test HTTP server.
func newCheckpointServer(t *testing.T, st store.Store, eng *checkpointtest.Engine, root string, opts ...func(*Options)) (*Server, *httptest.Server) {
	t.Helper()
	o := Options{Token: testToken, Store: st, Checkpoints: eng, CheckpointRoot: root, Exclusive: true,
		Start: func(context.Context, CreateRequest) (*sandboxagent.Agent, func(), error) {
			return nil, nil, fmt.Errorf("no engine: %w", sandboxagent.ErrEngineUnavailable)
		}}
	for _, f := range opts {
		f(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts
}

// callBody is call with the body as it came.
func callBody(t *testing.T, ts *httptest.Server, method, path, auth, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", auth)
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func checkpointIDs(t *testing.T, ts *httptest.Server, auth string) []string {
	t.Helper()
	code, body := callBody(t, ts, "GET", "/v1/checkpoints", auth, "")
	var list struct{ Checkpoints []checkpointView }
	if code != 200 || json.Unmarshal(body, &list) != nil {
		t.Fatalf("GET /v1/checkpoints: %d %s", code, body)
	}
	ids := []string{}
	for _, c := range list.Checkpoints {
		ids = append(ids, c.ID)
	}
	return ids
}

// TestCheckpointRoutes: list, get and delete, per tenant; a checkpoint in
// use is a 409; views show no host path.
func TestCheckpointRoutes(t *testing.T) {
	st := testStore(t)
	eng := &checkpointtest.Engine{}
	root := t.TempDir()
	_, ts := newCheckpointServer(t, st, eng, root)
	a := "Bearer " + newToken(t, st, "team-a", 0)
	b := "Bearer " + newToken(t, st, "team-b", 0)
	readOnly := "Bearer " + newToken(t, st, "team-a", 0, ScopeRead)
	metrics := "Bearer " + newToken(t, st, "team-a", 0, ScopeMetrics)
	admin := "Bearer " + testToken

	a1, b1 := eng.Commit(t, testCheckpoint("ck-a1", 100)), eng.Commit(t, testCheckpoint("ck-b1", 200))
	archived := testCheckpoint("ck-a2", 300)
	archived.Image, archived.Archive = "", filepath.Join(root, "ck-a2")
	if err := os.MkdirAll(filepath.Join(archived.Archive, "files"), 0o700); err != nil {
		t.Fatal(err)
	}
	putCheckpoint(t, st, "team-a", a1)
	putCheckpoint(t, st, "team-b", b1)
	putCheckpoint(t, st, "team-a", archived)

	for _, tc := range []struct {
		auth string
		want []string
	}{{a, []string{"ck-a1", "ck-a2"}}, {readOnly, []string{"ck-a1", "ck-a2"}}, {b, []string{"ck-b1"}}, {admin, []string{"ck-a1", "ck-b1", "ck-a2"}}} {
		if got := checkpointIDs(t, ts, tc.auth); !slices.Equal(got, tc.want) {
			t.Errorf("list: %v, want %v", got, tc.want)
		}
	}
	code, body := callBody(t, ts, "GET", "/v1/checkpoints/ck-a2", a, "")
	var v map[string]any
	if code != 200 || json.Unmarshal(body, &v) != nil || v["id"] != "ck-a2" || v["tenant"] != "team-a" || v["agent"] != "ag_a2" || v["driver"] != "pi" ||
		v["egress"] != "model" || v["size"] != 300.0 || v["session"] != "sess-1" || v["workdir"] != "/home/agent/work" || v["base_image"] != "sandbox-agent/pi:1" {
		t.Errorf("GET an archived checkpoint: %d %s", code, body)
	}
	if _, ok := v["image"]; ok || strings.Contains(string(body), root) || strings.Contains(string(body), "archive") {
		t.Errorf("an archived checkpoint's view shows an image or its host folder: %s", body)
	}
	if code, body = callBody(t, ts, "GET", "/v1/checkpoints/ck-a1", readOnly, ""); code != 200 || !strings.Contains(string(body), `"image":"sandbox-agent-checkpoint:ck-a1"`) {
		t.Errorf("GET a committed checkpoint: %d %s", code, body)
	}

	// Another tenant's: 404 on every route, as a missing one.
	for _, p := range []string{"GET /v1/checkpoints/ck-b1", "DELETE /v1/checkpoints/ck-b1", "GET /v1/checkpoints/ck-nope", "DELETE /v1/checkpoints/ck-nope"} {
		method, path, _ := strings.Cut(p, " ")
		if code, e := call(t, ts, method, path, a, ""); code != http.StatusNotFound || e.Kind != KindNotFound {
			t.Errorf("team-a %s: %d %+v, want 404", p, code, e)
		}
	}
	// Scopes.
	if code, e := call(t, ts, "DELETE", "/v1/checkpoints/ck-a1", readOnly, ""); code != http.StatusForbidden || e.Kind != KindForbidden {
		t.Errorf("read-only DELETE: %d %+v", code, e)
	}
	if code, e := call(t, ts, "GET", "/v1/checkpoints", metrics, ""); code != http.StatusForbidden {
		t.Errorf("metrics GET /v1/checkpoints: %d %+v", code, e)
	}
	if code, _ := call(t, ts, "GET", "/v1/checkpoints", "", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/checkpoints without a token: %d", code)
	}
	if eng.WasRemoved(b1.Image) || eng.WasRemoved(a1.Image) {
		t.Fatalf("images removed by refused requests: %v", eng.Removed())
	}

	// In use: 409, kept.
	eng.SetInUse(a1.Image, true)
	if code, e := call(t, ts, "DELETE", "/v1/checkpoints/ck-a1", a, ""); code != http.StatusConflict || e.Kind != KindConflict ||
		!strings.Contains(e.Error, "an agent still runs on this checkpoint") || strings.Contains(e.Error, "sandbox-agent-4242") {
		t.Errorf("DELETE in use: %d %+v, want 409 conflict, without the engine's words", code, e)
	}
	if code, _ := call(t, ts, "GET", "/v1/checkpoints/ck-a1", a, ""); code != 200 {
		t.Errorf("a checkpoint in use after DELETE: %d", code)
	}
	eng.SetInUse(a1.Image, false)
	for _, id := range []string{"ck-a1", "ck-a2"} {
		if code, e := call(t, ts, "DELETE", "/v1/checkpoints/"+id, a, ""); code != http.StatusNoContent {
			t.Errorf("DELETE %s: %d %+v", id, code, e)
		}
		if code, _ := call(t, ts, "GET", "/v1/checkpoints/"+id, a, ""); code != http.StatusNotFound {
			t.Errorf("GET %s after DELETE: %d", id, code)
		}
	}
	if !eng.WasRemoved(a1.Image) {
		t.Errorf("DELETE did not remove the image: %v", eng.Removed())
	}
	if _, err := os.Lstat(archived.Archive); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("DELETE left the archive: %v", err)
	}
	// The admin deletes anyone's.
	if code, e := call(t, ts, "DELETE", "/v1/checkpoints/ck-b1", admin, ""); code != http.StatusNoContent || !eng.WasRemoved(b1.Image) {
		t.Errorf("admin DELETE: %d %+v", code, e)
	}
}

// TestCheckpointRequests: what the checkpoint and fork routes check
// before they need the sandbox (a lost agent's: 410 past the checks).
func TestCheckpointRequests(t *testing.T) {
	st := testStore(t)
	s, ts := newCheckpointServer(t, st, &checkpointtest.Engine{}, t.TempDir(), func(o *Options) { o.MaxAgents = 3 })
	storedAgent(t, st, "ag_a", "team-a")
	a := "Bearer " + newToken(t, st, "team-a", 0)
	b := "Bearer " + newToken(t, st, "team-b", 0)
	for _, tc := range []struct {
		path, body string
		status     int
		kind       string
	}{
		{"fork", `{"count":0}`, 400, KindInvalidArgument},
		{"fork", `{"count":17}`, 400, KindInvalidArgument},
		{"fork", `{"count":-1}`, 400, KindInvalidArgument},
		{"fork", `{"count":"2"}`, 400, KindInvalidArgument},
		{"fork", `{"n":2}`, 400, KindInvalidArgument},
		{"fork", `{"count":3}`, 429, KindLimit}, // 1 stored + 3 > serve_max_agents 3: before any checkpoint
		{"fork", ``, 410, KindLost},
		{"fork", `{"count":2}`, 410, KindLost},
		{"fork", `{"count":16}`, 429, KindLimit},
		{"checkpoints", ``, 410, KindLost},
		{"checkpoints", `{"name":"x"}`, 410, KindLost},
		{"checkpoints", `{"name":"` + strings.Repeat("n", 257) + `"}`, 400, KindInvalidArgument},
		{"checkpoints", `{"name":"a\nb"}`, 400, KindInvalidArgument},
		{"checkpoints", `{"tag":"x"}`, 400, KindInvalidArgument},
	} {
		if code, e := call(t, ts, "POST", "/v1/agents/ag_a/"+tc.path, a, tc.body); code != tc.status || e.Kind != tc.kind {
			t.Errorf("POST %s %s: %d %+v, want %d %s", tc.path, tc.body, code, e, tc.status, tc.kind)
		}
		if code, e := call(t, ts, "POST", "/v1/agents/ag_a/"+tc.path, b, tc.body); code != 404 && code != 400 {
			t.Errorf("team-b POST %s %s: %d %+v, want 404 (or the body's 400)", tc.path, tc.body, code, e)
		}
	}
	s.mu.Lock()
	starting := s.starting + len(s.startingBy)
	s.mu.Unlock()
	if starting != 0 {
		t.Errorf("the forks that failed are still counted as starting: %d", starting)
	}
}

// recordingStarter records the requests it gets; fail says which call (1
// first) fails. The others "start" a nil agent (no engine here), whose
// stop is counted.
type recordingStarter struct {
	mu    sync.Mutex
	reqs  []CreateRequest
	calls atomic.Int32
	stops atomic.Int32
	fail  int32
}

func (r *recordingStarter) start(ctx context.Context, req CreateRequest) (*sandboxagent.Agent, func(), error) {
	n := r.calls.Add(1)
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	if n == r.fail {
		time.Sleep(50 * time.Millisecond) // after the others started
		return nil, nil, &sandboxagent.DriverError{Driver: req.Driver, Message: "the CLI did not start"}
	}
	return nil, func() { r.stops.Add(1) }, nil
}

// TestCreateFromCheckpoint: a create naming a checkpoint starts on it (the
// Starter gets it in From), only on the tenant's own, only with its
// driver; the server's restart keeps the checkpoints.
func TestCreateFromCheckpoint(t *testing.T) {
	st := testStore(t)
	rs := &recordingStarter{}
	eng := &checkpointtest.Engine{}
	_, ts := newCheckpointServer(t, st, eng, t.TempDir(), func(o *Options) { o.Start = rs.start })
	a := "Bearer " + newToken(t, st, "team-a", 0)
	b := "Bearer " + newToken(t, st, "team-b", 0)
	c := testCheckpoint("ck-a1", 100)
	putCheckpoint(t, st, "team-a", c)
	for _, tc := range []struct {
		auth, body string
		status     int
		kind       string
	}{
		{b, `{"driver":"pi","checkpoint":"ck-a1"}`, 404, KindNotFound},
		{a, `{"driver":"pi","checkpoint":"ck-nope"}`, 404, KindNotFound},
		{a, `{"driver":"codex","checkpoint":"ck-a1"}`, 400, KindInvalidArgument},
		{a, `{"driver":"pi","checkpoint":"ck-a1","image":"other:1"}`, 400, KindInvalidArgument},
	} {
		if code, e := call(t, ts, "POST", "/v1/agents", tc.auth, tc.body); code != tc.status || e.Kind != tc.kind || strings.Contains(e.Error, "team-a") {
			t.Errorf("%s: %d %+v, want %d %s", tc.body, code, e, tc.status, tc.kind)
		}
	}
	if n := rs.calls.Load(); n != 0 {
		t.Fatalf("the refused creates started %d agents", n)
	}

	// A new server on the same store (a restart) has the checkpoint and
	// starts on it.
	_, ts2 := newCheckpointServer(t, st, eng, t.TempDir(), func(o *Options) { o.Start = rs.start })
	if got := checkpointIDs(t, ts2, a); !slices.Equal(got, []string{"ck-a1"}) {
		t.Errorf("after a restart: %v", got)
	}
	for _, auth := range []string{a, "Bearer " + testToken} {
		code, body := callBody(t, ts2, "POST", "/v1/agents", auth, `{"driver":"pi","checkpoint":"ck-a1","env":{"K":"secret"}}`)
		var view agentView
		if code != http.StatusCreated || json.Unmarshal(body, &view) != nil {
			t.Fatalf("create on the checkpoint: %d %s", code, body)
		}
		rec, err := st.GetAgent(context.Background(), view.ID)
		if err != nil || !strings.Contains(string(rec.Request), `"checkpoint":"ck-a1"`) || strings.Contains(string(rec.Request), "secret") {
			t.Errorf("the stored agent: %s %v", rec.Request, err)
		}
		// No model asked: the checkpoint's, in the record and the view.
		if rec.Model != c.Model || view.Model != c.Model {
			t.Errorf("the model of an agent started on a checkpoint: stored %q, view %q, want %q", rec.Model, view.Model, c.Model)
		}
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rs.reqs) != 2 {
		t.Fatalf("%d starts, want 2", len(rs.reqs))
	}
	for _, req := range rs.reqs {
		if req.From == nil || req.From.ID != "ck-a1" || req.From.Image != c.Image || req.From.Session != "sess-1" || req.Checkpoint != "ck-a1" || req.Env["K"] != "secret" || req.Model != c.Model {
			t.Errorf("the Starter's request: %+v (From %+v)", req, req.From)
		}
	}
	if rs.reqs[0].Tenant != "team-a" || rs.reqs[1].Tenant != AdminTenant {
		t.Errorf("tenants %q %q", rs.reqs[0].Tenant, rs.reqs[1].Tenant)
	}
}

// TestForkAllOrNone: a fork whose second branch fails leaves no branch
// and no checkpoint; one that starts them all keeps them and the
// checkpoint.
func TestForkAllOrNone(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	eng := &checkpointtest.Engine{}
	rs := &recordingStarter{fail: 2}
	s, _ := newCheckpointServer(t, st, eng, t.TempDir(), func(o *Options) { o.Start = rs.start })
	parent := CreateRequest{Driver: "pi", Model: "glm", Egress: "model", Memory: "1g", Env: map[string]string{"K": "secret"}, Tenant: "team-a", Image: "sandbox-agent/pi:1"}
	c := eng.Commit(t, testCheckpoint("ck-f1", 100))
	if _, err := s.keepCheckpoint(ctx, "team-a", "ag_parent", c); err != nil {
		t.Fatal(err)
	}
	ad, err := s.admit(ctx, "team-a", 3)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.forkFrom(ctx, ad, parent, c, 3)
	ad.release()
	var de *sandboxagent.DriverError
	if !errors.As(err, &de) {
		t.Fatalf("a fork with a failing branch: %v, want the branch's DriverError", err)
	}
	if all, _ := st.ListAgents(ctx, ""); len(all) != 0 {
		t.Errorf("branches left: %d", len(all))
	}
	if rs.calls.Load() != 3 || rs.stops.Load() != 2 {
		t.Errorf("%d starts, %d stops: want 3 and the 2 started stopped", rs.calls.Load(), rs.stops.Load())
	}
	if _, err := st.Checkpoint(ctx, c.ID); !errors.Is(err, store.ErrNotFound) || !eng.WasRemoved(c.Image) {
		t.Errorf("the checkpoint after a failed fork: %v, image removed %v", err, eng.WasRemoved(c.Image))
	}
	s.mu.Lock()
	left := s.starting + len(s.startingBy) + len(s.requests) + len(s.agents)
	s.mu.Unlock()
	if left != 0 {
		t.Errorf("a failed fork left counts or agents on the server: %d", left)
	}
	for _, req := range rs.reqs {
		if req.From == nil || req.From.ID != c.ID || req.Checkpoint != c.ID || req.Image != "" || req.Env["K"] != "secret" || req.Memory != "1g" || req.Tenant != "team-a" {
			t.Errorf("a branch's request: %+v", req)
		}
	}

	// All start: kept, with the checkpoint.
	rs2 := &recordingStarter{}
	s.opts.Start = rs2.start
	c2 := eng.Commit(t, testCheckpoint("ck-f2", 100))
	if _, err := s.keepCheckpoint(ctx, "team-a", "ag_parent", c2); err != nil {
		t.Fatal(err)
	}
	ad, err = s.admit(ctx, "team-a", 2)
	if err != nil {
		t.Fatal(err)
	}
	views, err := s.forkFrom(ctx, ad, parent, c2, 2)
	ad.release()
	if err != nil || len(views) != 2 || views[0].Tenant != "team-a" || views[0].ID == views[1].ID {
		t.Fatalf("fork: %+v %v", views, err)
	}
	if all, _ := st.ListAgents(ctx, "team-a"); len(all) != 2 || !strings.Contains(string(all[0].Request), `"checkpoint":"ck-f2"`) {
		t.Errorf("branches stored: %+v", all)
	}
	if _, err := st.Checkpoint(ctx, c2.ID); err != nil || eng.WasRemoved(c2.Image) {
		t.Errorf("the checkpoint of a fork: %v", err)
	}
	// A branch forks with its request, env included, as it was started here.
	if req, err := s.branchRequest(store.Agent{ID: views[0].ID, Tenant: "team-a"}); err != nil || req.Env["K"] != "secret" || req.Memory != "1g" {
		t.Errorf("a branch's own request: %+v %v", req, err)
	}
}

// TestBranchRequest: an agent started here forks with its env; one known
// only from the store (a restart) forks with its stored request when it
// had no env, and is a 409 conflict when it had (its values are not
// stored: the branches' environment is unknown).
func TestBranchRequest(t *testing.T) {
	s, _ := newCheckpointServer(t, testStore(t), &checkpointtest.Engine{}, t.TempDir())
	full := CreateRequest{Driver: "pi", Model: "glm", Egress: "none", Env: map[string]string{"K": "secret"}, Pids: 50}
	noEnv := full
	noEnv.Env = nil
	s.requests["ag_here"] = full
	for _, tc := range []struct {
		id     string
		stored CreateRequest
		env    string // the branches' K
		kind   string // of the error
	}{
		{"ag_here", full, "secret", ""},
		{"ag_stored_env", full, "", KindConflict},
		{"ag_stored_no_env", noEnv, "", ""},
	} {
		storedReq, _ := json.Marshal(stored(tc.stored))
		got, err := s.branchRequest(store.Agent{ID: tc.id, Tenant: "team-a", Request: storedReq})
		if tc.kind != "" {
			var ae *apiError
			if !errors.As(err, &ae) || ae.kind != tc.kind || ae.status != http.StatusConflict || strings.Contains(ae.msg, "secret") {
				t.Errorf("%s: %+v %v, want a 409 %s", tc.id, got, err, tc.kind)
			}
			continue
		}
		if err != nil || got.Env["K"] != tc.env || got.Egress != "none" || got.Model != "glm" || got.Pids != 50 || got.Tenant != "team-a" {
			t.Errorf("%s: %+v %v", tc.id, got, err)
		}
	}
}

// TestTenantCheckpointBytes: a checkpoint that takes its tenant past
// TenantCheckpointBytes is removed and answers 429; other tenants and the
// admin are not counted with it.
func TestTenantCheckpointBytes(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	eng := &checkpointtest.Engine{}
	s, ts := newCheckpointServer(t, st, eng, t.TempDir(), func(o *Options) { o.TenantCheckpointBytes = 250 })
	for _, c := range []sandboxagent.Checkpoint{eng.Commit(t, testCheckpoint("ck-01", 100)), eng.Commit(t, testCheckpoint("ck-02", 150))} {
		if _, err := s.keepCheckpoint(ctx, "team-a", "ag_1", c); err != nil {
			t.Fatalf("%s: %v", c.ID, err)
		}
	}
	over := eng.Commit(t, testCheckpoint("ck-03", 1))
	_, err := s.keepCheckpoint(ctx, "team-a", "ag_1", over)
	var ae *apiError
	if !errors.As(err, &ae) || ae.status != http.StatusTooManyRequests || ae.kind != KindLimit || !strings.Contains(ae.msg, "serve_tenant_checkpoint_bytes") || ae.retryAfter != 60 {
		t.Fatalf("past the cap: %v, want 429 limit with Retry-After 60", err)
	}
	if _, err := st.Checkpoint(ctx, over.ID); !errors.Is(err, store.ErrNotFound) || !eng.WasRemoved(over.Image) {
		t.Errorf("the checkpoint past the cap: %v, removed %v", err, eng.WasRemoved(over.Image))
	}
	if _, err := s.keepCheckpoint(ctx, "team-b", "ag_2", testCheckpoint("ck-04", 250)); err != nil {
		t.Errorf("another tenant: %v", err)
	}
	if _, err := s.keepCheckpoint(ctx, AdminTenant, "ag_3", testCheckpoint("ck-05", 1000)); err != nil {
		t.Errorf("the admin: %v", err)
	}
	// Deleting one makes room.
	if code, e := call(t, ts, "DELETE", "/v1/checkpoints/ck-02", "Bearer "+testToken, ""); code != http.StatusNoContent {
		t.Fatalf("DELETE: %d %+v", code, e)
	}
	if _, err := s.keepCheckpoint(ctx, "team-a", "ag_1", testCheckpoint("ck-06", 150)); err != nil {
		t.Errorf("after a DELETE: %v", err)
	}
}

// TestForkModel: a branch of a parent that named no model runs the
// checkpoint's, and its record says so.
func TestForkModel(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	rs := &recordingStarter{}
	s, _ := newCheckpointServer(t, st, &checkpointtest.Engine{}, t.TempDir(), func(o *Options) { o.Start = rs.start })
	c := testCheckpoint("ck-0f", 10)
	if _, err := s.keepCheckpoint(ctx, "team-a", "ag_parent", c); err != nil {
		t.Fatal(err)
	}
	ad, err := s.admit(ctx, "team-a", 1)
	if err != nil {
		t.Fatal(err)
	}
	views, err := s.forkFrom(ctx, ad, CreateRequest{Driver: "pi", Tenant: "team-a"}, c, 1)
	ad.release()
	if err != nil || len(views) != 1 || views[0].Model != c.Model {
		t.Fatalf("fork: %+v %v, want a branch of model %q", views, err, c.Model)
	}
	if rec, err := st.GetAgent(ctx, views[0].ID); err != nil || rec.Model != c.Model || len(rs.reqs) != 1 || rs.reqs[0].Model != c.Model {
		t.Errorf("the branch's record %+v %v, request %+v", rec, err, rs.reqs)
	}
}

// TestCreateImageNotACheckpoint: a create's image cannot name a
// checkpoint's image (another tenant's, maybe) nor an image id or digest:
// 400, nothing started; other images go to the Starter.
func TestCreateImageNotACheckpoint(t *testing.T) {
	hex64 := strings.Repeat("0a", 32)
	for _, tc := range []struct {
		ref  string
		want bool
	}{
		{"sandbox-agent-checkpoint:ck-0123", true},
		{"sandbox-agent-checkpoint", true},
		{"docker.io/library/sandbox-agent-checkpoint:ck-0123", true},
		{"docker.io/sandbox-agent-checkpoint:ck-0123", true},
		{"index.docker.io/library/sandbox-agent-checkpoint:ck-1", true},
		{"library/sandbox-agent-checkpoint:ck-1", true},
		{"localhost/sandbox-agent-checkpoint:ck-1", true},
		{"Sandbox-Agent-Checkpoint:CK-1", true},
		{" sandbox-agent-checkpoint:ck-1", true},
		{"sandbox-agent-checkpoint@sha256:" + hex64, true},
		{"sha256:" + hex64, true},
		{"SHA256:" + hex64[:12], true},
		{hex64, true},
		{hex64[:12], true},
		{"sandbox-agent/pi:1", false},
		{"registry.example.com/sandbox-agent-checkpoint:ck-1", false},
		{"localhost:5000/sandbox-agent-checkpoint:ck-1", false},
		{"team/sandbox-agent-checkpoint:1", false},
		{"sandbox-agent-checkpoint-old:1", false},
		{"cafe:1", false},
		{"ghcr.io/x/y@sha256:" + hex64, false},
	} {
		if got := namesCheckpointImage(tc.ref); got != tc.want {
			t.Errorf("namesCheckpointImage(%q) = %v, want %v", tc.ref, got, tc.want)
		}
	}

	st := testStore(t)
	rs := &recordingStarter{}
	_, ts := newCheckpointServer(t, st, &checkpointtest.Engine{}, t.TempDir(), func(o *Options) { o.Start = rs.start })
	putCheckpoint(t, st, "team-b", testCheckpoint("ck-b1", 100))
	a := "Bearer " + newToken(t, st, "team-a", 0)
	for _, img := range []string{"sandbox-agent-checkpoint:ck-b1", "docker.io/library/sandbox-agent-checkpoint:ck-b1", "localhost/sandbox-agent-checkpoint:ck-b1", "sha256:" + hex64} {
		if code, e := call(t, ts, "POST", "/v1/agents", a, `{"driver":"pi","image":"`+img+`"}`); code != http.StatusBadRequest || e.Kind != KindInvalidArgument || !strings.Contains(e.Error, "checkpoint field") {
			t.Errorf("image %s: %d %+v, want 400 invalid_argument", img, code, e)
		}
	}
	if n := rs.calls.Load(); n != 0 {
		t.Fatalf("the refused creates started %d agents", n)
	}
	if code, e := call(t, ts, "POST", "/v1/agents", a, `{"driver":"pi","image":"sandbox-agent/pi:1"}`); code != http.StatusCreated || rs.calls.Load() != 1 {
		t.Errorf("another image: %d %+v, %d starts", code, e, rs.calls.Load())
	}
}

// TestReconcileCheckpoints: the checkpoints of this server's instance
// without a record, older than orphanAge, are removed (images and
// archives); those with a record, younger, another owner's or in use are
// kept. Recover runs it in the background; Close ends it.
func TestReconcileCheckpoints(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	eng := &checkpointtest.Engine{}
	root := t.TempDir()
	const me = "serve-test"
	s, _ := newCheckpointServer(t, st, eng, root, func(o *Options) { o.Instance = me })
	// The checkpoints' parent (testCheckpoint's) is an agent of this
	// store's; a sandbox it never had is another server's.
	now := time.Now().UTC()
	req, _ := json.Marshal(CreateRequest{Driver: "pi"})
	if err := st.CreateAgent(ctx, store.Agent{ID: "ag_parent", Tenant: "team-a", Request: req, Driver: "pi", Status: statusLost,
		Reason: "test", SandboxName: "sandbox-agent-x", Created: now, Updated: now}); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	young := time.Now().Add(-5 * time.Minute).UTC().Truncate(time.Second)
	type ckCase struct {
		name                  string
		id, owner             string
		created               time.Time
		archive, stored, used bool
		removed               bool
		parent                string // "": testCheckpoint's
	}
	make := func(tc ckCase) sandboxagent.Checkpoint {
		c := testCheckpoint(tc.id, 10)
		c.Owner, c.Created = tc.owner, tc.created
		if tc.parent != "" {
			c.Parent = tc.parent
		}
		if tc.archive {
			c = checkpointtest.WriteArchive(t, root, c)
		} else {
			c = eng.Commit(t, c)
		}
		if tc.stored {
			putCheckpoint(t, st, "team-a", c)
		}
		if tc.used {
			eng.SetInUse(c.Image, true)
		}
		return c
	}
	cases := []ckCase{
		{name: "an image without its record", id: "ck-01", owner: me, created: old, removed: true},
		{name: "an image with its record", id: "ck-02", owner: me, created: old, stored: true},
		{name: "a young image without its record", id: "ck-03", owner: me, created: young},
		{name: "another server's image", id: "ck-04", owner: "serve-other", created: old},
		{name: "an image of no server (the CLI's)", id: "ck-05", owner: "", created: old},
		{name: "an image in use", id: "ck-06", owner: me, created: old, used: true},
		{name: "an archive without its record", id: "ck-07", owner: me, created: old, archive: true, removed: true},
		{name: "an archive with its record", id: "ck-08", owner: me, created: old, archive: true, stored: true},
		{name: "another server's archive", id: "ck-09", owner: "serve-other", created: old, archive: true},
		{name: "same instance name, another store's sandbox", id: "ck-0a", owner: me, created: old, parent: "sandbox-agent-elsewhere"},
	}
	cks := map[string]sandboxagent.Checkpoint{}
	for _, tc := range cases {
		cks[tc.id] = make(tc)
	}
	removed, err := s.reconcileCheckpoints(ctx)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	slices.Sort(removed)
	if want := []string{"ck-01", "ck-07"}; !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	for _, tc := range cases {
		c := cks[tc.id]
		gone := eng.WasRemoved(c.Image)
		if tc.archive {
			_, err := os.Lstat(c.Archive)
			gone = errors.Is(err, os.ErrNotExist)
		}
		if gone != tc.removed {
			t.Errorf("%s: removed %v, want %v", tc.name, gone, tc.removed)
		}
	}

	// Recover runs it at once (on a shared store too), in the background.
	eng.Commit(t, func() sandboxagent.Checkpoint {
		c := testCheckpoint("ck-10", 10)
		c.Owner, c.Created = me, old
		return c
	}())
	s2, _ := newCheckpointServer(t, st, eng, root, func(o *Options) { o.Instance, o.Exclusive = me, false })
	if _, err := s2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !eng.WasRemoved(sandboxagent.CheckpointRepo + ":ck-10"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Recover did not reconcile the checkpoints")
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s2.Close(cctx); err != nil {
		t.Errorf("Close with the housekeeping running: %v", err)
	}
}

// TestCorruptCheckpointRecord: a record whose JSON does not match its row
// (id), or names an image or a folder that is not its own, is not
// trusted: a 500 that names nothing of it on GET, DELETE and create (and
// nothing removed); left out of lists.
func TestCorruptCheckpointRecord(t *testing.T) {
	st := testStore(t)
	eng := &checkpointtest.Engine{}
	root := t.TempDir()
	rs := &recordingStarter{}
	_, ts := newCheckpointServer(t, st, eng, root, func(o *Options) { o.Start = rs.start })
	a := "Bearer " + newToken(t, st, "team-a", 0)
	put := func(id string, data any) {
		t.Helper()
		b, _ := json.Marshal(data)
		if err := st.PutCheckpoint(context.Background(), store.Checkpoint{ID: id, Tenant: "team-a", AgentID: "ag_x", Created: time.Now(), Size: 1, Data: b}); err != nil {
			t.Fatal(err)
		}
	}
	with := func(id string, f func(*sandboxagent.Checkpoint)) sandboxagent.Checkpoint {
		c := testCheckpoint(id, 1)
		f(&c)
		return c
	}
	put("ck-0a", eng.Commit(t, testCheckpoint("ck-0a", 1))) // sound, its image held
	for _, tc := range []struct {
		name, id string
		data     any
	}{
		{"another id in the JSON", "ck-c1", testCheckpoint("ck-0a", 1)},
		{"an id of another form", "ck-XY", with("ck-XY", func(c *sandboxagent.Checkpoint) {})},
		{"another image", "ck-c3", with("ck-c3", func(c *sandboxagent.Checkpoint) { c.Image = "alpine:3.20" })},
		{"another checkpoint's image", "ck-c4", with("ck-c4", func(c *sandboxagent.Checkpoint) { c.Image = sandboxagent.CheckpointRepo + ":ck-0a" })},
		{"an archive elsewhere", "ck-c5", with("ck-c5", func(c *sandboxagent.Checkpoint) { c.Image, c.Archive = "", "/etc/ck-c5" })},
		{"an archive under another name", "ck-c6", with("ck-c6", func(c *sandboxagent.Checkpoint) { c.Image, c.Archive = "", filepath.Join(root, "ck-0a") })},
		{"an image and an archive", "ck-c7", with("ck-c7", func(c *sandboxagent.Checkpoint) { c.Archive = filepath.Join(root, "ck-c7") })},
		{"neither", "ck-c8", with("ck-c8", func(c *sandboxagent.Checkpoint) { c.Image = "" })},
		{"not a checkpoint", "ck-c9", "a string"},
	} {
		put(tc.id, tc.data)
		eng.Commit(t, testCheckpoint(tc.id, 1)) // an image a wrong DELETE would remove
		for _, r := range []struct{ method, path, body string }{
			{"GET", "/v1/checkpoints/" + tc.id, ""},
			{"DELETE", "/v1/checkpoints/" + tc.id, ""},
			{"POST", "/v1/agents", `{"driver":"pi","checkpoint":"` + tc.id + `"}`},
		} {
			code, e := call(t, ts, r.method, r.path, a, r.body)
			if code != http.StatusInternalServerError || e.Kind != KindInternal || e.Error != "checkpoint "+tc.id+": its stored record is corrupt" {
				t.Errorf("%s: %s %s: %d %+v, want 500 internal, generic", tc.name, r.method, r.path, code, e)
			}
		}
	}
	if got := checkpointIDs(t, ts, a); !slices.Equal(got, []string{"ck-0a"}) {
		t.Errorf("list: %v, want the sound one only", got)
	}
	if removed := eng.Removed(); len(removed) != 0 || rs.calls.Load() != 0 {
		t.Errorf("corrupt records removed %v, started %d agents", removed, rs.calls.Load())
	}
}

// TestCheckpointErrorsHidePaths: an archive missing here (or refused by
// the library) is a 404 that names no host path; another failure of a
// start from an archive a 500 without it; an image checkpoint on a server
// without an engine to remove it is a 501 on DELETE.
func TestCheckpointErrorsHidePaths(t *testing.T) {
	st := testStore(t)
	root := t.TempDir()
	var mu sync.Mutex
	var startErr error
	start := func(_ context.Context, req CreateRequest) (*sandboxagent.Agent, func(), error) {
		mu.Lock()
		defer mu.Unlock()
		if startErr != nil {
			return nil, nil, startErr
		}
		return nil, func() {}, nil
	}
	_, ts := newCheckpointServer(t, st, nil, root, func(o *Options) { o.Start, o.Checkpoints = start, nil })
	a := "Bearer " + newToken(t, st, "team-a", 0)

	gone := testCheckpoint("ck-a1", 1)
	gone.Image, gone.Archive = "", filepath.Join(root, "ck-a1") // no folder
	putCheckpoint(t, st, "team-a", gone)
	here := checkpointtest.WriteArchive(t, root, testCheckpoint("ck-a2", 1))
	putCheckpoint(t, st, "team-a", here)
	for _, tc := range []struct {
		name, id string
		err      error
		status   int
		kind     string
	}{
		{"a missing archive", "ck-a1", nil, http.StatusNotFound, KindNotFound},
		{"an archive the library refuses", "ck-a2", fmt.Errorf("%w: checkpoint %q: its archive %q is not under checkpoint_root %s",
			sandboxagent.ErrInvalidArgument, "ck-a2", here.Archive, root), http.StatusNotFound, KindNotFound},
		{"an incomplete archive", "ck-a2", fmt.Errorf("%w: checkpoint ck-a2: its archive is missing or incomplete (<nil>)",
			sandboxagent.ErrInvalidArgument), http.StatusNotFound, KindNotFound},
		{"a restore that failed", "ck-a2", fmt.Errorf("start from checkpoint ck-a2: open %s: permission denied", filepath.Join(here.Archive, "files")),
			http.StatusInternalServerError, KindInternal},
		{"the engine down", "ck-a2", fmt.Errorf("restore %s: %w", here.Archive, sandboxagent.ErrEngineUnavailable),
			http.StatusServiceUnavailable, KindEngineUnavailable},
		{"another failure", "ck-a2", fmt.Errorf("%w: memory: too small", sandboxagent.ErrInvalidArgument), http.StatusBadRequest, KindInvalidArgument},
	} {
		mu.Lock()
		startErr = tc.err
		mu.Unlock()
		code, e := call(t, ts, "POST", "/v1/agents", a, `{"driver":"pi","checkpoint":"`+tc.id+`"}`)
		if code != tc.status || e.Kind != tc.kind || strings.Contains(e.Error, root) {
			t.Errorf("%s: %d %+v, want %d %s without %s", tc.name, code, e, tc.status, tc.kind, root)
		}
	}

	img := testCheckpoint("ck-b1", 1)
	putCheckpoint(t, st, "team-a", img)
	if code, e := call(t, ts, "DELETE", "/v1/checkpoints/ck-b1", a, ""); code != http.StatusNotImplemented || e.Kind != KindUnsupported {
		t.Errorf("DELETE an image without an engine: %d %+v, want 501 unsupported", code, e)
	}
	if code, _ := call(t, ts, "GET", "/v1/checkpoints/ck-b1", a, ""); code != http.StatusOK {
		t.Errorf("the image checkpoint after a refused DELETE: %d", code)
	}
}

// TestCheckpointCapUpFront: a tenant already at serve_tenant_checkpoint_bytes
// is refused (429, Retry-After) before any commit: the checkpoint and
// fork routes answer it ahead of the agent's state (here a lost agent's
// 410); another tenant goes on.
func TestCheckpointCapUpFront(t *testing.T) {
	st := testStore(t)
	_, ts := newCheckpointServer(t, st, &checkpointtest.Engine{}, t.TempDir(), func(o *Options) { o.TenantCheckpointBytes = 100 })
	storedAgent(t, st, "ag_a", "team-a")
	storedAgent(t, st, "ag_b", "team-b")
	putCheckpoint(t, st, "team-a", testCheckpoint("ck-a1", 100))
	putCheckpoint(t, st, "team-b", testCheckpoint("ck-b1", 99))
	a := "Bearer " + newToken(t, st, "team-a", 0)
	b := "Bearer " + newToken(t, st, "team-b", 0)
	for _, tc := range []struct {
		auth, path string
		status     int
		retry      string
	}{
		{a, "/v1/agents/ag_a/checkpoints", http.StatusTooManyRequests, "60"},
		{a, "/v1/agents/ag_a/fork", http.StatusTooManyRequests, "60"},
		{b, "/v1/agents/ag_b/checkpoints", http.StatusGone, ""},
		{b, "/v1/agents/ag_b/fork", http.StatusGone, ""},
	} {
		req, _ := http.NewRequest("POST", ts.URL+tc.path, nil)
		req.Header.Set("Authorization", tc.auth)
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Retry-After") != tc.retry {
			t.Errorf("POST %s: %d, Retry-After %q; want %d, %q", tc.path, resp.StatusCode, resp.Header.Get("Retry-After"), tc.status, tc.retry)
		}
	}
}

// TestRequestsForgotten: the create requests kept for forks (env values)
// go with their agent: deleted elsewhere or lost (forgetRequests, adopt),
// and all at Close.
func TestRequestsForgotten(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	s, _ := newCheckpointServer(t, st, &checkpointtest.Engine{}, t.TempDir())
	storedAgent(t, st, "ag_lost", "team-a")
	storedAgent(t, st, "ag_live", "team-a")
	live, err := st.GetAgent(ctx, "ag_live")
	if err != nil {
		t.Fatal(err)
	}
	live.Status, live.Reason = statusIdle, ""
	if err := st.UpdateAgent(ctx, live); err != nil {
		t.Fatal(err)
	}
	secret := CreateRequest{Driver: "pi", Env: map[string]string{"K": "secret"}}
	keep := func(ids ...string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, id := range ids {
			s.requests[id] = secret
		}
	}
	kept := func() []string {
		s.mu.Lock()
		defer s.mu.Unlock()
		ids := slices.Collect(func(yield func(string) bool) {
			for id := range s.requests {
				if !yield(id) {
					return
				}
			}
		})
		slices.Sort(ids)
		return ids
	}
	keep("ag_gone", "ag_lost", "ag_live")
	if err := s.forgetRequests(ctx); err != nil {
		t.Fatal(err)
	}
	if got := kept(); !slices.Equal(got, []string{"ag_live"}) {
		t.Errorf("after forgetRequests: %v, want ag_live", got)
	}
	// An adoption that finds the agent lost forgets it too.
	keep("ag_lost")
	rec, _ := st.GetAgent(ctx, "ag_lost")
	if _, err := s.adopt(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if got := kept(); !slices.Equal(got, []string{"ag_live"}) {
		t.Errorf("after adopting a lost agent: %v, want ag_live", got)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := kept(); len(got) != 0 {
		t.Errorf("after Close: %v, want none", got)
	}
}

// failingDeletes is a store whose DeleteAgent fails.
type failingDeletes struct{ store.Store }

func (failingDeletes) DeleteAgent(context.Context, string) error {
	return errors.New("the database is read-only")
}

// TestForkShutdown: branches launched while the server closes are not
// kept (nobody would close them): discarded, with the checkpoint, 503; a
// discard that fails is told in the fork's error, whose kind stays the
// first failure's.
func TestForkShutdown(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	eng := &checkpointtest.Engine{}
	rs := &recordingStarter{}
	s, _ := newCheckpointServer(t, st, eng, t.TempDir(), func(o *Options) { o.Start = rs.start })
	c := testCheckpoint("ck-5d", 10)
	if _, err := s.keepCheckpoint(ctx, "team-a", "ag_parent", c); err != nil {
		t.Fatal(err)
	}
	ad, err := s.admit(ctx, "team-a", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer ad.release()
	req := CreateRequest{Driver: "pi", Tenant: "team-a", Checkpoint: c.ID, From: &c}
	var agents []*agent
	var recs []store.Agent
	for range 2 {
		a, rec, err := s.launch(ctx, req, ad)
		if err != nil {
			t.Fatal(err)
		}
		agents, recs = append(agents, a), append(recs, rec)
	}
	if err := s.Close(ctx); err != nil { // stopAll runs between launch and settle
		t.Fatal(err)
	}
	_, err = s.settle(ctx, agents, recs)
	var ae *apiError
	if !errors.As(err, &ae) || ae.status != http.StatusServiceUnavailable || ae.kind != KindInterrupted {
		t.Fatalf("settle after Close: %v, want 503 interrupted", err)
	}
	s.mu.Lock()
	held := len(s.agents) + len(s.requests)
	s.mu.Unlock()
	if all, _ := st.ListAgents(ctx, ""); len(all) != 0 || held != 0 || rs.stops.Load() != 2 {
		t.Errorf("after settle on a closed server: %d stored, %d held, %d stopped; want none, none, 2", len(all), held, rs.stops.Load())
	}

	// A fork whose second branch fails, and whose first cannot be
	// deleted from the store: the error says so.
	rs2 := &recordingStarter{fail: 2}
	s2, _ := newCheckpointServer(t, failingDeletes{st}, eng, t.TempDir(), func(o *Options) { o.Start = rs2.start })
	ad2, err := s2.admit(ctx, "team-a", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer ad2.release()
	_, err = s2.forkFrom(ctx, ad2, CreateRequest{Driver: "pi", Tenant: "team-a"}, c, 2)
	var de *sandboxagent.DriverError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "removing what was started failed") || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("a fork whose cleanup failed: %v", err)
	}
	if status, body := classify(err); status != http.StatusUnprocessableEntity || body.Kind != KindDriverError {
		t.Errorf("its kind: %d %s, want the branch's driver_error", status, body.Kind)
	}
}

// A checkpoint another one was made on (an agent started on it, then
// checkpointed) is refused deletion: the engine would untag it and keep
// its layers, its bytes no longer counted.
func TestDeleteBaseCheckpoint(t *testing.T) {
	st := testStore(t)
	eng := &checkpointtest.Engine{}
	_, ts := newCheckpointServer(t, st, eng, t.TempDir())
	a := "Bearer " + newToken(t, st, "team-a", 0)
	base := eng.Commit(t, testCheckpoint("ck-0b", 100))
	child := testCheckpoint("ck-0c", 50)
	child.BaseImage = base.Image
	child = eng.Commit(t, child)
	putCheckpoint(t, st, "team-a", base)
	putCheckpoint(t, st, "team-b", child) // another tenant's counts too
	if code, e := call(t, ts, "DELETE", "/v1/checkpoints/ck-0b", a, ""); code != http.StatusConflict || e.Kind != KindConflict ||
		!strings.Contains(e.Error, "base of another checkpoint") || strings.Contains(e.Error, "ck-0c") {
		t.Fatalf("DELETE a base: %d %+v, want 409 naming no other tenant's checkpoint", code, e)
	}
	if eng.WasRemoved(base.Image) {
		t.Fatal("the base's image was removed")
	}
	if code, _ := call(t, ts, "DELETE", "/v1/checkpoints/ck-0c", "Bearer "+testToken, ""); code != http.StatusNoContent {
		t.Fatalf("DELETE the child: %d", code)
	}
	if code, e := call(t, ts, "DELETE", "/v1/checkpoints/ck-0b", a, ""); code != http.StatusNoContent {
		t.Fatalf("DELETE the base after its child: %d %+v", code, e)
	}
}

func TestCheckpointFailedHidesHostDetails(t *testing.T) {
	for _, tc := range []struct {
		err      error
		kind     string
		mustHide string
	}{
		{fmt.Errorf("checkpoint sb: %w: 9 bytes, limit 8", sandboxagent.ErrCheckpointSize), KindCheckpointTooLarge, ""},
		{fmt.Errorf("%w: checkpoint_root /home/u/.cache/x: want mode 0700", sandboxagent.ErrInvalidArgument), KindInternal, "/home/u"},
		{errors.New("mkdir /home/u/.cache/sandbox-agent/checkpoints/ck-1: no space left on device"), KindInternal, "/home/u"},
		{fmt.Errorf("commit: Error response from daemon: /var/lib/docker/overlay2/x: %w", sandboxagent.ErrEngineUnavailable), "", "/var/lib/docker"},
	} {
		status, body := classify(checkpointFailed(tc.err))
		if tc.kind != "" && body.Kind != tc.kind {
			t.Errorf("%v: kind %s (%d), want %s", tc.err, body.Kind, status, tc.kind)
		}
		if tc.mustHide != "" && strings.Contains(body.Error, tc.mustHide) {
			t.Errorf("%v: the client reads %q", tc.err, body.Error)
		}
	}
}
