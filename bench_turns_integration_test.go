//go:build integration

package sandboxagent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/pool"
)

// turnsPerRun is how many turns each driver and mode runs: turn 1 (the
// session's start) and the mean of the others are reported.
const turnsPerRun = 10

// cpuScript prints the container's CPU time in nanoseconds from its
// cgroup (v2 cpu.stat usage_usec, else v1 cpuacct.usage).
const cpuScript = `if [ -r /sys/fs/cgroup/cpu.stat ]; then
  while read -r k v; do [ "$k" = usage_usec ] && echo "${v}000"; done < /sys/fs/cgroup/cpu.stat
else cat /sys/fs/cgroup/cpuacct/cpuacct.usage 2>/dev/null || cat /sys/fs/cgroup/cpuacct,cpu/cpuacct.usage; fi`

// BenchmarkTurns: per driver and mode (per-turn, and long-lived where the
// driver has one), the wall and container CPU time of turn 1 and the mean
// of turns 2..10 against a fake model that answers at once, and the round
// trip of an `exec true` in the same sandbox (the yardstick of the goal:
// turns 2+ within 8× of it). SANDBOX_AGENT_BENCH_DRIVERS (comma list)
// narrows the drivers. The work is done once whatever b.N. Run with
//
//	go test -tags integration -run '^$' -bench '^BenchmarkTurns$' -benchtime 1x -timeout 40m .
func BenchmarkTurns(b *testing.B) {
	rt := testenv.Runtime(b)
	eachMode(b, func(name string) sandboxagent.Driver { return doneDriver(b, name) },
		func(b *testing.B, drv sandboxagent.Driver, cfg sandboxagent.Config) {
			r := measureTurns(b, rt, drv, cfg)
			b.ReportMetric(r.turn1.Seconds()*1e3, "turn1-ms")
			b.ReportMetric(r.later.Seconds()*1e3, "turn2+-ms")
			b.ReportMetric(r.turn1CPU.Seconds()*1e3, "turn1-cpu-ms")
			b.ReportMetric(r.laterCPU.Seconds()*1e3, "turn2+-cpu-ms")
			b.ReportMetric(r.execTrue.Seconds()*1e3, "exec-true-ms")
			b.ReportMetric(r.later.Seconds()/r.execTrue.Seconds(), "turn2+/exec")
			p := measurePooledTurn(b, rt, drv, cfg)
			b.ReportMetric(p.turn1.Seconds()*1e3, "pool-turn1-ms")
			b.ReportMetric(p.turn1CPU.Seconds()*1e3, "pool-turn1-cpu-ms")
			b.ReportMetric(p.turn1.Seconds()/r.later.Seconds(), "pool-turn1/turn2+")
			b.ReportMetric(float64(p.idleMemory)/(1<<20), "pool-idle-MiB")
		})
}

// memoryScript prints the container's memory use in bytes from its
// cgroup (v2 memory.current, else v1 memory.usage_in_bytes).
const memoryScript = `cat /sys/fs/cgroup/memory.current 2>/dev/null || cat /sys/fs/cgroup/memory/memory.usage_in_bytes`

type pooledTurn struct {
	turn1, turn1CPU time.Duration
	idleMemory      int64 // the pooled agent's container before its turn
}

