package sandboxagent

import (
	"context"
	"testing"
	"time"
)

func TestExecQueueWait(t *testing.T) {
	AddExecQueueWait(context.Background(), time.Second) // no total: nothing to add to, no panic
	ctx, wait := WithExecQueueWait(context.Background())
	if w := wait(); w != 0 {
		t.Fatalf("fresh total %s", w)
	}
	// A runtime's exec may wait twice (its start, then its exit-code
	// inspect): the waits add up, through derived contexts too.
	AddExecQueueWait(ctx, 200*time.Millisecond)
	sub, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	AddExecQueueWait(sub, 50*time.Millisecond)
	if w := wait(); w != 250*time.Millisecond {
		t.Errorf("total %s, want 250ms", w)
	}
	// A nested total is its own: the outer one does not see it.
	inner, innerWait := WithExecQueueWait(ctx)
	AddExecQueueWait(inner, time.Second)
	if w, iw := wait(), innerWait(); w != 250*time.Millisecond || iw != time.Second {
		t.Errorf("outer %s, inner %s", w, iw)
	}
}
