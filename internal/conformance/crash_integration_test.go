//go:build integration

package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// serverComm is the process name (/proc/PID/comm) of each long-lived
// CLI's process.
var serverComm = map[string]string{"opencode": "opencode", "pi": "pi", "claude": "claude", "codex": "codex"}

// killCLI SIGKILLs every process named comm in the sandbox and says how
// many it killed.
func killCLI(ctx context.Context, a *sandboxagent.Agent, comm string) (int, error) {
	script := `n=0; for d in /proc/[0-9]*; do [ "$(cat "$d/comm" 2>/dev/null)" = "$1" ] && kill -9 "${d#/proc/}" 2>/dev/null && n=$((n+1)); done; echo "$n"`
	res, err := a.Container().Exec(ctx, []string{"sh", "-c", script, "sh", comm})
	if err != nil {
		return 0, err
	}
	var n int
	_, err = fmt.Sscan(string(res.Stdout), &n)
	return n, err
}

// TestConformanceCLICrash: a long-lived CLI that dies between turns is
// started again and the next turn continues the session; one that dies
// during a turn fails that turn with an error wrapping ErrCLIExited, and
// the turn after it continues the session.
func TestConformanceCLICrash(t *testing.T) {
	var subs []subtest
	for _, name := range drivers.Names() {
		drv0 := drivers.All()[name](drivers.Endpoint{BaseURL: "http://x/v1", APIKey: "k", Provider: "sandbox"})
		if _, ok := drv0.(sandboxagent.LongLived); !ok {
			continue
		}
		subs = append(subs, subtest{name, func(t *testing.T) {
			comm := serverComm[name]
			if comm == "" {
				t.Fatalf("no process name for %s's long-lived CLI", name)
			}
			srv := drivertest.FakeModel(t, fakemodel.Script{Responses: []fakemodel.Step{
				{Text: "ONE"},
				{Text: "TWO"},
				{Tool: "shell", Command: drivertest.EndlessCommand},
				{Text: "FOUR"},
			}})
			drv := drivers.All()[name](drivers.Endpoint{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key, Provider: "sandbox"})
			cfg := testenv.Config()
			cfg.AuditRoot = drivertest.AuditRoot(t)
			cfg.Timeouts.Ask = 5 * time.Minute
			cfg.PerTurn = false // whatever SANDBOX_AGENT_PER_TURN says: this is the long-lived mode's test
			a := testenv.StartAgent(t, drv, cfg.AuditRoot, sandboxagent.WithConfig(cfg))
			ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
			defer cancel()

			r1, err := a.Stream(ctx, "CRASH-ONE-71c say one", nil)
			if err != nil || r1.Reply != "ONE" {
				t.Fatalf("turn 1: %q, %v", r1.Reply, err)
			}
			// Between turns.
			if n, err := killCLI(ctx, a, comm); err != nil || n == 0 {
				t.Fatalf("killed %d processes named %q: %v", n, comm, err)
			}
			n := len(srv.Requests())
			r2, err := a.Stream(ctx, "CRASH-TWO say two", nil)
			if err != nil || r2.Reply != "TWO" {
				t.Fatalf("turn after the CLI died between turns: %q, %v", r2.Reply, err)
			}
			if r2.SessionID != r1.SessionID || !strings.Contains(drivertest.RequestText(t, srv, n), "CRASH-ONE-71c") {
				t.Errorf("sessions %q then %q: not continued", r1.SessionID, r2.SessionID)
			}

			// During a turn, while its tool runs.
			killed := make(chan error, 1)
			go func() {
				deadline := time.Now().Add(3 * time.Minute)
				for time.Now().Before(deadline) {
					if drivertest.EndlessRunning(ctx, a) == "1" {
						k, err := killCLI(ctx, a, comm)
						if err == nil && k == 0 {
							err = errors.New("no CLI process to kill")
						}
						killed <- err
						return
					}
					time.Sleep(200 * time.Millisecond)
				}
				killed <- errors.New("the tool never ran")
			}()
			_, err = a.Stream(ctx, "CRASH-THREE run the command", nil)
			if kerr := <-killed; kerr != nil {
				t.Fatalf("killing the CLI during the turn: %v", kerr)
			}
			if !errors.Is(err, sandboxagent.ErrCLIExited) {
				t.Fatalf("turn whose CLI died: %v, want an error wrapping ErrCLIExited", err)
			}
			t.Logf("reported: %v", err)
			n = len(srv.Requests())
			r4, err := a.Stream(ctx, "CRASH-FOUR say four", nil)
			if err != nil || r4.Reply != "FOUR" {
				t.Fatalf("turn after the CLI died during a turn: %q, %v", r4.Reply, err)
			}
			if r4.SessionID != r1.SessionID || !strings.Contains(drivertest.RequestText(t, srv, n), "CRASH-TWO") {
				t.Errorf("sessions %q then %q: not continued", r1.SessionID, r4.SessionID)
			}
		}})
	}
	runConcurrently(t, subs)
}
