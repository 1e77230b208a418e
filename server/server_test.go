package server

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/safetar"
)

const testToken = "test-token-0123456789abcdef"

// newTestServer serves with a starter that fails with startErr (no
// engine here: the API suite in cmd/sandbox-agent starts real agents).
func newTestServer(t *testing.T, startErr error, opts ...func(*Options)) *httptest.Server {
	t.Helper()
	o := Options{Token: testToken, MaxBodyBytes: 1 << 10, Start: func(ctx context.Context, req CreateRequest) (*sandboxagent.Agent, func(), error) {
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
	for _, o := range []Options{{Token: testToken}, {Start: start, Token: "short"}} {
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
		"POST /v1/agents/ag_x/sessions/s/fork", "GET /v1/agents/ag_x/sessions/s/events", "PUT /v1/agents/ag_x/session"} {
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
		{"starter: config error", &sandboxagent.ConfigError{Key: "k", Err: errors.New("bad")}, `{"driver":"pi"}`, 400, KindInvalidArgument},
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
		{fmt.Errorf("x: %w", sandboxagent.ErrCLIExited), 422, KindDriverError},
		{&sandboxagent.ResourceError{}, 422, KindDriverError},
		{&http.MaxBytesError{Limit: 5}, 413, KindTooLarge},
		{&apiError{status: 409, kind: KindBusy, msg: "busy"}, 409, KindBusy},
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

// TestReroot: a client's tar is re-rooted under one top name, and the
// extraction that follows still refuses what escapes.
func TestReroot(t *testing.T) {
	type entry struct {
		name, link string
		typ        byte
	}
	mk := func(es ...entry) *bytes.Buffer {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, e := range es {
			hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644}
			if e.typ == tar.TypeReg {
				hdr.Size = 2
			}
			if err := tw.WriteHeader(hdr); err != nil {
				t.Fatal(err)
			}
			if e.typ == tar.TypeReg {
				_, _ = tw.Write([]byte("x\n"))
			}
		}
		_ = tw.Close()
		return &buf
	}
	tests := []struct {
		name    string
		tar     *bytes.Buffer
		files   []string
		wantErr error
	}{
		{"files and dirs", mk(entry{"./", "", tar.TypeDir}, entry{"a.txt", "", tar.TypeReg}, entry{"d/", "", tar.TypeDir}, entry{"d/b.txt", "", tar.TypeReg}), []string{"upload/a.txt", "upload/d/b.txt"}, nil},
		{"a symlink is left out", mk(entry{"a.txt", "", tar.TypeReg}, entry{"l", "/etc/shadow", tar.TypeSymlink}), []string{"upload/a.txt"}, nil},
		{"a hardlink inside", mk(entry{"a.txt", "", tar.TypeReg}, entry{"h", "a.txt", tar.TypeLink}), []string{"upload/a.txt", "upload/h"}, nil},
		{"dot-dot", mk(entry{"../x", "", tar.TypeReg}), nil, safetar.ErrUnsafe},
		{"absolute", mk(entry{"/etc/x", "", tar.TypeReg}), nil, safetar.ErrUnsafe},
		{"a hardlink outside is left out", mk(entry{"a.txt", "", tar.TypeReg}, entry{"h", "/etc/passwd", tar.TypeLink}), []string{"upload/a.txt"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			body := reroot(tt.tar)
			_, err := safetar.Extract(context.Background(), body, dir, uploadTop, safetar.Limits{})
			body.Close()
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Extract: %v, want %v", err, tt.wantErr)
			}
			var got []string
			_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					rel, _ := filepath.Rel(dir, p)
					got = append(got, rel)
					if data, err := os.ReadFile(p); err != nil || string(data) != "x\n" {
						t.Errorf("%s: %q %v", rel, data, err)
					}
				}
				return nil
			})
			if fmt.Sprint(got) != fmt.Sprint(tt.files) && (len(got) > 0 || len(tt.files) > 0) {
				t.Errorf("files %v, want %v", got, tt.files)
			}
		})
	}
}

func TestLoginPage(t *testing.T) {
	ts := newTestServer(t, nil)
	resp, err := ts.Client().Get(ts.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !bytes.Contains(page, []byte(`name="token"`)) || resp.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("GET / without a token: %d %s", resp.StatusCode, page)
	}
	req, _ := http.NewRequest("GET", ts.URL+"/", nil)
	req.AddCookie(&http.Cookie{Name: tokenCookie, Value: testToken})
	resp, err = ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(page, []byte("<script")) {
		t.Errorf("GET / with the cookie: %d %.200s", resp.StatusCode, page)
	}
}
