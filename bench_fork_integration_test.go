//go:build integration

package sandboxagent_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// BenchmarkFork: Fork(1) and Fork(4) of a pi agent with a 100 MB
// workspace, each until every branch answered a turn, against a cold
// start (Start and a first turn) measured in the same run; and the
// checkpoint's size against the workspace's. The engine is scaleRuntime's
// (Docker, Podman by DOCKER_HOST; the cluster with the kubernetes tag).
//
//	go test -tags integration -run '^$' -bench '^BenchmarkFork$' -benchtime 1x -timeout 30m .
func BenchmarkFork(b *testing.B) {
	rt := scaleRuntime(b)
	ctx := context.Background()
	cfg := testenv.Config()
	cfg.AuditRoot = filepath.Join(b.TempDir(), "audit")
	cfg.CheckpointRoot = filepath.Join(b.TempDir(), "checkpoints")
	cfg.Timeouts.Ask = 5 * time.Minute
	cfg.Timeouts.Start = 5 * time.Minute
	drv := doneDriver(b, "pi")
	eng, _ := rt.(checkpoint.Engine)
	ask := func(a *sandboxagent.Agent, prompt string) {
		if reply, err := a.Ask(ctx, prompt); err != nil || reply != fakemodel.DoneText {
			b.Fatalf("%s: %q %v", prompt, reply, err)
		}
	}
	for b.Loop() {
		const colds = 2
		var cold time.Duration
		for i := range colds {
			t0 := time.Now()
			a, err := sandboxagent.Start(ctx, rt, drv, sandboxagent.WithConfig(cfg))
			if err != nil {
				b.Fatal(err)
			}
			ask(a, fmt.Sprintf("cold %d", i))
			cold += time.Since(t0)
			a.Close()
		}
		cold /= colds
		base, err := sandboxagent.Start(ctx, rt, drv, sandboxagent.WithConfig(cfg))
		if err != nil {
			b.Fatal(err)
		}
		const workspace = 100 << 20
		if res, err := base.Container().Exec(ctx, []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/urandom > workspace.bin", workspace)}); err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
		ask(base, "base")
		t0 := time.Now()
		c, err := base.Checkpoint(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		checkpointTime := time.Since(t0)
		_ = checkpoint.Remove(ctx, eng, cfg.CheckpointRoot, c)
		fork := func(n int) time.Duration {
			t0 := time.Now()
			branches, err := base.Fork(ctx, n)
			if err != nil {
				b.Fatal(err)
			}
			var wg sync.WaitGroup
			for i, br := range branches {
				wg.Go(func() { ask(br, fmt.Sprintf("branch %d", i)) })
			}
			wg.Wait()
			d := time.Since(t0)
			for _, br := range branches {
				br.Close()
			}
			return d
		}
		f1, f4 := fork(1), fork(4)
		parent := base.Container().Name()
		base.Close()
		all, _ := checkpoint.List(ctx, eng, cfg.CheckpointRoot)
		for _, x := range all {
			if x.Parent == parent {
				_ = checkpoint.Remove(ctx, eng, cfg.CheckpointRoot, x)
			}
		}
		b.ReportMetric(cold.Seconds(), "cold-s")
		b.ReportMetric(checkpointTime.Seconds(), "checkpoint-s")
		b.ReportMetric(f1.Seconds(), "fork1-s")
		b.ReportMetric(f4.Seconds(), "fork4-s")
		b.ReportMetric(f1.Seconds()/cold.Seconds(), "fork1/cold")
		b.ReportMetric(f4.Seconds()/cold.Seconds(), "fork4/cold")
		b.ReportMetric(float64(c.Size)/workspace, "checkpoint/workspace")
	}
}
