package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
	"github.com/sandbox-agent/sandbox-agent/config"
)

const testToken = "test-token-0123456789abcdef"

// newTestServer serves with a starter that fails with startErr (no
// engine here: the API suite in cmd/sandbox-agent starts real agents).
func newTestServer(t *testing.T, startErr error, opts ...func(*Options)) *httptest.Server {
	t.Helper()
	o := Options{Token: testToken, MaxBodyBytes: 1 << 10, Store: testStore(t), Start: func(ctx context.Context, req CreateRequest) (*sandboxagent.Agent, func(), error) {
		return nil, nil, startErr
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
	return ts
}

func call(t *testing.T, ts *httptest.Server, method, path, auth, body string) (int, errorBody) {
	t.Helper()
	req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e errorBody
	data, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(data, &e)
	return resp.StatusCode, e
}

func TestNewChecksOptions(t *testing.T) {
	start := func(context.Context, CreateRequest) (*sandboxagent.Agent, func(), error) { return nil, nil, nil }
	st := testStore(t)
	for _, o := range []Options{{Token: testToken, Store: st}, {Start: start, Token: "short", Store: st}, {Start: start, Token: testToken}} {
		if _, err := New(o); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("New(%+v) = %v, want ErrInvalidArgument", o, err)
		}
	}
}

func TestAuth(t *testing.T) {
	ts := newTestServer(t, nil)
	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer wrong", "Basic " + testToken, "Bearer " + testToken + " x", testToken} {
		for _, p := range []string{"GET /v1/agents", "POST /v1/agents", "GET /v1/openapi.json", "GET /ui/app.js", "DELETE /v1/agents/x", "GET /nope"} {
			method, path, _ := strings.Cut(p, " ")
			if code, e := call(t, ts, method, path, auth, "{}"); code != http.StatusUnauthorized || e.Kind != KindUnauthorized {
				t.Errorf("%s with %q: %d %+v", p, auth, code, e)
			}
		}
	}
	if code, _ := call(t, ts, "GET", "/v1/agents", "bearer "+testToken, ""); code != http.StatusOK {
		t.Errorf("a lower-case scheme: %d", code)
	}
}

func TestUnknownAgentAndRoute(t *testing.T) {
	ts := newTestServer(t, nil)
	auth := "Bearer " + testToken
	for _, p := range []string{"GET /v1/agents/ag_x", "DELETE /v1/agents/ag_x", "POST /v1/agents/ag_x/turns", "GET /v1/agents/ag_x/turns/1",
		"GET /v1/agents/ag_x/events", "POST /v1/agents/ag_x/exec", "GET /v1/agents/ag_x/files", "PUT /v1/agents/ag_x/files",
		"GET /v1/agents/ag_x/sessions", "POST /v1/agents/ag_x/sessions", "GET /v1/agents/ag_x/sessions/s", "DELETE /v1/agents/ag_x/sessions/s",
		"POST /v1/agents/ag_x/sessions/s/fork", "GET /v1/agents/ag_x/sessions/s/events", "PUT /v1/agents/ag_x/session",
		"POST /v1/agents/ag_x/checkpoints", "POST /v1/agents/ag_x/fork", "GET /v1/agents/ag_x/changes", "PUT /v1/agents/ag_x/rules", "POST /v1/agents/ag_x/skills", "GET /v1/checkpoints/ck-00", "DELETE /v1/checkpoints/ck-00"} {
		method, path, _ := strings.Cut(p, " ")
		if code, e := call(t, ts, method, path, auth, "{}"); code != http.StatusNotFound || e.Kind != KindNotFound {
			t.Errorf("%s: %d %+v", p, code, e)
		}
	}
}

