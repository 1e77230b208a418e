//go:build integration

package sandboxagent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// noCommit hides the engine's commit: the checkpoint is an archive, as on
// Kubernetes.
type noCommit struct{ sandboxagent.Runtime }

func (n noCommit) Features() sandboxagent.RuntimeFeatures { return sandboxagent.FeaturesOf(n.Runtime) }

// TestIntegrationCheckpointHostile: a sandbox grown past the checkpoint's
// size limit gets ErrCheckpointSize and leaves no image or folder behind,
// by commit and by archive; a checkpoint of a loosened agent (egress
// open, no seccomp filter of ours) starts hardened as its caller asks.
func TestIntegrationCheckpointHostile(t *testing.T) {
	rt := testenv.Runtime(t)
	srv := drivertest.FakeModel(t, fakemodel.Script{Responses: []fakemodel.Step{{Text: "OK"}}})
	drv := adoptDriver("dsh", srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	for _, tc := range []struct {
		name string
		rt   sandboxagent.Runtime
	}{{"commit", rt}, {"archive", noCommit{rt}}} {
		t.Run("too_large/"+tc.name, func(t *testing.T) {
			cfg := testenv.Config()
			cfg.CheckpointRoot = filepath.Join(t.TempDir(), "checkpoints")
			cfg.CheckpointMaxBytes = 8 << 20
			a := drivertest.StartAgent(t, tc.rt, drv, drivertest.AuditRoot(t), sandboxagent.WithConfig(cfg))
			if res, err := a.Container().Exec(ctx, []string{"sh", "-c", "head -c 20000000 /dev/urandom > grown.bin"}); err != nil || res.ExitCode != 0 {
				t.Fatalf("grow: %+v %v", res, err)
			}
			_, err := a.Checkpoint(ctx, "too-large")
			if !errors.Is(err, sandboxagent.ErrCheckpointSize) {
				t.Fatalf("Checkpoint of a 20 MB sandbox with an 8 MiB limit: %v; want ErrCheckpointSize", err)
			}
			t.Logf("refused: %v", err)
			left, err := checkpoint.List(ctx, checkpointEngine(rt), cfg.CheckpointRoot)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range left {
				if c.Parent == a.Container().Name() {
					t.Errorf("a refused checkpoint remains: %+v", c)
				}
			}
			if ents, _ := os.ReadDir(cfg.CheckpointRoot); len(ents) != 0 {
				t.Errorf("the checkpoint root holds %d entries after a refused checkpoint", len(ents))
			}
			// The agent goes on.
			if _, err := a.Container().Exec(ctx, []string{"true"}); err != nil {
				t.Fatalf("exec after the refusal: %v", err)
			}
		})
	}

	t.Run("not_looser", func(t *testing.T) {
		cfg := testenv.Config()
		cfg.CheckpointRoot = filepath.Join(t.TempDir(), "checkpoints")
		loose := drivertest.StartAgent(t, rt, drv, drivertest.AuditRoot(t), sandboxagent.WithConfig(cfg),
			sandboxagent.WithEgress(sandboxagent.EgressOpen), sandboxagent.WithSandbox(func(s *sandboxagent.SandboxOptions) {
				s.EngineSeccomp = true
				s.Caps = append(slices.Clone(sandboxagent.DefaultCaps), "NET_RAW")
			}))
		c, err := loose.Checkpoint(ctx, "loose")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = checkpoint.Remove(context.Background(), checkpointEngine(rt), cfg.CheckpointRoot, c) })
		if c.Egress != sandboxagent.EgressOpen {
			t.Errorf("the checkpoint records egress %q; want open", c.Egress)
		}
		b, err := sandboxagent.StartFrom(ctx, rt, drv, c, sandboxagent.WithConfig(cfg))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		if st := b.State(); st.Egress != sandboxagent.EgressModel {
			t.Errorf("started from a checkpoint of an egress-open agent: egress %q; want model (the caller's default)", st.Egress)
		}
		st, err := b.Container().Inspect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(st.CapAdd, "NET_RAW") || st.Seccomp == "" || !st.NoNewPrivileges || st.NetworkMode != "none" {
			t.Errorf("started from a checkpoint of a loosened agent: caps %v, seccomp %q, no-new-privileges %v, network %q; want the defaults",
				st.CapAdd, st.Seccomp, st.NoNewPrivileges, st.NetworkMode)
		}
		// A different driver is refused.
		if _, err := sandboxagent.StartFrom(ctx, rt, adoptDriver("pi", srv.URL()), c); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("StartFrom with another driver: %v; want ErrInvalidArgument", err)
		}
	})
}

func checkpointEngine(rt sandboxagent.Runtime) checkpoint.Engine {
	eng, _ := rt.(checkpoint.Engine)
	return eng
}
