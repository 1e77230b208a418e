//go:build integration

package sandboxagent_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/runtime/docker"
)

// privateDockerd is a dockerd of the test's own (own data, exec root,
// socket and network namespace), so restarting it disturbs nothing else.
type privateDockerd struct {
	t    *testing.T
	dir  string
	host string
	cmd  *exec.Cmd
	log  *os.File
}

func startPrivateDockerd(t *testing.T) *privateDockerd {
	t.Helper()
	if testenv.Engine(t).Name != "docker" {
		t.Skip("restarts a dockerd: Docker only")
	}
	if os.Geteuid() != 0 {
		prereq.Missing(t, "starting a private dockerd needs root")
	}
	for _, bin := range []string{"dockerd", "unshare"} {
		if _, err := exec.LookPath(bin); err != nil {
			prereq.Missing(t, "no %s binary: %v", bin, err)
		}
	}
	// Under /tmp, not t.TempDir(): a unix socket path must stay short.
	dir, err := os.MkdirTemp("/tmp", "sa-dockerd-")
	if err != nil {
		t.Fatal(err)
	}
	d := &privateDockerd{t: t, dir: dir, host: "unix://" + filepath.Join(dir, "docker.sock")}
	t.Cleanup(func() {
		d.stop()
		// Container layers are unmounted by dockerd on shutdown.
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("remove %s: %v", dir, err)
		}
	})
	d.start()
	// The test image, from the main engine.
	save := exec.Command("docker", "save", testenv.Image())
	load := exec.Command("docker", "-H", d.host, "load", "-q")
	pipe, err := save.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	load.Stdin = pipe
	var out, saveErr bytes.Buffer
	load.Stdout, load.Stderr, save.Stderr = &out, &out, &saveErr
	if err := save.Start(); err != nil {
		t.Fatal(err)
	}
	if err := load.Run(); err != nil {
		t.Fatalf("load %s into the private dockerd: %v: %s", testenv.Image(), err, out.String())
	}
	if err := save.Wait(); err != nil {
		t.Fatalf("docker save %s: %v: %s", testenv.Image(), err, saveErr.String())
	}
	return d
}

func (d *privateDockerd) start() {
	d.t.Helper()
	log, err := os.OpenFile(filepath.Join(d.dir, "dockerd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		d.t.Fatal(err)
	}
	d.log = log
	// In a network namespace of its own: a dockerd started with
	// --bridge none deletes the host's docker0 otherwise.
	d.cmd = exec.Command("unshare", "--net", "dockerd",
		"--data-root", filepath.Join(d.dir, "data"), "--exec-root", filepath.Join(d.dir, "exec"),
		"--pidfile", filepath.Join(d.dir, "docker.pid"), "-H", d.host,
		"--bridge", "none", "--iptables=false", "--ip-masq=false", "--log-level", "warn")
	d.cmd.Stdout, d.cmd.Stderr = log, log
	if err := d.cmd.Start(); err != nil {
		d.t.Fatalf("start dockerd: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		if exec.CommandContext(ctx, "docker", "-H", d.host, "version").Run() == nil {
			return
		}
		if ctx.Err() != nil {
			logText, _ := os.ReadFile(log.Name())
			d.t.Fatalf("private dockerd did not come up: %s", logText)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stop shuts dockerd down as an operator would (SIGTERM; it stops the
// running containers) and waits for it.
func (d *privateDockerd) stop() {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = d.cmd.Process.Kill()
		<-done
	}
	d.cmd = nil
	d.log.Close()
}

// lineWatcher signals when a line has been written to it.
type lineWatcher struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *lineWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func TestIntegrationFaultEngineRestartDuringExec(t *testing.T) {
	d := startPrivateDockerd(t)
	rt, err := docker.New(context.Background(), docker.Options{Host: d.host})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sb, err := sandboxagent.NewSandbox(ctx, rt, sandboxagent.SandboxOptions{Image: testenv.Image(), Config: testenv.Config()})
	if err != nil {
		t.Fatalf("NewSandbox on the private dockerd: %v", err)
	}

	out := &lineWatcher{want: "started\n", seen: make(chan struct{})}
	type outcome struct {
		res sandboxagent.ExecResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := sb.Run(ctx, sandboxagent.ExecRequest{
			Cmd: []string{"sh", "-c", "echo started; sleep 120; echo finished"}, Stdout: out, Timeout: 3 * time.Minute,
		})
		done <- outcome{res, err}
	}()
	select {
	case <-out.seen:
	case o := <-done:
		t.Fatalf("the command ended before the restart: %+v %v", o.res, o.err)
	case <-ctx.Done():
		t.Fatal("the command never started")
	}

	restarted := time.Now()
	d.stop()
	var o outcome
	select {
	case o = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("Run still blocked 2 minutes after dockerd went down")
	}
	t.Logf("Run returned %v after dockerd stopped: exit %d, err %v", time.Since(restarted), o.res.ExitCode, o.err)
	if o.err == nil {
		t.Errorf("a command cut off by an engine shutdown returned no error (exit %d)", o.res.ExitCode)
	} else if !errors.Is(o.err, sandboxagent.ErrEngineUnavailable) && !errors.Is(o.err, sandboxagent.ErrContainerNotFound) {
		t.Errorf("want ErrEngineUnavailable or ErrContainerNotFound, got %v", o.err)
	}
	if string(o.res.Stdout) != "started\n" {
		t.Errorf("output before the restart lost: %q", o.res.Stdout)
	}
	d.start()

	// Nothing is left once the sandbox is closed, and the engine is
	// usable again.
	if err := sb.Close(); err != nil {
		t.Errorf("Close after the restart: %v", err)
	}
	left, err := rt.List(ctx, map[string]string{sandboxagent.LabelManaged: "true"})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("%d sandbox container(s) left after the restart and Close: %+v", len(left), left)
	}
	sb2, err := sandboxagent.NewSandbox(ctx, rt, sandboxagent.SandboxOptions{Image: testenv.Image(), Config: testenv.Config()})
	if err != nil {
		t.Fatalf("new sandbox after the restart: %v", err)
	}
	defer sb2.Close()
	res, err := sb2.Exec(ctx, []string{"echo", "ok"})
	if err != nil || string(res.Stdout) != "ok\n" {
		t.Errorf("exec after the restart: %q %v", res.Stdout, err)
	}
}