// measurePooledTurn takes an agent from a pool of one (its CLI warmed in
// the long-lived modes), closes the pool so that no refill competes for
// the CPU, and times its first turn.
func measurePooledTurn(b *testing.B, rt sandboxagent.Runtime, drv sandboxagent.Driver, cfg sandboxagent.Config) pooledTurn {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	p, err := pool.New(rt, drv, 1, sandboxagent.WithConfig(cfg))
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Wait(ctx, 1); err != nil {
		b.Fatal(err)
	}
	a, err := p.Start(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	if st := p.Stats(); st.Hits != 1 {
		b.Fatalf("pool: %+v, want a hit", st)
	}
	if err := p.Close(); err != nil {
		b.Fatal(err)
	}
	number := func(script string) int64 {
		res, err := a.Container().Exec(ctx, []string{"sh", "-c", script})
		n, perr := strconv.ParseInt(strings.TrimSpace(string(res.Stdout)), 10, 64)
		if err != nil || perr != nil {
			b.Fatalf("%s: %q %v %v", script, res.Stdout, err, perr)
		}
		return n
	}
	var r pooledTurn
	r.idleMemory = number(memoryScript)
	c0 := number(cpuScript)
	t0 := time.Now()
	reply, err := a.Ask(ctx, "turn 1: reply DONE")
	r.turn1 = time.Since(t0)
	if err != nil || reply != fakemodel.DoneText {
		b.Fatalf("pooled turn 1: %q %v", reply, err)
	}
	r.turn1CPU = time.Duration(number(cpuScript) - c0)
	return r
}

// eachMode runs fn once as the sub-benchmark DRIVER/MODE for every driver
// (SANDBOX_AGENT_BENCH_DRIVERS, a comma list, narrows them) and mode:
// per-turn, and long-lived where the driver has one. newDriver builds the
// driver; cfg is the test configuration for the mode.
func eachMode(b *testing.B, newDriver func(name string) sandboxagent.Driver, fn func(b *testing.B, drv sandboxagent.Driver, cfg sandboxagent.Config)) {
	names := drivers.Names()
	if v := os.Getenv("SANDBOX_AGENT_BENCH_DRIVERS"); v != "" {
		names = strings.Split(v, ",")
	}
	for _, name := range names {
		if _, ok := drivers.All()[name]; !ok {
			b.Fatalf("unknown driver %q", name)
		}
		drv := newDriver(name)
		for _, perTurn := range []bool{true, false} {
			_, longLived := drv.(sandboxagent.LongLived)
			if !perTurn && !longLived {
				continue
			}
			mode := "per-turn"
			if !perTurn {
				mode = "long-lived"
			}
			b.Run(name+"/"+mode, func(b *testing.B) {
				cfg := testenv.Config()
				cfg.AuditRoot = filepath.Join(b.TempDir(), "audit")
				cfg.PerTurn = perTurn
				cfg.Timeouts.Ask = 5 * time.Minute
				for b.Loop() {
					fn(b, drv, cfg)
				}
			})
		}
	}
}

type turnTimes struct {
	turn1, later, turn1CPU, laterCPU, execTrue time.Duration
}

func measureTurns(b *testing.B, rt sandboxagent.Runtime, drv sandboxagent.Driver, cfg sandboxagent.Config) turnTimes {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	a, err := sandboxagent.Start(ctx, rt, drv, sandboxagent.WithConfig(cfg))
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	cpu := func() time.Duration {
		res, err := a.Container().Exec(ctx, []string{"sh", "-c", cpuScript})
		n, perr := strconv.ParseInt(strings.TrimSpace(string(res.Stdout)), 10, 64)
		if err != nil || perr != nil {
			b.Fatalf("container CPU: %q %v %v", res.Stdout, err, perr)
		}
		return time.Duration(n)
	}
	var r turnTimes
	const execs = 20
	for i := 0; i < execs; i++ {
		t0 := time.Now()
		if _, err := a.Container().Exec(ctx, []string{"true"}); err != nil {
			b.Fatal(err)
		}
		r.execTrue += time.Since(t0)
	}
	r.execTrue /= execs
	for i := 1; i <= turnsPerRun; i++ {
		c0 := cpu()
		t0 := time.Now()
		reply, err := a.Ask(ctx, fmt.Sprintf("turn %d: reply DONE", i))
		wall := time.Since(t0)
		if err != nil || reply != fakemodel.DoneText {
			b.Fatalf("turn %d: %q %v", i, reply, err)
		}
		c := cpu() - c0
		if i == 1 {
			r.turn1, r.turn1CPU = wall, c
		} else {
			r.later += wall
			r.laterCPU += c
		}
	}
	r.later /= turnsPerRun - 1
	r.laterCPU /= turnsPerRun - 1
	return r
}

// abortsPerRun is how many turns BenchmarkAbort aborts per driver and mode.
const abortsPerRun = 3

// BenchmarkAbort: per driver and mode, the abort latency — from the
// cancel of a turn's context, while the CLI runs a tool call that never
// ends (`tail -f /dev/null`), to Stream's return — as the median of
// abortsPerRun aborted turns of one session (AbortInterrupt in the
// long-lived modes, AbortKill per turn). SANDBOX_AGENT_BENCH_DRIVERS
// narrows the drivers. Run with
//
//	go test -tags integration -run '^$' -bench '^BenchmarkAbort$' -benchtime 1x -timeout 40m .
func BenchmarkAbort(b *testing.B) {
	rt := testenv.Runtime(b)
	eachMode(b, func(name string) sandboxagent.Driver { return abortDriver(b, name) },
		func(b *testing.B, drv sandboxagent.Driver, cfg sandboxagent.Config) {
			ds := measureAborts(b, rt, drv, cfg)
			b.ReportMetric(float64(ds[len(ds)/2])/1e6, "abort-p50-ms")
			b.ReportMetric(float64(ds[len(ds)-1])/1e6, "abort-max-ms")
		})
}

// abortDriver is the driver name against a fake model whose every turn
// runs a tool call that never ends (enough for both modes).
func abortDriver(b *testing.B, name string) sandboxagent.Driver {
	// A spare tool step per abort: a CLI may ask once more.
	var script fakemodel.Script
	for range 4 * abortsPerRun { // both modes share the driver
		script.Responses = append(script.Responses, fakemodel.Step{Tool: "shell", Command: drivertest.EndlessCommand})
	}
	return scriptDriver(b, name, script)
}

// measureAborts aborts abortsPerRun turns of one agent and returns the
// latencies, sorted.
func measureAborts(b *testing.B, rt sandboxagent.Runtime, drv sandboxagent.Driver, cfg sandboxagent.Config) []time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	a, err := sandboxagent.Start(ctx, rt, drv, sandboxagent.WithConfig(cfg))
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	var ds []time.Duration
	for i := range abortsPerRun {
		tctx, tcancel := context.WithCancel(ctx)
		var cancelled time.Time
		seen := make(chan bool, 1)
		go func() {
			for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if drivertest.EndlessRunning(ctx, a) == "1" {
					cancelled = time.Now()
					tcancel()
					seen <- true
					return
				}
			}
			tcancel()
			seen <- false
		}()
		_, err := a.Stream(tctx, fmt.Sprintf("abort %d: run the command", i+1), nil)
		returned := time.Now()
		ok := <-seen // cancelled is set before it
		took := returned.Sub(cancelled)
		if !ok {
			b.Fatalf("abort %d: the tool never ran (turn: %v)", i+1, err)
		}
		if !errors.Is(err, context.Canceled) {
			b.Fatalf("abort %d: %v, want context.Canceled", i+1, err)
		}
		ds = append(ds, took)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds
}
