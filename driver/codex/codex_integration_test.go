//go:build integration

package codex_test

import (
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/codex"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivertest"
)

// start runs the fake model with script and an agent of a fresh codex
// driver talking to it.
func start(t *testing.T, script fakemodel.Script) (*sandboxagent.Agent, *codex.Driver, *fakemodel.Server) {
	t.Helper()
	srv := drivertest.FakeModel(t, script)
	drv := codex.New(codex.Options{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key})
	return drivertest.StartAgent(t, drv, drivertest.AuditRoot(t)), drv, srv
}

func TestCodexShellThenDone(t *testing.T) {
	t.Parallel()
	a, _, _ := start(t, drivertest.ShellThenDone(drivertest.ShellCommand))
	ctx := drivertest.Ctx(t)

	res, err := a.Stream(ctx, "Create /tmp/out.txt containing hi, then answer DONE.", nil)
	if err != nil {
		t.Fatalf("Ask: %v (events %+v)", err, res.Events)
	}
	drivertest.CheckShellTurn(t, a, res, drivertest.ShellWant{Tool: "command_execution"})
}

func TestCodexUnauthorized(t *testing.T) {
	t.Parallel()
	a, _, _ := start(t, drivertest.Unauthorized())
	if b := drivertest.CheckBadKey(t, a, "codex", false); b.DE.ExitCode == 0 {
		t.Errorf("exit code %d", b.DE.ExitCode)
	}
}
