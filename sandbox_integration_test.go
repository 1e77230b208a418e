//go:build integration

// Integration tests: they start real containers on the engine named by
// DOCKER_HOST. Run with: go test -tags integration ./...
//
// What every Runtime must do (exec, timeouts, files, hostile downloads,
// keepalive, gc, limits, hardening) is the contract suite in
// runtime/runtimetest, run by runtime/docker's TestIntegrationContract;
// this package keeps what goes beyond it: agents, the network boundary,
// engine restarts, an owner process that dies.
package sandboxagent_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
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
	sb, err := sandboxagent.NewSandbox(ctx, rt, sandboxagent.SandboxOptions{
		Image: testenv.Image(), Keepalive: ka, Config: testenv.Config(),
		NoInit: os.Getenv("SANDBOX_AGENT_TEST_NOINIT") == "1",
	})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	if os.Getenv("SANDBOX_AGENT_TEST_LEFTOVERS") == "1" {
		if err := leaveLeftovers(ctx, sb); err != nil {
			fmt.Println("ERR", err)
			return 1
		}
	}
	fmt.Println("ID", sb.ID())
	time.Sleep(time.Hour)
	return 0
}

// leaveLeftovers leaves what an agent leaves behind in sb: a process
// detached from its exec (setsid nohup), and a long exec whose stdin this
// process holds open, as the long-lived CLIs' are.
func leaveLeftovers(ctx context.Context, sb *sandboxagent.Sandbox) error {
	res, err := sb.Exec(ctx, []string{"sh", "-c", "setsid nohup sleep 1000 >/dev/null 2>&1 & echo $!"})
	if err != nil || res.ExitCode != 0 {
		return fmt.Errorf("leftover: %v (exit %d, %q)", err, res.ExitCode, res.Stderr)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() {
		_, err := sb.Run(context.WithoutCancel(ctx), sandboxagent.ExecRequest{Cmd: []string{"cat"}, Stdin: inR, Stdout: outW})
		outW.CloseWithError(fmt.Errorf("held exec ended: %v", err))
	}()
	// Its echo says the exec runs.
	if _, err := io.WriteString(inW, "up\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil || line != "up\n" {
		return fmt.Errorf("held exec: %q %v", line, err)
	}
	go io.Copy(io.Discard, outR)
	ps, err := sb.Exec(ctx, []string{"sh", "-c", `for p in /proc/[0-9]*/comm; do read -r c < "$p" && echo "$c"; done`})
	if err != nil || !strings.Contains(string(ps.Stdout), "sleep\n") {
		return fmt.Errorf("no leftover sleep among %q: %v", ps.Stdout, err)
	}
	return nil
}

// startOrphan runs a child process that starts a sandbox (with env, the
// child's options), then SIGKILLs it.
func startOrphan(t *testing.T, keepalive time.Duration, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SANDBOX_AGENT_TEST_CHILD=1", "SANDBOX_AGENT_TEST_KEEPALIVE="+keepalive.String())
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	line = strings.TrimSpace(line)
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

// The owner is SIGKILLed after an exec left a detached process behind
// and while it held a long exec's stdin open: only a command the host
// started keeps a sandbox alive, so the leftover does not, and the held
// exec ends when its stdin does. With and without an init as pid 1.
func TestIntegrationKeepaliveIgnoresLeftovers(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	const ka = 4 * time.Second
	for _, c := range []struct{ name, noInit string }{{"init", "0"}, {"no init", "1"}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			id := startOrphan(t, ka, "SANDBOX_AGENT_TEST_LEFTOVERS=1", "SANDBOX_AGENT_TEST_NOINIT="+c.noInit)
			t.Cleanup(func() { rt.Remove(context.Background(), id) })
			start := time.Now()
			waitGone(t, rt, id, ka+30*time.Second)
			t.Logf("gone %v after the owner's SIGKILL (keepalive %v)", time.Since(start).Round(100*time.Millisecond), ka)
		})
	}
}

// The positive control: a command the host started keeps the sandbox
// alive past its keepalive while it runs, a leftover beside it or not;
// once it ends, the leftover alone does not (the owner is still alive).
func TestIntegrationKeepaliveHostExec(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	ctx := ctxT(t)
	const ka = 4 * time.Second
	sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{Keepalive: ka, Config: testenv.Config()})
	if res, err := sb.Exec(ctx, []string{"sh", "-c", "setsid nohup sleep 1000 >/dev/null 2>&1 &"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("leftover: %+v %v", res, err)
	}
	done := make(chan error, 1)
	go func() {
		res, err := sb.Exec(ctx, []string{"sleep", "20"})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d", res.ExitCode)
		}
		done <- err
	}()
	time.Sleep(3 * ka)
	if st, err := sb.Inspect(ctx); err != nil || !st.Running {
		t.Fatalf("sandbox gone %v into a 20 s exec with a %v keepalive: %+v %v", 3*ka, ka, st, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("sleep 20: %v", err)
	}
	start := time.Now()
	waitGone(t, rt, sb.ID(), ka+30*time.Second)
	t.Logf("gone %v after the exec ended (keepalive %v)", time.Since(start).Round(100*time.Millisecond), ka)
}

// MaxLifetime ends a sandbox however busy it is.
func TestIntegrationMaxLifetime(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	ctx := ctxT(t)
	const life = 6 * time.Second
	begin := time.Now()
	sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{MaxLifetime: life, Config: testenv.Config()}) // keepalive 10 min
	st, err := sb.Inspect(ctx)
	if err != nil || st.Labels[sandboxagent.LabelMaxLifetime] != "6" {
		t.Fatalf("label %s=%q: %v", sandboxagent.LabelMaxLifetime, st.Labels[sandboxagent.LabelMaxLifetime], err)
	}
	go sb.Exec(ctx, []string{"sleep", "120"})
	waitGone(t, rt, sb.ID(), time.Until(begin.Add(life+30*time.Second)))
	t.Logf("gone %v after NewSandbox began (max lifetime %v)", time.Since(begin).Round(100*time.Millisecond), life)
}
