//go:build integration

package docker_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/runtime/docker"
	"github.com/sandbox-agent/sandbox-agent/runtime/execlimit"
	"github.com/sandbox-agent/sandbox-agent/runtime/runtimetest"
)

// gated is a runtime of the test engine whose execs go through q.
func gated(t *testing.T, q *execlimit.Queue) *docker.Runtime {
	t.Helper()
	testenv.Runtime(t) // the engine answers (or the test fails under CI)
	rt, err := docker.New(context.Background(), docker.Options{ExecGate: q})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// A long command holds its exec slot only while the engine starts it: at
// width 1, short execs run to their end while a `sleep 30` runs. Held
// for the command's life, the slot would keep them queued until it ends.
func TestIntegrationExecGateLongExecHoldsNoSlot(t *testing.T) {
	q := execlimit.New(1)
	rt := gated(t, q)
	sb := testenv.Sandbox(t, testenv.Runtime(t), sandboxagent.SandboxOptions{})

	sleepCtx, stopSleep := context.WithCancel(context.Background())
	defer stopSleep()
	sleeping := make(chan error, 1)
	t0 := time.Now()
	go func() {
		_, err := rt.Exec(sleepCtx, sb.ID(), sandboxagent.RuntimeExec{Cmd: []string{"sleep", "30"}})
		sleeping <- err
	}()
	// The slot comes back at the start hold's end (the sleep prints nothing).
	for {
		if held, _ := q.Stats(); held == 0 {
			break
		}
		if time.Since(t0) > 20*time.Second {
			t.Fatal("the sleep holds its exec slot after 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		var out bytes.Buffer
		code, err := rt.Exec(ctx, sb.ID(), sandboxagent.RuntimeExec{Cmd: []string{"echo", "hi"}, Stdout: &out})
		cancel()
		if err != nil || code != 0 || out.String() != "hi\n" {
			t.Fatalf("exec %d beside the sleep: exit %d, %q, %v", i, code, out.String(), err)
		}
	}
	select {
	case err := <-sleeping:
		t.Fatalf("the sleep ended before the short execs (%v after %s): the test proves nothing", err, time.Since(t0))
	default:
	}
	if held, waiting := q.Stats(); held != 0 || waiting != 0 {
		t.Errorf("after the short execs: %d held, %d waiting", held, waiting)
	}
	stopSleep() // detaches; Close removes the container and the sleep
	if err := <-sleeping; err == nil {
		t.Error("the detached sleep returned no error")
	}
	if held, _ := q.Stats(); held != 0 {
		t.Errorf("%d slots held after the sleep detached", held)
	}
}

// seenWriter reports each write's bytes and the queue's held count at
// that moment (the slot's state once the output came out of the stream).
type seenWriter struct {
	q    *execlimit.Queue
	seen chan int
}

func (w seenWriter) Write(p []byte) (int, error) {
	held, _ := w.q.Stats()
	select {
	case w.seen <- held:
	default:
	}
	return len(p), nil
}

// The slot goes back when the process shows it runs (its first output),
// not at the stream's end: with a start hold far longer than the test, an
// exec that prints then sleeps holds no slot once its output arrives.
func TestIntegrationExecGateReleasedAtStart(t *testing.T) {
	testenv.Runtime(t)
	q := execlimit.New(1)
	rt, err := docker.New(context.Background(), docker.Options{ExecGate: q, ExecStartHold: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	sb := testenv.Sandbox(t, testenv.Runtime(t), sandboxagent.SandboxOptions{})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := seenWriter{q: q, seen: make(chan int, 1)}
	ended := make(chan error, 1)
	go func() {
		_, err := rt.Exec(ctx, sb.ID(), sandboxagent.RuntimeExec{Cmd: []string{"sh", "-c", "echo started; exec sleep 60"}, Stdout: w})
		ended <- err
	}()
	select {
	case held := <-w.seen:
		if held != 0 {
			t.Fatalf("%d slots held once the command printed: the slot waits for the stream's end", held)
		}
	case err := <-ended:
		t.Fatalf("the exec ended before printing: %v", err)
	}
	// The slot is free for another exec while the first still runs.
	var out bytes.Buffer
	if code, err := rt.Exec(ctx, sb.ID(), sandboxagent.RuntimeExec{Cmd: []string{"echo", "hi"}, Stdout: &out}); err != nil || code != 0 || out.String() != "hi\n" {
		t.Fatalf("exec beside the running one: exit %d, %q, %v", code, out.String(), err)
	}
	select {
	case err := <-ended:
		t.Fatalf("the sleep ended early (%v): the test proves nothing", err)
	default:
	}
	cancel()
	<-ended
	if held, waiting := q.Stats(); held != 0 || waiting != 0 {
		t.Errorf("after both execs: %d held, %d waiting", held, waiting)
	}
}

// An exec waiting for the engine's queue reports the wait apart, through
// the context the Sandbox gives it; a wait cut by its context holds no
// slot and reports the context's error.
func TestIntegrationExecGateQueueWait(t *testing.T) {
	q := execlimit.New(1)
	rt := gated(t, q)
	sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{}) // its own execs go through q too

	hold, err := q.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	const held = 300 * time.Millisecond
	time.AfterFunc(held, hold)
	ctx, wait := sandboxagent.WithExecQueueWait(context.Background())
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t0 := time.Now()
	code, err := rt.Exec(ctx, sb.ID(), sandboxagent.RuntimeExec{Cmd: []string{"true"}})
	total := time.Since(t0)
	if err != nil || code != 0 {
		t.Fatalf("exec after the wait: exit %d, %v", code, err)
	}
	if w := wait(); w < held-10*time.Millisecond || w > total {
		t.Errorf("queue wait %s, want about %s (the exec took %s)", w, held, total)
	}

	// Through the Sandbox: ExecResult.QueueWait is that wait.
	hold, _ = q.Acquire(context.Background())
	time.AfterFunc(held, hold)
	res, err := sb.Exec(context.Background(), []string{"true"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Sandbox.Exec: %+v, %v", res, err)
	}
	if res.QueueWait < held-10*time.Millisecond || res.QueueWait > res.Duration {
		t.Errorf("ExecResult.QueueWait %s, want about %s (Duration %s)", res.QueueWait, held, res.Duration)
	}

	hold, _ = q.Acquire(context.Background())
	defer hold()
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if _, err := rt.Exec(short, sb.ID(), sandboxagent.RuntimeExec{Cmd: []string{"true"}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("exec whose context ends in the queue: %v, want DeadlineExceeded", err)
	}
	if h, w := q.Stats(); h != 1 || w != 0 {
		t.Errorf("after the cut wait: %d held, %d waiting, want 1, 0", h, w)
	}
}

// The runtime contract holds through an exec queue of width 1: timeouts
// (whose kill script is another exec while the command runs), limits,
// streaming, stdin and files all work with one exec start at a time.
func TestIntegrationContractExecGate(t *testing.T) {
	rt := gated(t, execlimit.New(1))
	if _, err := rt.Client().ImageInspect(context.Background(), testenv.Image()); cerrdefs.IsNotFound(err) {
		prereq.Missing(t, "test image %s is missing (build it with .ci/build_base.sh)", testenv.Image())
	}
	runtimetest.Run(t, runtimetest.Backend{
		Runtime: rt,
		Image:   testenv.Image(),
		Config:  testenv.Config(),
		Foreign: func(t *testing.T) func() bool { return foreign(t, rt) },
		Unreachable: func(t *testing.T) sandboxagent.Runtime {
			dead, err := docker.New(context.Background(), docker.Options{Host: "unix://" + filepath.Join(t.TempDir(), "no-engine.sock"), ExecGate: execlimit.New(1)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { dead.Close() })
			return dead
		},
	})
}