// TestCreateErrors: what a starter's failure answers, and the checks
// made before the starter runs.
func TestCreateErrors(t *testing.T) {
	tests := []struct {
		name     string
		startErr error
		body     string
		status   int
		kind     string
	}{
		{"bad JSON", nil, `{"driver":`, 400, KindInvalidArgument},
		{"unknown field", nil, `{"driver":"pi","x":1}`, 400, KindInvalidArgument},
		{"trailing value", nil, `{"driver":"pi"}{}`, 400, KindInvalidArgument},
		{"no driver", nil, `{}`, 400, KindInvalidArgument},
		{"keepalive out of range", nil, `{"driver":"pi","keepalive":1e9}`, 400, KindInvalidArgument},
		{"over the body limit", nil, `{"driver":"` + strings.Repeat("p", 2<<10) + `"}`, 413, KindTooLarge},
		{"starter: invalid argument", fmt.Errorf("x: %w", sandboxagent.ErrInvalidArgument), `{"driver":"pi"}`, 400, KindInvalidArgument},
		{"starter: config error", &config.Error{Key: "k", Err: errors.New("bad")}, `{"driver":"pi"}`, 400, KindInvalidArgument},
		{"starter: image missing", fmt.Errorf("x: %w", sandboxagent.ErrImageNotFound), `{"driver":"pi"}`, 404, KindNotFound},
		{"starter: engine down", fmt.Errorf("x: %w", sandboxagent.ErrEngineUnavailable), `{"driver":"pi"}`, 503, KindEngineUnavailable},
		{"starter: CLI failed", &sandboxagent.DriverError{Driver: "pi", Message: "no"}, `{"driver":"pi"}`, 422, KindDriverError},
		{"starter: timeout", fmt.Errorf("x: %w", sandboxagent.ErrTimeout), `{"driver":"pi"}`, 504, KindTimeout},
		{"starter: other", errors.New("boom"), `{"driver":"pi"}`, 500, KindInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t, tt.startErr)
			code, e := call(t, ts, "POST", "/v1/agents", "Bearer "+testToken, tt.body)
			if code != tt.status || e.Kind != tt.kind || e.Error == "" {
				t.Errorf("%d %+v, want %d %s", code, e, tt.status, tt.kind)
			}
		})
	}
}

// TestAgentLimit: creates under way count against MaxAgents.
func TestAgentLimit(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	ts := newTestServer(t, nil, func(o *Options) {
		o.MaxAgents = 1
		o.Start = func(ctx context.Context, req CreateRequest) (*sandboxagent.Agent, func(), error) {
			started <- struct{}{}
			<-release
			return nil, nil, errors.New("released")
		}
	})
	done := make(chan int)
	go func() {
		code, _ := call(t, ts, "POST", "/v1/agents", "Bearer "+testToken, `{"driver":"pi"}`)
		done <- code
	}()
	<-started
	if code, e := call(t, ts, "POST", "/v1/agents", "Bearer "+testToken, `{"driver":"pi"}`); code != http.StatusTooManyRequests || e.Kind != KindLimit {
		t.Errorf("a second create: %d %+v, want 429 limit", code, e)
	}
	close(release)
	if code := <-done; code != http.StatusInternalServerError {
		t.Errorf("the first create: %d", code)
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		err    error
		status int
		kind   string
	}{
		{context.DeadlineExceeded, 504, KindTimeout},
		{fmt.Errorf("turn interrupted: %w", context.Canceled), 503, KindInterrupted},
		{fmt.Errorf("x: %w", sandboxagent.ErrPathNotFound), 404, KindNotFound},
		{fmt.Errorf("x: %w", sandboxagent.ErrUnsupported), 501, KindUnsupported},
		{fmt.Errorf("x: %w", sandboxagent.ErrUnsafeArchive), 422, KindUnsafeArchive},
		{fmt.Errorf("x: %w", sandboxagent.ErrLimitExceeded), 422, KindTooLarge},
		{fmt.Errorf("x: %w", sandboxagent.ErrOutputLimit), 422, KindOutputLimit},
		{fmt.Errorf("x: %w", sandboxagent.ErrCLIExited), 422, KindDriverError},
		{&sandboxagent.ResourceError{}, 422, KindDriverError},
		{&http.MaxBytesError{Limit: 5}, 413, KindTooLarge},
		{&apiError{status: 409, kind: KindBusy, msg: "busy"}, 409, KindBusy},
		// An archive over checkpoint_max_bytes wraps the download's limit too.
		{fmt.Errorf("checkpoint: %w: %w", sandboxagent.ErrCheckpointSize, sandboxagent.ErrLimitExceeded), 422, KindCheckpointTooLarge},
		{fmt.Errorf("x: %w", checkpoint.ErrInUse), 409, KindConflict},
		{fmt.Errorf("x: %w", checkpoint.ErrNotFound), 404, KindNotFound},
	}
	for _, tt := range tests {
		status, body := classify(tt.err)
		if status != tt.status || body.Kind != tt.kind {
			t.Errorf("classify(%v) = %d %s, want %d %s", tt.err, status, body.Kind, tt.status, tt.kind)
		}
	}
	code := 7
	_, body := classify(fmt.Errorf("turn: %w", &sandboxagent.DriverError{Driver: "pi", ExitCode: code, Status: 401}))
	if body.Driver != "pi" || body.ExitCode == nil || *body.ExitCode != code || body.Status != 401 {
		t.Errorf("driver error body %+v", body)
	}
}

