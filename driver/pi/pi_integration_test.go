//go:build integration

package pi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/driver/pi"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// newDriver is a pi driver for the fake model srv.
func newDriver(srv *fakemodel.Server) *pi.Driver {
	return pi.New(pi.Options{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key})
}

func TestPiShellThenDone(t *testing.T) {
	t.Parallel()
	a, _, _ := testenv.Start(t, drivertest.ShellThenDone(drivertest.ShellCommand), newDriver)
	drivertest.ShellTurn(t, a, drivertest.ShellWant{Tool: "bash", Capture: "fake-shell-done"})
}

// TestPiUnauthorized does not run in parallel with the other tests here:
// it measures the time to the error, which on a loaded 2-core machine
// grows several times over when four other pi processes start with it.
func TestPiUnauthorized(t *testing.T) {
	a, _, srv := testenv.Start(t, drivertest.Unauthorized(), newDriver)
	b := drivertest.CheckBadKey(t, a, "pi")
	if evs := b.Res.Events; len(evs) > 0 {
		t.Logf("first output line after %v, last after %v", b.Took-time.Since(evs[0].Time), b.Took-time.Since(evs[len(evs)-1].Time))
	}
	// pi exits 0 in JSON mode; the 401 is in the assistant message.
	if de := b.DE; de.ExitCode != 0 || !strings.HasPrefix(de.Message, "401 ") {
		t.Errorf("DriverError %+v", de)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests for a rejected key, want 1 (no retry)", n)
	}
	drivertest.Capture(t, b.Res, b.Err, "fake-401")
}

// TestPiShellHidesKey: the commands the model runs do not see the key.
// (Rules, skills and continuing: internal/conformance.)
func TestPiShellHidesKey(t *testing.T) {
	t.Parallel()
	a, _, _ := testenv.Start(t, fakemodel.Script{Responses: []fakemodel.Step{
		{Tool: fakemodel.ToolShell, Command: `echo "key=[$` + pi.KeyEnv + `]" > /tmp/key.txt`},
		{Text: "FIRST"},
	}}, newDriver)
	ctx := drivertest.Ctx(t)
	if reply, err := a.Ask(ctx, "FIRST-PROMPT-5e2 remember this"); err != nil || reply != "FIRST" {
		t.Fatalf("turn 1: %q, %v", reply, err)
	}
	if got, err := a.Container().ReadFile(ctx, "/tmp/key.txt", 0); err != nil || string(got) != "key=[]\n" {
		t.Errorf("the model's shell saw %q (%v), want an empty key variable", got, err)
	}
}
