//go:build integration

package main

// Helpers of the serve suites (API, browser, Python, benchmarks): serve
// runs in this process on a free loopback port, with a fresh token and
// audit root, and the tests talk to it over real HTTP.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
)

// lockedBuffer is a bytes.Buffer safe for serve's goroutines and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// serveProc is a serve the test talks to.
type serveProc struct {
	base, token string
	stderr      *lockedBuffer
	client      *http.Client
}

// serveRun is serve running in this process, with extra environment.
type serveRun struct {
	*serveProc
	cancel func()
	exited chan struct{}
	code   int
}

// startServeWith runs serve on a free loopback port with a fresh token
// and audit root and env on top of cliEnv; stop (or cleanup) ends it.
func startServeWith(t testing.TB, extra map[string]string) *serveRun {
	t.Helper()
	dir := t.TempDir()
	ready, tokenFile := dir+"/ready", dir+"/token"
	env := cliEnv()
	env["SANDBOX_AGENT_AUDIT_ROOT"] = dir + "/audit"
	// A store that lives as long as serve: its shutdown removes the
	// sandboxes (the durable state has its own test, TestServeDurable).
	env["SANDBOX_AGENT_STATE"] = ":memory:"
	for k, v := range extra {
		env[k] = v
	}
	getenv := func(k string) string {
		if k == "SANDBOX_AGENT_CONFIG" && env[k] == "" {
			return "/nonexistent/sandbox-agent-test-config.json"
		}
		return env[k]
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &serveRun{cancel: cancel, exited: make(chan struct{})}
	var stdout, stderr lockedBuffer
	go func() {
		defer close(r.exited)
		r.code = run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--ready-file", ready, "--token-file", tokenFile}, &stdout, &stderr, getenv)
	}()
	t.Cleanup(func() { r.stop(t) })
	var addr string
	waitFor(t, time.Minute, "serve's ready file", func() bool {
		select {
		case <-r.exited:
			t.Fatalf("serve exited %d before it listened:\n%s", r.code, stderr.String())
		default:
		}
		b, err := os.ReadFile(ready)
		addr = strings.TrimSpace(string(b))
		return err == nil && strings.Contains(addr, ":")
	})
	if want := "listening on http://" + addr; !strings.Contains(stderr.String(), want) {
		t.Errorf("serve's stderr lacks %q:\n%s", want, stderr.String())
	}
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(tokenFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file %s: %v %v, want mode 0600", tokenFile, fi.Mode(), err)
	}
	r.serveProc = &serveProc{base: "http://" + addr, token: strings.TrimSpace(string(tok)), stderr: &stderr, client: &http.Client{Timeout: 4 * time.Minute}}
	return r
}

// stop cancels serve's context (what SIGINT does) and returns its exit
// code.
func (r *serveRun) stop(t testing.TB) int {
	t.Helper()
	r.cancel()
	select {
	case <-r.exited:
	case <-time.After(3 * time.Minute):
		t.Fatalf("serve did not return within 3 minutes of its context ending:\n%s", r.stderr.String())
	}
	return r.code
}

// do sends a request with the bearer token and extra headers
// ("Name: value"); body is JSON unless it is an io.Reader.
func (s *serveProc) do(t testing.TB, method, p string, body any, headers ...string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case io.Reader:
		rd = b
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, s.base+p, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v\nserve stderr:\n%s", method, p, err, s.stderr.String())
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, p, err)
	}
	return resp, out
}

// wantError checks an error answer: its status and its JSON kind.
func wantError(t testing.TB, what string, resp *http.Response, out []byte, status int, kind string) {
	t.Helper()
	var e struct{ Error, Kind string }
	if resp.StatusCode != status || json.Unmarshal(out, &e) != nil || e.Kind != kind || e.Error == "" {
		t.Errorf("%s: %d %s, want %d with kind %q", what, resp.StatusCode, out, status, kind)
	}
}

// sseMessage is one server-sent event.
type sseMessage struct {
	event string
	data  []byte
}

// readSSE calls fn for each message of an event stream until fn returns
// false or the stream ends.
func readSSE(r io.Reader, fn func(sseMessage) bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var m sseMessage
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if m.event != "" && !fn(m) {
				return nil
			}
			m = sseMessage{}
		case strings.HasPrefix(line, "event: "):
			m.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			m.data = append(m.data, strings.TrimPrefix(line, "data: ")...)
		}
	}
	return sc.Err()
}

// readSSEIDs calls fn with the id of each message of an event stream
// that carries one, until the stream ends.
func readSSEIDs(r io.Reader, fn func(int64)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
			id, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("id %q: %w", v, err)
			}
			fn(id)
		}
	}
	return sc.Err()
}

// create creates an agent (skipping, or failing in CI, when the image is
// missing). The server's shutdown removes it.
func (s *serveProc) create(t testing.TB, body map[string]any) string {
	t.Helper()
	resp, out := s.do(t, http.MethodPost, "/v1/agents", body)
	if resp.StatusCode == http.StatusNotFound && bytes.Contains(out, []byte(sandboxagent.ErrImageNotFound.Error())) {
		prereq.Missing(t, "the %s image is not in the engine's store (.ci/setup builds it): %s", body["driver"], out)
	}
	var a struct{ ID string }
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(out, &a) != nil || a.ID == "" {
		t.Fatalf("POST /v1/agents: %d %s\nserve stderr:\n%s", resp.StatusCode, out, s.stderr.String())
	}
	return a.ID
}

// exec runs argv in agent id's sandbox over the API.
func (s *serveProc) exec(t testing.TB, id string, argv []string, env ...string) execResult {
	t.Helper()
	envs := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		envs[k] = v
	}
	resp, out := s.do(t, http.MethodPost, "/v1/agents/"+id+"/exec", map[string]any{"cmd": argv, "env": envs})
	var r execResult
	if resp.StatusCode != 200 || json.Unmarshal(out, &r) != nil {
		t.Fatalf("exec %v: %d %s", argv, resp.StatusCode, out)
	}
	return r
}

type execResult struct {
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	TimedOut bool   `json:"timed_out"`
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
