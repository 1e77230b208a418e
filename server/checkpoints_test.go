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
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
	"github.com/sandbox-agent/sandbox-agent/store"
)

// fakeEngine is a checkpoint.Engine whose images are only names.
type fakeEngine struct {
	mu      sync.Mutex
	removed []string
	inUse   map[string]bool
}

func (f *fakeEngine) Images(context.Context, string) ([]checkpoint.Image, error) { return nil, nil }

func (f *fakeEngine) RemoveImage(_ context.Context, ref string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inUse[ref] {
		return fmt.Errorf("remove image %s: %w", ref, checkpoint.ErrInUse)
	}
	f.removed = append(f.removed, ref)
	return nil
}

func (f *fakeEngine) wasRemoved(ref string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.removed, ref)
}

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
func newCheckpointServer(t *testing.T, st store.Store, eng *fakeEngine, root string, opts ...func(*Options)) (*Server, *httptest.Server) {
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
	eng := &fakeEngine{inUse: map[string]bool{}}
	root := t.TempDir()
	_, ts := newCheckpointServer(t, st, eng, root)
	a := "Bearer " + newToken(t, st, "team-a", 0)
	b := "Bearer " + newToken(t, st, "team-b", 0)
	readOnly := "Bearer " + newToken(t, st, "team-a", 0, ScopeRead)
	metrics := "Bearer " + newToken(t, st, "team-a", 0, ScopeMetrics)
	admin := "Bearer " + testToken

	a1, b1 := testCheckpoint("ck-a1", 100), testCheckpoint("ck-b1", 200)
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
	if eng.wasRemoved(b1.Image) || eng.wasRemoved(a1.Image) {
		t.Fatalf("images removed by refused requests: %v", eng.removed)
	}

	// In use: 409, kept.
	eng.mu.Lock()
	eng.inUse[a1.Image] = true
	eng.mu.Unlock()
	if code, e := call(t, ts, "DELETE", "/v1/checkpoints/ck-a1", a, ""); code != http.StatusConflict || e.Kind != KindConflict {
		t.Errorf("DELETE in use: %d %+v, want 409 conflict", code, e)
	}
	if code, _ := call(t, ts, "GET", "/v1/checkpoints/ck-a1", a, ""); code != 200 {
		t.Errorf("a checkpoint in use after DELETE: %d", code)
	}
	eng.mu.Lock()
	eng.inUse[a1.Image] = false
	eng.mu.Unlock()
	for _, id := range []string{"ck-a1", "ck-a2"} {
		if code, e := call(t, ts, "DELETE", "/v1/checkpoints/"+id, a, ""); code != http.StatusNoContent {
			t.Errorf("DELETE %s: %d %+v", id, code, e)
		}
		if code, _ := call(t, ts, "GET", "/v1/checkpoints/"+id, a, ""); code != http.StatusNotFound {
			t.Errorf("GET %s after DELETE: %d", id, code)
		}
	}
	if !eng.wasRemoved(a1.Image) {
		t.Errorf("DELETE did not remove the image: %v", eng.removed)
	}
	if _, err := os.Lstat(archived.Archive); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("DELETE left the archive: %v", err)
	}
	// The admin deletes anyone's.
	if code, e := call(t, ts, "DELETE", "/v1/checkpoints/ck-b1", admin, ""); code != http.StatusNoContent || !eng.wasRemoved(b1.Image) {
		t.Errorf("admin DELETE: %d %+v", code, e)
	}
}

