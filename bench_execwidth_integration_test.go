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

// swapExec sends every exec to the runtime of the current round (its own
// queue and hold, or none at all: a runtime without a gate, the true
// baseline), so one set of sandboxes serves every round.
type swapExec struct {
	sandboxagent.Runtime
	cur atomic.Pointer[docker.Runtime]
}

func (s *swapExec) Exec(ctx context.Context, id string, req sandboxagent.RuntimeExec) (int, error) {
	return s.cur.Load().Exec(ctx, id, req)
}

// execRound is one row of BenchmarkExecWidth: a queue width (0: no gate)
// and the start hold (0: docker.DefaultExecStartHold).
type execRound struct {
	width int
	hold  time.Duration
}

func (r execRound) String() string {
	if r.width == 0 {
		return "none"
	}
	if r.hold == 0 {
		return strconv.Itoa(r.width)
	}
	return fmt.Sprintf("%d/%s", r.width, r.hold)
}

// BenchmarkExecWidth measures exec throughput and latency against the
// exec queue's width (max_concurrent_execs), the figures its default is
// chosen from: N sandboxes (SANDBOX_AGENT_SCALE_N, default 50) on the
// test image loop on execs of `true` together (scaleExecs each), once per
// round of SANDBOX_AGENT_EXEC_WIDTHS (default 0,4,8,16,32,0): a width, 0
// for a runtime without any gate (the baseline, measured first and again
// last to show drift), optionally with the start hold after a slash
// (docker.Options.ExecStartHold, e.g. 32/250ms, 32/-1ns: release at the
// attach answer). Ratios are against the first round without a queue, in
// the same run:
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
	spec := "0,4,8,16,32,0"
	if v := os.Getenv("SANDBOX_AGENT_EXEC_WIDTHS"); v != "" {
		spec = v
	}
	var rounds []execRound
	for _, f := range strings.Split(spec, ",") {
		w, h, _ := strings.Cut(strings.TrimSpace(f), "/")
		var r execRound
		var err error
		if r.width, err = strconv.Atoi(w); err != nil || r.width < 0 {
			b.Fatalf("SANDBOX_AGENT_EXEC_WIDTHS=%q: want widths (0: no queue) separated by commas, each maybe with /hold", spec)
		}
		if h != "" {
			if r.hold, err = time.ParseDuration(h); err != nil {
				b.Fatalf("SANDBOX_AGENT_EXEC_WIDTHS=%q: hold %q: %v", spec, h, err)
			}
		}
		rounds = append(rounds, r)
	}
	testenv.Runtime(b) // the engine answers, or the benchmark fails under CI
	runtimeFor := func(r execRound) *docker.Runtime {
		opts := docker.Options{ExecStartHold: r.hold}
		if r.width > 0 {
			opts.ExecGate = execlimit.New(r.width)
		}
		rt, err := docker.New(context.Background(), opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { rt.Close() })
		return rt
	}
	base0 := runtimeFor(execRound{})
	sw := &swapExec{Runtime: base0}
	sw.cur.Store(base0)
	starts := startlimit.Wrap(sw, startlimit.DefaultWidth)

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
	fmt.Fprintf(&tbl, "exec width: %d sandboxes looping on %d execs of `true` each, together; width/start hold (none: no gate); ratios against the first round without a gate\n", n, scaleExecs)
	fmt.Fprintf(&tbl, "%-11s %8s %7s %9s %9s %8s %11s %11s  %s\n", "width", "execs/s", "ratio", "p50 ms", "p99 ms", "p99/p50", "queue p50", "queue p99", "load average")
	var base float64
	for _, round := range rounds {
		sw.cur.Store(runtimeFor(round))
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
						b.Errorf("round %s: exec true: %+v, %v", round, res, err)
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
			b.Fatalf("round %s: %d sandboxes failed", round, failed.Load())
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
		label := round.String()
		p50, p99 := pct(all, 50), pct(all, 99)
		fmt.Fprintf(&tbl, "%-11s %8.1f %7.2f %9.1f %9.1f %8.1f %11.1f %11.1f  %s\n", label, tput, tput/base,
			float64(p50)/1e6, float64(p99)/1e6, float64(p99)/float64(p50), float64(pct(qs, 50))/1e6, float64(pct(qs, 99))/1e6, loadAvg())
		b.ReportMetric(tput, "execs/s-"+strings.ReplaceAll(label, "/", "-"))
	}
	fmt.Print(tbl.String())
}
