//go:build integration

package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
	"github.com/sandbox-agent/sandbox-agent/internal/smoke"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// TestConformance runs `sandbox-agent smoke all --fake-model --json`, the
// command users run, and checks every step of every driver: each must pass,
// or be not applicable because the driver lacks the capability (smoke
// decides n/a only from sandboxagent.CapabilitiesOf, so any other gap
// fails).
func TestConformance(t *testing.T) {
	testenv.Runtime(t)
	bin := filepath.Join(t.TempDir(), "sandbox-agent")
	build := exec.Command("go", "build", "-o", bin, "./cmd/sandbox-agent")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	runSmoke(t, bin, []string{"all"}, len(drivers.Names()))
	// Drivers with a long-lived mode use it by default: their per-turn
	// mode passes the same steps.
	for _, name := range drivers.Names() {
		drv := drivers.All()[name](drivers.Endpoint{BaseURL: "http://x/v1", APIKey: "k", Provider: "sandbox"})
		if _, ok := drv.(sandboxagent.LongLived); !ok {
			continue
		}
		t.Run(name+"/per_turn", func(t *testing.T) {
			runSmoke(t, bin, []string{name}, 1, "SANDBOX_AGENT_PER_TURN=true")
		})
	}
}

// runSmoke runs `sandbox-agent smoke TARGETS --fake-model --json` and
// checks every step of each of the n drivers.
func runSmoke(t *testing.T, bin string, targets []string, n int, env ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(append([]string{"smoke"}, targets...), "--fake-model", "--json")...)
	cmd.Env = append(append(os.Environ(), "SANDBOX_AGENT_TIMEOUT_ASK=4m", "SANDBOX_AGENT_CONFIG=/nonexistent/config.json"), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var results []smoke.StepResult
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r smoke.StepResult
		if jerr := json.Unmarshal([]byte(line), &r); jerr != nil {
			t.Fatalf("not a JSON step line: %q (%v)", line, jerr)
		}
		results = append(results, r)
		t.Logf("%-9s %-15s %-4s %6.1fs %s", r.Driver, r.Step, r.Status, r.Seconds, r.Detail)
		if r.Status == smoke.Fail {
			t.Errorf("%s/%s: %s", r.Driver, r.Step, r.Detail)
		}
	}
	if want := n * len(smoke.Steps); len(results) != want {
		t.Errorf("%d step results, want %d", len(results), want)
	}
	failed := t.Failed()
	if (err != nil) != failed {
		t.Errorf("exit error %v does not match the step results (stderr: %s)", err, stderr.String())
	}
}

// TestConformanceEvents checks what the smoke steps do not: thinking and
// usage events when the driver declares them, the CLI's stderr kept in a
// DriverError, and a turn that reports thinking text only when the model
// sent some.
func TestConformanceEvents(t *testing.T) {
	for _, name := range drivers.Names() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := drivertest.FakeModel(t, fakemodel.Script{Responses: []fakemodel.Step{
				{Thinking: "THINKING-MARKER reasoning", Tool: fakemodel.ToolShell, Command: "echo conf > /tmp/conf.txt"},
				{Text: "DONE", Usage: &fakemodel.Usage{InputTokens: 321, OutputTokens: 12}},
			}})
			drv := drivers.All()[name](drivers.Endpoint{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key, Provider: "sandbox"})
			caps := sandboxagent.CapabilitiesOf(drv)
			a := testenv.StartAgent(t, drv, drivertest.AuditRoot(t))
			res, err := a.Stream(drivertest.Ctx(t), "conformance events", nil)
			if err != nil {
				t.Fatal(err)
			}
			var thinking, usage bool
			for _, e := range res.Events {
				switch e.Kind {
				case sandboxagent.KindThinking:
					if strings.Contains(e.Payload.Text, "THINKING-MARKER") {
						thinking = true
					}
				case sandboxagent.KindUsage:
					if e.Payload.InputTokens > 0 || e.Payload.OutputTokens > 0 {
						usage = true
					}
				}
			}
			if caps.Thinking && !thinking {
				t.Error("declares Thinking but no thinking event carried the model's reasoning")
			}
			if caps.Usage && !usage {
				t.Error("declares Usage but reported no token counts")
			}
			if last := res.Events[len(res.Events)-1]; last.Kind != sandboxagent.KindDone || last.Payload.Text != "DONE" {
				t.Errorf("last event %+v", last)
			}
		})
	}
}

// TestConformanceBadKey: a rejected key is a DriverError within 30 s,
// and the error keeps what the CLI printed on stderr (when it printed
// anything) without the key.
func TestConformanceBadKey(t *testing.T) {
	for _, name := range drivers.Names() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := drivertest.FakeModel(t, drivertest.Unauthorized())
			drv := drivers.All()[name](drivers.Endpoint{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key, Provider: "sandbox"})
			a := testenv.StartAgent(t, drv, drivertest.AuditRoot(t))
			start := time.Now()
			_, err := a.Ask(drivertest.Ctx(t), "hello")
			var de *sandboxagent.DriverError
			if !errors.As(err, &de) {
				t.Fatalf("want DriverError, got %v", err)
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("DriverError after %v", d)
			}
			if de.Message == "" {
				t.Error("DriverError without a message")
			}
			if strings.Contains(de.Error()+de.Stderr, drivertest.Key) {
				t.Error("the key leaked into the error")
			}
		})
	}
}
