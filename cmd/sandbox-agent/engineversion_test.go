package main

import (
	"bufio"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// The engine line from a ping's headers: the real answers of Docker 20.10
// and Podman 4.3 (curl -sI --unix-socket SOCKET http://d/_ping), then the
// pings that must send the version command to Info instead.
func TestEngineFromPing(t *testing.T) {
	golden := func(name string) (int, http.Header) {
		t.Helper()
		f, err := os.Open(filepath.Join("testdata", "ping", name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		resp, err := http.ReadResponse(bufio.NewReader(f), &http.Request{Method: http.MethodHead})
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header
	}
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	tests := []struct {
		name   string
		status int
		h      http.Header
		want   sandboxagent.EngineInfo
	}{
		{"docker", 0, nil, sandboxagent.EngineInfo{Name: "docker", Version: "20.10.24+dfsg1", APIVersion: "1.41"}},
		{"podman", 0, nil, sandboxagent.EngineInfo{Name: "podman", Version: "4.3.1", APIVersion: "1.41"}},
		{"no server header", 200, hdr("Api-Version", "1.41"), sandboxagent.EngineInfo{}},
		{"another server", 200, hdr("Server", "nginx/1.25"), sandboxagent.EngineInfo{}},
		{"docker without version", 200, hdr("Server", "Docker/ (linux)"), sandboxagent.EngineInfo{}},
		{"an error status", 500, hdr("Server", "Docker/27.0.0 (linux)"), sandboxagent.EngineInfo{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, h := tt.status, tt.h
			if h == nil {
				file := map[string]string{"docker": "docker-20.10.24.txt", "podman": "podman-4.3.1.txt"}[tt.name]
				status, h = golden(file)
			}
			got, err := engineFromPing(status, h, "1.41")
			if tt.want.Name == "" {
				if !errors.Is(err, errPingUnknown) {
					t.Errorf("got %+v, %v: want errPingUnknown", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %+v, %v: want %+v", got, err, tt.want)
			}
		})
	}
}
