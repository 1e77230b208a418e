package smoke

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
)

// run is the state of one target's run.
type run struct {
	o      Options
	t      Target
	ctx    context.Context
	fake   *fakemodel.Server
	ep     drivers.Endpoint
	caps   sandboxagent.Capabilities
	agent  *sandboxagent.Agent
	audit  string
	marker string // unique text of this run

	firstPrompt string
	firstTurn   sandboxagent.TurnResult
	secondTurn  sandboxagent.TurnResult
	origSession string
	forkSession string
	dump        sandboxagent.SessionDump
}

// randHex is n random bytes in hex: markers and keys unique to one run.
func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// setup makes the audit folder, starts the fake model (with a fresh key)
// when asked to, and starts the first agent.
func (r *run) setup() error {
	dir, err := os.MkdirTemp("", "sandbox-agent-smoke-")
	if err != nil {
		return err
	}
	r.audit = filepath.Join(dir, "audit")
	if r.o.Fake {
		srv, err := fakemodel.New(fakemodel.Script{}, fakemodel.Options{})
		if err != nil {
			return err
		}
		if err := srv.Start("127.0.0.1:0"); err != nil {
			return err
		}
		r.fake = srv
		r.ep = drivers.Endpoint{BaseURL: srv.URL() + "/v1", APIKey: "sk-smoke-" + randHex(16), Provider: "sandbox"}
		if err := r.script(fakemodel.Script{}); err != nil {
			return err
		}
	} else {
		r.ep = r.t.Real
	}
	a, err := r.start(r.ep)
	if err != nil {
		return err
	}
	r.agent = a
	r.caps = sandboxagent.CapabilitiesOf(a.Driver())
	return nil
}

// script replaces the fake model's script (keeping the expected key).
func (r *run) script(s fakemodel.Script) error {
	if r.fake == nil {
		return nil
	}
	s.ExpectKey = r.ep.APIKey
	return r.fake.Reset(s)
}

// start starts an agent (its own container) for an endpoint.
func (r *run) start(ep drivers.Endpoint) (*sandboxagent.Agent, error) {
	cfg := r.o.Config
	cfg.AuditRoot = r.audit
	cfg.AuditEnabled = true
	opts := []sandboxagent.AgentOption{sandboxagent.WithConfig(cfg), sandboxagent.WithModel(r.t.Model)}
	if r.o.Image != "" {
		opts = append(opts, sandboxagent.WithImage(r.o.Image))
	}
	if r.o.Images != nil {
		opts = append(opts, sandboxagent.WithSandbox(func(so *sandboxagent.SandboxOptions) { so.Images = r.o.Images }))
	}
	if r.o.Egress != "" || r.o.AllowHosts != nil {
		opts = append(opts, sandboxagent.WithEgress(r.o.Egress, r.o.AllowHosts...))
	}
	ctx, cancel := context.WithTimeout(r.ctx, cfg.Timeouts.Start+time.Minute)
	defer cancel()
	return sandboxagent.Start(ctx, r.o.Runtime, r.t.New(ep), opts...)
}

// close destroys the agent's sandbox, stops the fake model and removes
// the run's audit folder.
func (r *run) close() {
	if r.agent != nil {
		r.agent.Close()
	}
	if r.fake != nil {
		r.fake.Close()
	}
	if r.audit != "" {
		os.RemoveAll(filepath.Dir(r.audit))
	}
}