// TestCheckpointRequests: what the checkpoint and fork routes check
// before they need the sandbox (a lost agent's: 410 past the checks).
func TestCheckpointRequests(t *testing.T) {
	st := testStore(t)
	s, ts := newCheckpointServer(t, st, &fakeEngine{}, t.TempDir(), func(o *Options) { o.MaxAgents = 3 })
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
	eng := &fakeEngine{}
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
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rs.reqs) != 2 {
		t.Fatalf("%d starts, want 2", len(rs.reqs))
	}
	for _, req := range rs.reqs {
		if req.From == nil || req.From.ID != "ck-a1" || req.From.Image != c.Image || req.From.Session != "sess-1" || req.Checkpoint != "ck-a1" || req.Env["K"] != "secret" {
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
	eng := &fakeEngine{}
	rs := &recordingStarter{fail: 2}
	s, _ := newCheckpointServer(t, st, eng, t.TempDir(), func(o *Options) { o.Start = rs.start })
	parent := CreateRequest{Driver: "pi", Model: "glm", Egress: "model", Memory: "1g", Env: map[string]string{"K": "secret"}, Tenant: "team-a", Image: "sandbox-agent/pi:1"}
	c := testCheckpoint("ck-f1", 100)
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
	if _, err := st.Checkpoint(ctx, c.ID); !errors.Is(err, store.ErrNotFound) || !eng.wasRemoved(c.Image) {
		t.Errorf("the checkpoint after a failed fork: %v, image removed %v", err, eng.wasRemoved(c.Image))
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
	c2 := testCheckpoint("ck-f2", 100)
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
	if _, err := st.Checkpoint(ctx, c2.ID); err != nil || eng.wasRemoved(c2.Image) {
		t.Errorf("the checkpoint of a fork: %v", err)
	}
	// A branch forks with its request, env included, as it was started here.
	if req := s.branchRequest(store.Agent{ID: views[0].ID, Tenant: "team-a"}); req.Env["K"] != "secret" || req.Memory != "1g" {
		t.Errorf("a branch's own request: %+v", req)
	}
}

// TestBranchRequest: an agent started here forks with its env; one known
// only from the store (a restart) without (its values are not stored).
func TestBranchRequest(t *testing.T) {
	s, _ := newCheckpointServer(t, testStore(t), &fakeEngine{}, t.TempDir())
	full := CreateRequest{Driver: "pi", Model: "glm", Egress: "none", Env: map[string]string{"K": "secret"}, Pids: 50}
	s.requests["ag_1"] = full
	storedReq, _ := json.Marshal(stored(full))
	rec := store.Agent{ID: "ag_1", Tenant: "team-a", Request: storedReq}
	if got := s.branchRequest(rec); got.Env["K"] != "secret" || got.Tenant != "team-a" || got.Pids != 50 {
		t.Errorf("an agent started here: %+v", got)
	}
	rec.ID = "ag_2"
	if got := s.branchRequest(rec); got.Env != nil || got.Egress != "none" || got.Model != "glm" || got.Pids != 50 || got.Tenant != "team-a" {
		t.Errorf("an agent from the store: %+v", got)
	}
}

// TestTenantCheckpointBytes: a checkpoint that takes its tenant past
// TenantCheckpointBytes is removed and answers 429; other tenants and the
// admin are not counted with it.
func TestTenantCheckpointBytes(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	eng := &fakeEngine{}
	s, ts := newCheckpointServer(t, st, eng, t.TempDir(), func(o *Options) { o.TenantCheckpointBytes = 250 })
	for _, c := range []sandboxagent.Checkpoint{testCheckpoint("ck-01", 100), testCheckpoint("ck-02", 150)} {
		if _, err := s.keepCheckpoint(ctx, "team-a", "ag_1", c); err != nil {
			t.Fatalf("%s: %v", c.ID, err)
		}
	}
	over := testCheckpoint("ck-03", 1)
	_, err := s.keepCheckpoint(ctx, "team-a", "ag_1", over)
	var ae *apiError
	if !errors.As(err, &ae) || ae.status != http.StatusTooManyRequests || ae.kind != KindLimit || !strings.Contains(ae.msg, "serve_tenant_checkpoint_bytes") {
		t.Fatalf("past the cap: %v, want 429 limit", err)
	}
	if _, err := st.Checkpoint(ctx, over.ID); !errors.Is(err, store.ErrNotFound) || !eng.wasRemoved(over.Image) {
		t.Errorf("the checkpoint past the cap: %v, removed %v", err, eng.wasRemoved(over.Image))
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
