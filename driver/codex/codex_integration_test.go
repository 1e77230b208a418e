//go:build integration

package codex_test

import (
	"testing"

	"github.com/sandbox-agent/sandbox-agent/driver/codex"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// newDriver is a codex driver for the fake model srv.
func newDriver(srv *fakemodel.Server) *codex.Driver {
	return codex.New(codex.Options{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key})
}

func TestCodexShellThenDone(t *testing.T) {
	t.Parallel()
	a, _, _ := testenv.Start(t, drivertest.ShellThenDone(drivertest.ShellCommand), newDriver)
	drivertest.ShellTurn(t, a, drivertest.ShellWant{Tool: "command_execution"})
}

func TestCodexUnauthorized(t *testing.T) {
	t.Parallel()
	a, _, _ := testenv.Start(t, drivertest.Unauthorized(), newDriver)
	if b := drivertest.CheckBadKey(t, a, "codex"); b.DE.ExitCode == 0 {
		t.Errorf("exit code %d", b.DE.ExitCode)
	}
}
