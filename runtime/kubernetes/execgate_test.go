package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/runtime/execlimit"
)

// The exec slot goes back at the command's first output.
func TestExecGateReleasedAtFirstOutput(t *testing.T) {
	q := execlimit.New(1)
	r := &Runtime{opts: Options{ExecGate: q}}
	release, err := r.admit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w := &lockedWriter{g: &writeGate{onWrite: release}, w: &out}
	if h, _ := q.Stats(); h != 1 {
		t.Fatalf("%d held before any output, want 1", h)
	}
	for range 2 {
		if _, err := w.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	release() // the end of the stream: nothing more to give back
	if h, _ := q.Stats(); h != 0 || out.String() != "xx" {
		t.Errorf("after the output: %d held, %q written", h, out.String())
	}
}

// A wait cut by its context is an error wrapping the context's, holds
// nothing, and its time is reported to the context's queue-wait total.
func TestExecGateAdmit(t *testing.T) {
	if release, err := (&Runtime{}).admit(context.Background()); err != nil {
		t.Fatalf("no gate: %v", err)
	} else {
		release()
	}
	q := execlimit.New(1)
	r := &Runtime{opts: Options{ExecGate: q}}
	hold, _ := q.Acquire(context.Background())
	defer hold()
	ctx, wait := sandboxagent.WithExecQueueWait(context.Background())
	ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := r.admit(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("admit on a full queue: %v, want DeadlineExceeded", err)
	}
	if w := wait(); w < 40*time.Millisecond {
		t.Errorf("queue wait %s, want about 50ms", w)
	}
	if h, n := q.Stats(); h != 1 || n != 0 {
		t.Errorf("%d held, %d waiting, want 1, 0", h, n)
	}
}
