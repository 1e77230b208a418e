//go:build integration

package sandboxagent_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// BenchmarkGVisor: what gVisor (runsc, ptrace platform, .ci/gvisor.sh)
// costs beside the engine's default runc, measured in the same run: a
// sandbox's start to the end of its first exec (mean of 10), an `exec
// true` round trip (mean of 20) and pi's turns against a fake model that
// answers at once (turn 1, and the mean of turns 2..5, long-lived). The
// ratios are runsc/runc. Run with
//
//	go test -tags integration -run '^$' -bench '^BenchmarkGVisor$' -benchtime 1x -timeout 30m .
func BenchmarkGVisor(b *testing.B) {
	runsc := testenv.GVisor(b)
	rt := testenv.Runtime(b)
	ctx := context.Background()
	type times struct{ start, exec, turn1, later time.Duration }
	measure := func(b *testing.B, oci string) (t times) {
		cfg := testenv.Config()
		cfg.OCIRuntime = oci
		const starts, execs, turns = 10, 20, 5
		for range starts {
			t0 := time.Now()
			sb, err := sandboxagent.NewSandbox(ctx, rt, sandboxagent.SandboxOptions{Image: testenv.Image(), Config: cfg})
			if err != nil {
				b.Fatal(err)
			}
			if res, err := sb.Exec(ctx, []string{"true"}); err != nil || res.ExitCode != 0 {
				b.Fatal(res, err)
			}
			t.start += time.Since(t0)
			sb.Close()
		}
		t.start /= starts
		cfg.AuditRoot = filepath.Join(b.TempDir(), "audit")
		cfg.Timeouts.Ask = 5 * time.Minute
		a, err := sandboxagent.Start(ctx, rt, doneDriver(b, "pi"), sandboxagent.WithConfig(cfg))
		if err != nil {
			b.Fatal(err)
		}
		defer a.Close()
		for range execs {
			t0 := time.Now()
			if _, err := a.Container().Exec(ctx, []string{"true"}); err != nil {
				b.Fatal(err)
			}
			t.exec += time.Since(t0)
		}
		t.exec /= execs
		for i := 1; i <= turns; i++ {
			t0 := time.Now()
			reply, err := a.Ask(ctx, fmt.Sprintf("turn %d: reply DONE", i))
			if err != nil || reply != fakemodel.DoneText {
				b.Fatalf("turn %d under %q: %q %v", i, oci, reply, err)
			}
			if i == 1 {
				t.turn1 = time.Since(t0)
			} else {
				t.later += time.Since(t0)
			}
		}
		t.later /= turns - 1
		return t
	}
	for b.Loop() {
		base := measure(b, "")
		g := measure(b, runsc)
		for _, m := range []struct {
			name    string
			runc, g time.Duration
		}{{"start", base.start, g.start}, {"exec", base.exec, g.exec}, {"turn1", base.turn1, g.turn1}, {"turn2+", base.later, g.later}} {
			b.ReportMetric(m.runc.Seconds()*1e3, m.name+"-runc-ms")
			b.ReportMetric(m.g.Seconds()*1e3, m.name+"-runsc-ms")
			b.ReportMetric(m.g.Seconds()/m.runc.Seconds(), m.name+"-runsc/runc")
		}
	}
}
