//go:build integration

package conformance_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/internal/smoke"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/runtime/startlimit"
)

// TestConformance runs the smoke steps (internal/smoke: what `sandbox-agent
// smoke all --fake-model` runs) on every driver, each step a subtest: each
// must pass, or be not applicable because the driver lacks the capability
// (smoke decides n/a only from sandboxagent.CapabilitiesOf, so any other
// gap fails). Drivers with a long-lived mode use it by default; their
// per-turn mode passes the same steps (<driver>/per_turn). Every
// driver and mode runs at once (runConcurrently), the steps of each in
// order.
//
// The other tests of this package are what smoke does not do on a user's
// machine: attacks (forged output, floods, the key hunted in the sandbox),
// a CLI killed, a turn aborted.
func TestConformance(t *testing.T) {
	rt := startlimit.Wrap(testenv.Runtime(t), startlimit.DefaultWidth)
	var subs []subtest
	for _, name := range drivers.Names() {
		drv := drivers.All()[name](drivers.Endpoint{BaseURL: "http://x/v1", APIKey: "k", Provider: "sandbox"})
		_, longLived := drv.(sandboxagent.LongLived)
		modes := []bool{false}
		if longLived {
			modes = append(modes, true)
		}
		for _, perTurn := range modes {
			label := name
			if perTurn {
				label += "/per_turn"
			}
			subs = append(subs, subtest{label, func(t *testing.T) {
				// The defaults, as `smoke` runs with (testenv.Config's
				// one-minute exec timeout is too short for a session
				// script that starts opencode's server on a loaded
				// machine), and the test environment's image name.
				cfg := sandboxagent.DefaultConfig()
				cfg.ImageName = testenv.Config().ImageName
				// A CLI starting on a loaded 2-core machine can take minutes.
				cfg.Timeouts.Ask = 4 * time.Minute
				cfg.PerTurn = testenv.Config().PerTurn || perTurn
				runSteps(t, smoke.Options{Runtime: rt, Config: cfg, Fake: true},
					smoke.Target{Name: name, New: drivers.All()[name]})
			}})
		}
	}
	runConcurrently(t, subs)
}

// runSteps runs the smoke steps of one target, each as a subtest. A
// step's deadline (the ask timeout and slack, in smoke) only guards
// against a hang; the test's deadline guards the rest.
func runSteps(t *testing.T, o smoke.Options, target smoke.Target) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	tr := smoke.Begin(ctx, o, target)
	defer tr.Close()
	for _, step := range smoke.Steps {
		t.Run(step, func(t *testing.T) {
			r := tr.Step(step)
			switch r.Status {
			case smoke.Fail:
				if strings.Contains(r.Detail, "image not found") {
					prereq.Missing(t, "%s: %s", step, r.Detail)
				}
				t.Fatalf("%s (after %.1fs)", r.Detail, r.Seconds)
			case smoke.NotApplicable:
				t.Skipf("not applicable: %s", r.Detail)
			}
			t.Logf("pass in %.1fs", r.Seconds)
		})
	}
}
