//go:build integration

package sandboxagent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
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
	names := drivers.Names()
	if v := os.Getenv("SANDBOX_AGENT_BENCH_DRIVERS"); v != "" {
		names = strings.Split(v, ",")
	}
	for _, name := range names {
		for _, perTurn := range []bool{true, false} {
			if _, ok := drivers.All()[name]; !ok {
				b.Fatalf("unknown driver %q", name)
			}
			drv := doneDriver(b, name)
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
					r := measureTurns(b, rt, drv, cfg)
					b.ReportMetric(r.turn1.Seconds()*1e3, "turn1-ms")
					b.ReportMetric(r.later.Seconds()*1e3, "turn2+-ms")
					b.ReportMetric(r.turn1CPU.Seconds()*1e3, "turn1-cpu-ms")
					b.ReportMetric(r.laterCPU.Seconds()*1e3, "turn2+-cpu-ms")
					b.ReportMetric(r.execTrue.Seconds()*1e3, "exec-true-ms")
					b.ReportMetric(r.later.Seconds()/r.execTrue.Seconds(), "turn2+/exec")
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