// TestInspectorSession: the login form opens a session whose cookie is
// not the token and works only from the inspector's own origin.
func TestInspectorSession(t *testing.T) {
	ts := newTestServer(t, nil)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(ts.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !bytes.Contains(page, []byte(`name="token"`)) || resp.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("GET / without a token: %d %s", resp.StatusCode, page)
	}
	resp, err = noRedirect.PostForm(ts.URL+"/login", url.Values{"token": {"wrong-token-0123456789"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Errorf("a wrong token: %d %v", resp.StatusCode, resp.Cookies())
	}
	resp, err = noRedirect.PostForm(ts.URL+"/login", url.Values{"token": {testToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(cookies) != 1 {
		t.Fatalf("login: %d %v", resp.StatusCode, cookies)
	}
	c := cookies[0]
	if c.Name != sessionCookie || c.Value == testToken || strings.Contains(c.Value, testToken) || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Errorf("session cookie %+v", c)
	}
	self := ts.URL
	tests := []struct {
		name, method, path, origin, site string
		cookie                           *http.Cookie
		status                           int
	}{
		{"page", "GET", "/", "", "none", c, 200},
		{"same-origin fetch", "GET", "/v1/agents", "", "same-origin", c, 200},
		{"a client without fetch metadata", "GET", "/v1/agents", "", "", c, 200},
		{"same-origin POST", "POST", "/v1/agents", self, "same-origin", c, 400}, // past auth: the body is bad
		{"POST from another port", "POST", "/v1/agents", "http://127.0.0.1:1", "same-site", c, 401},
		{"POST with a foreign Origin only", "POST", "/v1/agents", "http://127.0.0.1:1", "", c, 401},
		{"POST without Origin or fetch metadata", "POST", "/v1/agents", "", "", c, 401},
		{"GET from another site", "GET", "/v1/agents", "", "cross-site", c, 401},
		{"a forged session", "GET", "/v1/agents", "", "same-origin", &http.Cookie{Name: sessionCookie, Value: strings.Repeat("a", 64)}, 401},
		{"the token as the cookie", "GET", "/v1/agents", "", "same-origin", &http.Cookie{Name: sessionCookie, Value: testToken}, 401},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, ts.URL+tt.path, strings.NewReader("{"))
		req.AddCookie(tt.cookie)
		if tt.origin != "" {
			req.Header.Set("Origin", tt.origin)
		}
		if tt.site != "" {
			req.Header.Set("Sec-Fetch-Site", tt.site)
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%s: %d, want %d", tt.name, resp.StatusCode, tt.status)
		}
	}
}

// stalledWriter is a client that reads nothing: every write blocks until
// release is closed, then fails.
type stalledWriter struct {
	h       http.Header
	release chan struct{}
}

func (w *stalledWriter) Header() http.Header { return w.h }
func (w *stalledWriter) WriteHeader(int)     {}
func (w *stalledWriter) Write(p []byte) (int, error) {
	<-w.release
	return 0, errors.New("connection gone")
}

// TestSSEStreamStalledClient: a turn stream whose client stops reading
// never holds up the turn: push returns at once, the queue is bounded,
// the turn is cancelled (once), and close returns when the write fails.
func TestSSEStreamStalledClient(t *testing.T) {
	w := &stalledWriter{h: http.Header{}, release: make(chan struct{})}
	var gone int
	goneCh := make(chan struct{}, 10)
	s := newSSEStream(w, func() { gone++; goneCh <- struct{}{} })
	for i := 0; i < 2*maxQueued+10; i++ { // run holds one batch at most
		s.pushID(0, "event", map[string]int{"i": i}) // the first write blocks in run
	}
	<-goneCh // the queue overflowed
	s.mu.Lock()
	queued := len(s.queue)
	s.mu.Unlock()
	if queued != 0 {
		t.Errorf("%d events still queued after the stream broke", queued)
	}
	close(w.release)
	s.close()
	if gone != 1 {
		t.Errorf("gone called %d times, want once", gone)
	}
}
