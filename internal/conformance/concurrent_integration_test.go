//go:build integration

package conformance_test

import (
	"sync"
	"testing"
)

// subtest is one subtest for runConcurrently.
type subtest struct {
	name string
	f    func(t *testing.T)
}

// runConcurrently runs the subtests side by side, at most
// concurrentSubtests at once, each t.Run from its own goroutine, and
// returns when all have ended. The drivers' subtests spend most of their
// time waiting on their containers; the bound keeps a 2-core machine's
// load where the CLIs' own timing (a long-lived CLI's lines of one
// answer) stays within the verification's quiet periods.
//
// Not t.Parallel: a parallel subtest waits for one of -parallel's slots
// (GOMAXPROCS by default: 2 on a 2-core CI machine, which ran two drivers
// at a time). A subtest that does not call t.Parallel takes no slot, and
// t.Run may be called from several goroutines at once (package testing);
// each subtest's failures, logs and timing stay its own, and a FailNow
// ends only its goroutine. Subtests of these subtests must not call
// t.Parallel either (a sequential test with parallel subtests takes a
// slot again when they end).
func runConcurrently(t *testing.T, subs []subtest) {
	t.Helper()
	var wg sync.WaitGroup
	slots := make(chan struct{}, concurrentSubtests)
	for _, s := range subs {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			t.Run(s.name, s.f)
		})
	}
	wg.Wait()
}

// concurrentSubtests bounds runConcurrently: all ten subtests at once (five
// drivers, two modes) took a 2-core machine's load to about 16.
const concurrentSubtests = 4
