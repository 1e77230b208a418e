//go:build integration

package sandboxagent_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/runtime/startlimit"
)

// RunOnce: the command as the container's main process. On Podman, which
// does not record OOM kills, it refuses before making anything (the
// command line then takes NewSandbox and Run).
func TestIntegrationRunOnce(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	ctx := ctxT(t)
	opts := func(name string) sandboxagent.SandboxOptions {
		return sandboxagent.SandboxOptions{Image: testenv.Image(), Config: testenv.Config(), Name: "sandbox-agent-once-" + name + "-" + strconv.Itoa(os.Getpid())}
	}
	// The engine removes the container as the command exits (its
	// auto-remove), a moment after RunOnce may return.
	gone := func(t *testing.T, name string) {
		t.Helper()
		waitGone(t, rt, name, 30*time.Second)
	}
	// No sandbox's output is logged by the engine (to the host's disk).
	if st, err := testenv.Sandbox(t, rt, opts("logs")).Inspect(ctx); err != nil || st.LogDriver != "none" {
		t.Fatalf("a sandbox's log driver: %q, %v; want none", st.LogDriver, err)
	}
	if testenv.Engine(t).Name == "podman" {
		if sandboxagent.CanRunOnce(ctx, rt, opts("podman")) {
			t.Fatal("CanRunOnce on Podman, which does not record OOM kills")
		}
		_, err := sandboxagent.RunOnce(ctx, rt, opts("podman"), sandboxagent.ExecRequest{Cmd: []string{"true"}})
		if !errors.Is(err, sandboxagent.ErrUnsupportedByRuntime) {
			t.Fatalf("RunOnce on Podman: %v, want ErrUnsupportedByRuntime", err)
		}
		gone(t, opts("podman").Name)
		return
	}
	// Through the start queue, as the command line's runtime may be.
	for name, rt := range map[string]sandboxagent.Runtime{"engine": rt, "startlimit": startlimit.Wrap(rt, 2)} {
		t.Run(name, func(t *testing.T) {
			if !sandboxagent.CanRunOnce(ctx, rt, opts("x")) {
				t.Fatal("CanRunOnce false on Docker")
			}
			o := opts("out-" + name)
			var live bytes.Buffer
			res, err := sandboxagent.RunOnce(ctx, rt, o, sandboxagent.ExecRequest{
				Cmd:  []string{"sh", "-c", `echo "$GREETING $(id -u) $(pwd)"; grep -E '^(NoNewPrivs|Seccomp|CapEff):' /proc/self/status; echo e >&2; exit 3`},
				Env:  map[string]string{"GREETING": "hi"},
				User: "65534", WorkDir: "/tmp", Stdout: &live,
			})
			want := "hi 65534 /tmp\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n"
			if err != nil || res.ExitCode != 3 || string(res.Stdout) != want || string(res.Stderr) != "e\n" || live.String() != want || res.TimedOut {
				t.Fatalf("got %+v stdout %q stderr %q live %q, %v; want exit 3, stdout %q", res, res.Stdout, res.Stderr, live.String(), err, want)
			}
			gone(t, o.Name)
		})
	}
	t.Run("timeout kills the whole tree", func(t *testing.T) {
		o := opts("timeout")
		res, err := sandboxagent.RunOnce(ctx, rt, o, sandboxagent.ExecRequest{
			Cmd: []string{"sh", "-c", "echo started; sleep 600 & sleep 600"}, Timeout: 2 * time.Second,
		})
		if err != nil || !res.TimedOut || res.ExitCode != 124 || string(res.Stdout) != "started\n" {
			t.Fatalf("got %+v stdout %q, %v; want a timeout (124) with the output so far", res, res.Stdout, err)
		}
		gone(t, o.Name)
	})
	t.Run("the lifetime bounds it without the host", func(t *testing.T) {
		// The host's timeout (a minute) is not what ends it: the watchdog
		// in the sandbox kills the tree at the lifetime (SIGKILL: 137).
		o := opts("lifetime")
		o.MaxLifetime = 2 * time.Second
		res, err := sandboxagent.RunOnce(ctx, rt, o, sandboxagent.ExecRequest{
			Cmd: []string{"sh", "-c", "sleep 600 & sleep 600"}, Timeout: time.Minute,
		})
		if err != nil || res.TimedOut || res.ExitCode != 137 {
			t.Fatalf("got %+v, %v; want exit 137 from the lifetime's watchdog, not the host's timeout", res, err)
		}
		gone(t, o.Name)
	})
	t.Run("a cancelled context kills it and says so", func(t *testing.T) {
		o := opts("cancel")
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		// Cancelled once the command runs (its first output), not after
		// a time a loaded machine may not have started it in.
		res, err := sandboxagent.RunOnce(cctx, rt, o, sandboxagent.ExecRequest{
			Cmd: []string{"sh", "-c", "echo up; exec sleep 600"}, Stdout: cancelOnWrite(cancel),
		})
		if !errors.Is(err, context.Canceled) || !res.TimedOut || res.ExitCode != 124 {
			t.Fatalf("got %+v, %v; want TimedOut and context.Canceled", res, err)
		}
		gone(t, o.Name)
	})
	t.Run("an OOM kill is a ResourceError", func(t *testing.T) {
		o := opts("oom")
		o.MemoryBytes = 64 << 20
		res, err := sandboxagent.RunOnce(ctx, rt, o, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", "echo start; x=a; while :; do x=$x$x; done"}})
		var rerr *sandboxagent.ResourceError
		if !errors.As(err, &rerr) || !errors.Is(err, sandboxagent.ErrOutOfMemory) || res.ExitCode != 137 || rerr.Limit != 64<<20 {
			t.Fatalf("got %+v, %v; want exit 137 and an out-of-memory ResourceError", res, err)
		}
		gone(t, o.Name)
	})
	t.Run("a command not found exits 127, as in a shell", func(t *testing.T) {
		o := opts("notfound")
		res, err := sandboxagent.RunOnce(ctx, rt, o, sandboxagent.ExecRequest{Cmd: []string{"no-such-command"}})
		if err != nil || res.ExitCode != 127 || !strings.Contains(string(res.Stderr), "no-such-command") || strings.Contains(string(res.Stderr), "sandbox-agent") {
			t.Fatalf("got %+v stderr %q, %v; want exit 127 and the shell's words", res, res.Stderr, err)
		}
		gone(t, o.Name)
	})
	t.Run("a missing image is ErrImageNotFound", func(t *testing.T) {
		o := opts("noimage")
		o.Image = "sandbox-agent-test/none:1"
		_, err := sandboxagent.RunOnce(ctx, rt, o, sandboxagent.ExecRequest{Cmd: []string{"true"}})
		if !errors.Is(err, sandboxagent.ErrImageNotFound) {
			t.Fatalf("got %v, want ErrImageNotFound", err)
		}
	})
	t.Run("what it cannot serve is refused before anything is made", func(t *testing.T) {
		o := opts("refused")
		o.AllowHosts = []string{"registry.npmjs.org"}
		if sandboxagent.CanRunOnce(ctx, rt, o) {
			t.Fatal("CanRunOnce with an allow-list (it needs the egress proxy)")
		}
		if _, err := sandboxagent.RunOnce(ctx, rt, o, sandboxagent.ExecRequest{Cmd: []string{"true"}}); !errors.Is(err, sandboxagent.ErrUnsupportedByRuntime) {
			t.Errorf("allow-list: %v, want ErrUnsupportedByRuntime", err)
		}
		o = opts("refused")
		o.NoInit = true
		if sandboxagent.CanRunOnce(ctx, rt, o) {
			t.Error("CanRunOnce without an init (the watchdog cannot kill pid 1)")
		}
		o = opts("refused")
		if _, err := sandboxagent.RunOnce(ctx, rt, o, sandboxagent.ExecRequest{Cmd: []string{"cat"}, Stdin: strings.NewReader("x")}); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("stdin: %v, want ErrInvalidArgument", err)
		}
		gone(t, o.Name)
	})
}

// cancelOnWrite is a writer that calls cancel at its first write.
func cancelOnWrite(cancel context.CancelFunc) io.Writer {
	return writerFunc(func(p []byte) (int, error) { cancel(); return len(p), nil })
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
