//go:build integration

// Integration tests: they start real containers on the engine named by
// DOCKER_HOST. Run with: go test -tags integration ./...
//
// What every Runtime must do (exec, timeouts, files, hostile downloads,
// keepalive, gc, limits, hardening) is the contract suite in
// internal/runtimetest, run by runtime/docker's TestIntegrationContract;
// this package keeps what goes beyond it: agents, the network boundary,
// engine restarts, an owner process that dies.
package sandboxagent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/runtime/docker"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// waitGone polls until the container no longer exists.
func waitGone(t *testing.T, rt sandboxagent.Runtime, id string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		_, err := rt.Inspect(context.Background(), id)
		if errors.Is(err, sandboxagent.ErrContainerNotFound) {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("container %s still exists after %v", id, within)
}

// The child mode of this test binary: start a sandbox, print its id, and
// wait to be killed.
func TestMain(m *testing.M) {
	if os.Getenv("SANDBOX_AGENT_TEST_CHILD") == "1" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

func childMain() int {
	ctx := context.Background()
	rt, err := docker.New(ctx, docker.Options{})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	ka, _ := time.ParseDuration(os.Getenv("SANDBOX_AGENT_TEST_KEEPALIVE"))
	sb, err := sandboxagent.NewSandbox(ctx, rt, sandboxagent.SandboxOptions{Image: testenv.Image(), Keepalive: ka, Config: testenv.Config()})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	fmt.Println("ID", sb.ID())
	time.Sleep(time.Hour)
	return 0
}

// startOrphan runs a child process that starts a sandbox, then SIGKILLs it.
func startOrphan(t *testing.T, keepalive time.Duration) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SANDBOX_AGENT_TEST_CHILD=1", "SANDBOX_AGENT_TEST_KEEPALIVE="+keepalive.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, _ := out.Read(buf)
	line := strings.TrimSpace(string(buf[:n]))
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	id, ok := strings.CutPrefix(line, "ID ")
	if !ok {
		t.Fatalf("child: %q", line)
	}
	return id
}

// The process that started a sandbox is SIGKILLed (no Close): the
// sandbox removes itself after its keepalive.
func TestIntegrationOrphanRemovesItself(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	id := startOrphan(t, 3*time.Second)
	t.Cleanup(func() { rt.Remove(context.Background(), id) })
	waitGone(t, rt, id, time.Minute)
}
