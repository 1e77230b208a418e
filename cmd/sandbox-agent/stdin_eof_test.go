package main

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/server"
)

// errReader fails every read, as a pipe whose writer vanished may.
type errReader struct{}

func (errReader) Read([]byte) (int, error) {
	return 0, errors.New("read /dev/stdin: input/output error")
}

// serve --stop-on-stdin-eof stops once standard input ends or fails: data
// before that is read and ignored.
func TestWatchStdin(t *testing.T) {
	pr, pw := io.Pipe()
	stopped := make(chan struct{})
	go watchStdin(pr, func() { close(stopped) })
	if _, err := pw.Write([]byte("anything\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
		t.Fatal("stopped while standard input was open")
	case <-time.After(100 * time.Millisecond):
	}
	pw.Close()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("not stopped at EOF")
	}

	failed := make(chan struct{})
	go watchStdin(errReader{}, func() { close(failed) })
	select {
	case <-failed:
	case <-time.After(5 * time.Second):
		t.Fatal("not stopped at a read error")
	}
}

// fake-model serve --ready-file writes host:port and a newline once
// listening; the address answers.
func TestFakeModelReadyFile(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"fake-model", "serve", "--ready-file", ready}, io.Discard, io.Discard, func(k string) string {
			if k == "SANDBOX_AGENT_CONFIG" {
				return "/nonexistent/sandbox-agent-test-config.json"
			}
			return ""
		})
	}()
	var data []byte
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if data, err = os.ReadFile(ready); err == nil {
			break
		}
		select {
		case code := <-exited:
			t.Fatalf("fake-model serve exited %d before it was ready", code)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no ready file")
		}
		time.Sleep(20 * time.Millisecond)
	}
	addr, ok := strings.CutSuffix(string(data), "\n")
	if host, _, err := net.SplitHostPort(addr); !ok || err != nil || host != "127.0.0.1" {
		t.Fatalf("ready file %q: want host:port and a newline", data)
	}
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("the ready file's address: %v", err)
	}
	c.Close()
	cancel()
	select {
	case code := <-exited:
		if code != exitOK {
			t.Errorf("exit %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fake-model serve did not stop")
	}
}

// A create request's endpoint: the server's defaults fill what it leaves
// empty (never with the server's key), its key is redacted, and an
// adopted agent's request whose key was dropped is refused.
func TestRequestEndpoint(t *testing.T) {
	red := &redactor{}
	a := &app{red: red, cli: defaultSettings()}
	const key = "sk-request-key-0123456789"
	for _, tc := range []struct {
		name string
		req  server.EndpointRequest
		want string // BaseURL|APIKey|Provider
	}{
		{"opencode, provider's API", server.EndpointRequest{APIKey: key}, "|" + key + "|zhipuai-coding-plan"},
		{"opencode, custom base URL", server.EndpointRequest{BaseURL: "http://127.0.0.1:9/v1", APIKey: key}, "http://127.0.0.1:9/v1|" + key + "|"},
		{"opencode, provider", server.EndpointRequest{Provider: "openai", APIKey: key}, "|" + key + "|openai"},
		{"codex, the gateway", server.EndpointRequest{APIKey: key}, a.cli.gatewayURL + "|" + key + "|"},
		{"codex, no key", server.EndpointRequest{BaseURL: "http://127.0.0.1:9/v1"}, "http://127.0.0.1:9/v1||"},
	} {
		name := "opencode"
		if strings.HasPrefix(tc.name, "codex") {
			name = "codex"
		}
		ep, err := a.requestEndpoint(name, tc.req)
		if got := ep.BaseURL + "|" + ep.APIKey + "|" + ep.Provider; err != nil || got != tc.want {
			t.Errorf("%s: %q %v, want %q", tc.name, got, err, tc.want)
		}
	}
	if got := red.redact("key " + key); strings.Contains(got, key) {
		t.Errorf("the request's key is not redacted: %q", got)
	}
	// A provider the model proxy cannot route: its key would enter the
	// sandbox, so it is refused (a base URL routes it).
	for _, tc := range []struct {
		req     server.EndpointRequest
		refused bool
	}{
		{server.EndpointRequest{Provider: "google", APIKey: key}, true},
		{server.EndpointRequest{Provider: "google", BaseURL: "http://127.0.0.1:9/v1", APIKey: key}, false},
	} {
		ep, err := a.requestEndpoint("opencode", tc.req)
		if err == nil {
			_, _, err = a.newDriver("opencode", &agentFlags{endpoint: &ep})
		}
		if refused := errors.Is(err, sandboxagent.ErrInvalidArgument); refused != tc.refused || (!tc.refused && err != nil) {
			t.Errorf("%+v: %v, want refused %v", tc.req.BaseURL, err, tc.refused)
		}
	}
	if _, err := a.requestEndpoint("codex", server.EndpointRequest{BaseURL: "http://127.0.0.1:9/v1", KeyDropped: true}); err == nil {
		t.Error("an endpoint whose key was dropped was taken")
	}
}
