package execlimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitFor polls until the queue has n waiters (Acquire queues before it
// blocks, so this orders the callers).
func waitFor(t *testing.T, q *Queue, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, w := q.Stats(); w == n {
			return
		}
		if time.Now().After(deadline) {
			_, w := q.Stats()
			t.Fatalf("%d waiters, want %d", w, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestNewWidth(t *testing.T) {
	for _, tt := range []struct{ n, want int }{{0, DefaultWidth}, {-3, DefaultWidth}, {1, 1}, {16, 16}} {
		if got := New(tt.n).Width(); got != tt.want {
			t.Errorf("New(%d).Width() = %d, want %d", tt.n, got, tt.want)
		}
	}
}

// Waiters get the slot in the order they asked, whatever the scheduler:
// each slot given back goes to the first in line.
func TestFIFO(t *testing.T) {
	for _, width := range []int{1, 3} {
		q := New(width)
		ctx := context.Background()
		var held []func()
		for range width {
			r, err := q.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, r)
		}
		const n = 20
		granted := make([]chan func(), n)
		for i := range n {
			granted[i] = make(chan func(), 1)
			go func() {
				r, err := q.Acquire(ctx)
				if err != nil {
					t.Error(err)
				}
				granted[i] <- r
			}()
			waitFor(t, q, i+1) // i queues before i+1 asks
		}
		for i := range n {
			held[0]() // one slot back: waiter i, and no other, gets it
			held = held[1:]
			select {
			case r := <-granted[i]:
				held = append(held, r)
			case <-time.After(10 * time.Second):
				t.Fatalf("width %d: waiter %d not served after %d releases", width, i, i+1)
			}
			if h, w := q.Stats(); h != width || w != n-1-i {
				t.Fatalf("width %d, after serving %d: %d held, %d waiting", width, i, h, w)
			}
		}
		for _, r := range held {
			r()
		}
		if h, w := q.Stats(); h != 0 || w != 0 {
			t.Errorf("width %d: after all released: %d held, %d waiting", width, h, w)
		}
	}
}

// At most width hold a slot at once, and every slot comes back.
func TestWidthRespected(t *testing.T) {
	tests := []struct{ width, callers int }{{1, 50}, {4, 200}, {16, 40}}
	for _, tt := range tests {
		q := New(tt.width)
		var in, peak atomic.Int32
		var wg sync.WaitGroup
		for range tt.callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := q.Acquire(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				n := in.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(time.Millisecond)
				in.Add(-1)
				r()
				r() // a second release gives back nothing more
			}()
		}
		wg.Wait()
		if p := int(peak.Load()); p > tt.width || p < 1 {
			t.Errorf("width %d: peak %d holders", tt.width, p)
		}
		if h, w := q.Stats(); h != 0 || w != 0 {
			t.Errorf("width %d: %d held, %d waiting after all released", tt.width, h, w)
		}
	}
}

// A waiter whose context ends gives up holding nothing, leaves the line,
// and the ones behind it keep their turn.
func TestCancelWhileWaiting(t *testing.T) {
	q := New(1)
	hold, err := q.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := q.Acquire(ctx)
		gaveUp <- err
	}()
	waitFor(t, q, 1)
	behind := make(chan func(), 1)
	go func() {
		r, err := q.Acquire(context.Background())
		if err != nil {
			t.Error(err)
		}
		behind <- r
	}()
	waitFor(t, q, 2)
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v, want context.Canceled", err)
	}
	if h, w := q.Stats(); h != 1 || w != 1 {
		t.Fatalf("after the cancel: %d held, %d waiting, want 1, 1", h, w)
	}
	hold()
	r := <-behind // the one behind got the slot the cancelled one left
	if h, w := q.Stats(); h != 1 || w != 0 {
		t.Fatalf("handed on: %d held, %d waiting, want 1, 0", h, w)
	}
	r()
	if h, _ := q.Stats(); h != 0 {
		t.Fatalf("%d held after all released", h)
	}
	// A context already done never takes a free slot's place in a line.
	done, cancel2 := context.WithCancel(context.Background())
	cancel2()
	hold, _ = q.Acquire(context.Background())
	if _, err := q.Acquire(done); !errors.Is(err, context.Canceled) {
		t.Errorf("done context on a full queue: %v", err)
	}
	hold()
	if h, w := q.Stats(); h != 0 || w != 0 {
		t.Errorf("%d held, %d waiting, want none", h, w)
	}
}

// Many waiters cancelled as slots are released: whichever way each race
// goes (granted or gone), no slot leaks and none is held twice.
func TestCancelRaceNoLeak(t *testing.T) {
	q := New(2)
	var in, peak atomic.Int32
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%7)*100*time.Microsecond)
			defer cancel()
			r, err := q.Acquire(ctx)
			if err != nil {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Error(err)
				}
				return
			}
			n := in.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(50 * time.Microsecond)
			in.Add(-1)
			r()
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > 2 {
		t.Errorf("peak %d holders, width 2", p)
	}
	if h, w := q.Stats(); h != 0 || w != 0 {
		t.Errorf("%d held, %d waiting after all ended", h, w)
	}
	// Every slot is still there to take.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for range 2 {
		if _, err := q.Acquire(ctx); err != nil {
			t.Fatalf("a slot leaked: %v", err)
		}
	}
}
