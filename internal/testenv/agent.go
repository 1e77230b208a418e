package testenv

import (
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
)

// StartAgent is drivertest.StartAgent on this environment's engine
// (Runtime) with its configuration (Config, the audit under auditRoot, a
// generous turn timeout); opts come after it.
func StartAgent(t testing.TB, drv sandboxagent.Driver, auditRoot string, opts ...sandboxagent.AgentOption) *sandboxagent.Agent {
	t.Helper()
	cfg := Config()
	cfg.AuditRoot = auditRoot
	// Generous: a CLI starting on a loaded 2-core CI machine can take a minute.
	cfg.Timeouts.Ask = 4 * time.Minute
	return drivertest.StartAgent(t, Runtime(t), drv, auditRoot, append([]sandboxagent.AgentOption{sandboxagent.WithConfig(cfg)}, opts...)...)
}

// Start starts the fake model with script (drivertest.FakeModel) and an
// agent (StartAgent) of the driver newDriver makes for it.
func Start[D sandboxagent.Driver](t testing.TB, script fakemodel.Script, newDriver func(*fakemodel.Server) D, opts ...sandboxagent.AgentOption) (*sandboxagent.Agent, D, *fakemodel.Server) {
	t.Helper()
	srv := drivertest.FakeModel(t, script)
	drv := newDriver(srv)
	return StartAgent(t, drv, drivertest.AuditRoot(t), opts...), drv, srv
}
