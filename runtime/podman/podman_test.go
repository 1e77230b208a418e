package podman

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// listen makes a unix socket at dir/podman/podman.sock.
func listen(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "podman", "podman.sock")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Skipf("unix sockets unavailable: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return p
}

func TestFindHost(t *testing.T) {
	rootless := listen(t, t.TempDir())
	xdg := filepath.Dir(filepath.Dir(rootless))
	rootful := listen(t, t.TempDir())
	missing := filepath.Join(t.TempDir(), "podman.sock")
	notSocket := filepath.Join(t.TempDir(), "podman.sock")
	os.WriteFile(notSocket, nil, 0o600)

	tests := []struct {
		name          string
		containerHost string
		uid           int
		xdg, rootful  string
		want          string
	}{
		{"CONTAINER_HOST wins", "unix:///elsewhere.sock", 1000, xdg, rootful, "unix:///elsewhere.sock"},
		{"ssh CONTAINER_HOST is not ours", "ssh://user@host/run/podman/podman.sock", 1000, xdg, rootful, "unix://" + rootless},
		{"rootless first for a user", "", 1000, xdg, rootful, "unix://" + rootless},
		{"root uses the rootful socket", "", 0, xdg, rootful, "unix://" + rootful},
		{"user falls back to rootful", "", 1000, t.TempDir(), rootful, "unix://" + rootful},
		{"a plain file is not a socket", "", 0, "", notSocket, ""},
		{"none", "", 1000, t.TempDir(), missing, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := findHost(tt.containerHost, tt.uid, tt.xdg, tt.rootful)
			if tt.want == "" {
				if !errors.Is(err, sandboxagent.ErrEngineUnavailable) {
					t.Fatalf("findHost = %q, %v; want ErrEngineUnavailable", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("findHost = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestCandidatesDefaultRuntimeDir(t *testing.T) {
	got := candidates(1000, "", RootfulSocket)
	if len(got) != 2 || got[0] != "/run/user/1000/podman/podman.sock" || got[1] != RootfulSocket {
		t.Fatalf("candidates = %v", got)
	}
}
