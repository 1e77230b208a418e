package docker

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

type countGate struct{ held atomic.Int32 }

func (g *countGate) Acquire(context.Context) (func(), error) {
	g.held.Add(1)
	return func() { g.held.Add(-1) }, nil
}

// The start hold gives the slot back at the stream's first byte, at once
// (a negative hold), or when the hold ends, whichever comes first; never
// twice (admit's release is idempotent); and stopping it after the stream
// ended leaves no timer to fire.
func TestHoldUntilStarted(t *testing.T) {
	for _, tc := range []struct {
		name        string
		hold        time.Duration
		stream      string
		heldAtStart int32 // before anything is read
		heldAfter   int32 // after the first Read
	}{
		{"first byte", time.Hour, "out", 1, 0},
		{"silent stream keeps it", time.Hour, "", 1, 1},
		{"at the attach answer", -1, "out", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &countGate{}
			r := &Runtime{execGate: g, startHold: tc.hold}
			release, err := r.admit(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			src, stop := r.holdUntilStarted(strings.NewReader(tc.stream), release)
			defer stop()
			if got := g.held.Load(); got != tc.heldAtStart {
				t.Fatalf("held before reading: %d, want %d", got, tc.heldAtStart)
			}
			_, _ = src.Read(make([]byte, 8))
			if got := g.held.Load(); got != tc.heldAfter {
				t.Fatalf("held after the first read: %d, want %d", got, tc.heldAfter)
			}
			_, _ = io.Copy(io.Discard, src)
			release() // the stream's end, as Exec does
			release()
			if got := g.held.Load(); got != 0 {
				t.Fatalf("held after the end: %d", got)
			}
		})
	}

	t.Run("hold ends", func(t *testing.T) {
		g := &countGate{}
		r := &Runtime{execGate: g, startHold: time.Millisecond}
		release, _ := r.admit(context.Background())
		pr, pw := io.Pipe() // a silent stream that stays open
		defer pw.Close()
		_, stop := r.holdUntilStarted(pr, release)
		defer stop()
		for g.held.Load() != 0 {
			time.Sleep(time.Millisecond) // the test's own timeout bounds it
		}
		release()
		if got := g.held.Load(); got != 0 {
			t.Fatalf("released twice: held %d", got)
		}
	})

	t.Run("no gate", func(t *testing.T) {
		r := &Runtime{}
		in := strings.NewReader("x")
		src, stop := r.holdUntilStarted(in, func() { t.Error("released without a gate") })
		stop()
		if src != io.Reader(in) {
			t.Error("the stream was wrapped without a gate")
		}
	})
}
