package testenv

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
)

// Registry starts a real image registry (Debian's docker-registry, the
// CNCF distribution registry) for one test: plain HTTP on a free port of
// 127.0.0.1 (engines treat loopback registries as insecure by default),
// empty storage in the test's temporary folder, stopped at cleanup. It
// returns "127.0.0.1:PORT". Without the binary (apt-get install
// docker-registry; .ci/setup installs it) the test fails in CI and skips
// elsewhere.
//
// SANDBOX_AGENT_TEST_REGISTRY names a running registry to use instead
// (CI's Podman step: Podman pulls over plain HTTP only from a registry
// its registries.conf marks insecure, and .ci/podman.sh marks CI's). Tests
// must then use repositories of their own.
func Registry(t testing.TB) string {
	t.Helper()
	if r := os.Getenv("SANDBOX_AGENT_TEST_REGISTRY"); r != "" {
		return r
	}
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		prereq.Missing(t, "docker-registry is not installed (apt-get install docker-registry): %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n",
		filepath.Join(dir, "data"), addr)
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", filepath.Join(dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start docker-registry: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
			t.Fatalf("docker-registry on %s did not come up: %v\n%s", addr, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
