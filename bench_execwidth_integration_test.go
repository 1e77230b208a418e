//go:build integration

package sandboxagent_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/runtime/docker"
	"github.com/sandbox-agent/sandbox-agent/runtime/execlimit"
	"github.com/sandbox-agent/sandbox-agent/runtime/startlimit"
)

// swapGate is an exec gate whose queue a benchmark changes between
// rounds (nil: no queue), so one set of sandboxes serves every width.
type swapGate struct {
	q atomic.Pointer[execlimit.Queue]
}

func (g *swapGate) Acquire(ctx context.Context) (func(), error) {
	if q := g.q.Load(); q != nil {
		return q.Acquire(ctx)
	}
	return func() {}, nil
}

// BenchmarkExecWidth measures exec throughput and latency against the
// exec queue's width (max_concurrent_execs), the figures its default is
// chosen from: N sandboxes (SANDBOX_AGENT_SCALE_N, default 50) on the
// test image loop on execs of `true` together (scaleExecs each), once per
// width of SANDBOX_AGENT_EXEC_WIDTHS (default 0,1,2,4,8,16,0; 0: no
// queue, the baseline, measured first and again last to show drift).
// Ratios are against the first round without a queue, in the same run:
//
//	go test -tags integration -run '^$' -bench '^BenchmarkExecWidth$' -benchtime 1x -timeout 30m .
func BenchmarkExecWidth(b *testing.B) {
	n := scaleDefaultN
	if v := os.Getenv("SANDBOX_AGENT_SCALE_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("SANDBOX_AGENT_SCALE_N=%q: want a positive integer", v)
		}
	}
	widths := []int{0, 1, 2, 4, 8, 16, 0}
	if v := os.Getenv("SANDBOX_AGENT_EXEC_WIDTHS"); v != "" {
		widths = nil
		for _, f := range strings.Split(v, ",") {
			w, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || w < 0 {
				b.Fatalf("SANDBOX_AGENT_EXEC_WIDTHS=%q: want widths (0: no queue) separated by commas", v)
			}
			widths = append(widths, w)
		}
	}
	testenv.Runtime(b) // the engine answers, or the benchmark fails under CI
	gate := &swapGate{}
	rt, err := docker.New(context.Background(), docker.Options{ExecGate: gate})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	starts := startlimit.Wrap(rt, startlimit.DefaultWidth)

	run := randHex(6)
	sbs := make([]*sandboxagent.Sandbox, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range sbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			sbs[i], errs[i] = sandboxagent.NewSandbox(ctx, starts, sandboxagent.SandboxOptions{
				Image: testenv.Image(), Config: testenv.Config(), Labels: map[string]string{scaleLabel: run},
			})
		}()
	}
	wg.Wait()
	defer func() {
		for _, sb := range sbs {
			if sb != nil {
				wg.Add(1)
				go func() { defer wg.Done(); sb.Close() }()
			}
		}
		wg.Wait()
	}()
	for i, err := range errs {
		if err != nil {
			b.Fatalf("sandbox %d: %v", i, err)
		}
	}

	b.ResetTimer()
	var tbl strings.Builder
	fmt.Fprintf(&tbl, "exec width: %d sandboxes looping on %d execs of `true` each, together; ratios against the first round without a queue\n", n, scaleExecs)
	fmt.Fprintf(&tbl, "%-9s %8s %7s %9s %9s %8s %11s %11s  %s\n", "width", "execs/s", "ratio", "p50 ms", "p99 ms", "p99/p50", "queue p50", "queue p99", "load average")
	var base float64
	for _, w := range widths {
		if w > 0 {
			gate.q.Store(execlimit.New(w))
		} else {
			gate.q.Store(nil)
		}
		lat := make([][]time.Duration, n)
		waits := make([][]time.Duration, n)
		var failed atomic.Int32
		t0 := time.Now()
		for i, sb := range sbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range scaleExecs {
					t := time.Now()
					res, err := sb.Exec(context.Background(), []string{"true"})
					if err != nil || res.ExitCode != 0 {
						b.Errorf("width %d: exec true: %+v, %v", w, res, err)
						failed.Add(1)
						return
					}
					lat[i] = append(lat[i], time.Since(t))
					waits[i] = append(waits[i], res.QueueWait)
				}
			}()
		}
		wg.Wait()
		wall := time.Since(t0)
		if failed.Load() > 0 {
			b.Fatalf("width %d: %d sandboxes failed", w, failed.Load())
		}
		var all, qs []time.Duration
		for i := range lat {
			all = append(all, lat[i]...)
			qs = append(qs, waits[i]...)
		}
		tput := float64(len(all)) / wall.Seconds()
		if base == 0 {
			base = tput
		}
		label := strconv.Itoa(w)
		if w == 0 {
			label = "no queue"
		}
		p50, p99 := pct(all, 50), pct(all, 99)
		fmt.Fprintf(&tbl, "%-9s %8.1f %7.2f %9.1f %9.1f %8.1f %11.1f %11.1f  %s\n", label, tput, tput/base,
			float64(p50)/1e6, float64(p99)/1e6, float64(p99)/float64(p50), float64(pct(qs, 50))/1e6, float64(pct(qs, 99))/1e6, loadAvg())
		b.ReportMetric(tput, "execs/s-w"+strconv.Itoa(w))
	}
	fmt.Print(tbl.String())
}
