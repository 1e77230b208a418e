package server

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"

	units "github.com/docker/go-units"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/config"
	"github.com/sandbox-agent/sandbox-agent/internal/hardening"
	"github.com/sandbox-agent/sandbox-agent/metering"
	"github.com/sandbox-agent/sandbox-agent/telemetry"
)

// StarterOptions configure NewStarter.
type StarterOptions struct {
	// Runtime runs the sandboxes; required.
	Runtime sandboxagent.Runtime
	// Config is every agent's configuration (nil: sandboxagent's
	// default); a request's keepalive replaces its Keepalive.
	Config *sandboxagent.Config
	// Driver builds the driver a request names (and whatever it needs
	// beside, such as a fake model, which stop releases; stop is never nil
	// on success); required. Which drivers, keys and endpoints a request
	// may use is the embedder's choice. Errors wrapping
	// sandboxagent.ErrInvalidArgument answer 400.
	Driver func(ctx context.Context, req CreateRequest) (drv sandboxagent.Driver, stop func(), err error)
	// Options are added after the request's: an image source, a logger,
	// an egress observer (WithSandbox), ...
	Options []sandboxagent.AgentOption
	// OCIRuntimes are the OCI runtimes (RuntimeClasses on Kubernetes) a
	// request's oci_runtime may name beside Config.OCIRuntime, which is
	// every sandbox's otherwise: none by default, so a tenant cannot swap
	// the runtime an operator chose (on the engine, the cluster or here).
	OCIRuntimes []string
	// Tenants, when set, are the tenants' meters: each agent's meter (its
	// request's budget, or none) counts toward its tenant's too, and the
	// tenant's budget stops every agent of the tenant.
	Tenants *metering.Tenants
	// Hooks, when set, gives each agent its telemetry hooks, by tenant
	// (package telemetry/prom labels the model requests with it).
	Hooks func(tenant string) telemetry.Hooks
}

// NewStarter returns the Starter that sandbox-agent serve uses: the
// driver from o.Driver, then every field of the request as the agent's
// options (model, image, egress and allowed hosts, env, memory, pids,
// keepalive), through sandboxagent.Start, or sandboxagent.StartFrom when
// the request has a checkpoint (From): the hardening and the egress are
// still the request's and the server's, never the checkpoint's.
func NewStarter(o StarterOptions) Starter {
	return func(ctx context.Context, req CreateRequest) (*sandboxagent.Agent, func(), error) {
		if o.Runtime == nil || o.Driver == nil {
			return nil, nil, fmt.Errorf("server: NewStarter: Runtime and Driver are required")
		}
		opts, err := o.agentOptions(req)
		if err != nil {
			return nil, nil, err
		}
		drv, stop, err := o.Driver(ctx, req)
		if err != nil {
			return nil, nil, err
		}
		var ag *sandboxagent.Agent
		if req.From != nil {
			ag, err = sandboxagent.StartFrom(ctx, o.Runtime, drv, *req.From, append(opts, o.Options...)...)
		} else {
			ag, err = sandboxagent.Start(ctx, o.Runtime, drv, append(opts, o.Options...)...)
		}
		if err != nil {
			stop()
			return nil, nil, err
		}
		return ag, stop, nil
	}
}

// NewAdopter returns the Adopter that goes with NewStarter(o): the driver
// from o.Driver, the options of the stored request and o.Options, through
// sandboxagent.Adopt.
func NewAdopter(o StarterOptions) Adopter {
	return func(ctx context.Context, req CreateRequest, state json.RawMessage) (*sandboxagent.Agent, func(), error) {
		if o.Runtime == nil || o.Driver == nil {
			return nil, nil, fmt.Errorf("server: NewAdopter: Runtime and Driver are required")
		}
		var st sandboxagent.AgentState
		if err := json.Unmarshal(state, &st); err != nil {
			return nil, nil, fmt.Errorf("%w: stored agent state: %w", sandboxagent.ErrInvalidArgument, err)
		}
		opts, err := o.agentOptions(req)
		if err != nil {
			return nil, nil, err
		}
		drv, stop, err := o.Driver(ctx, req)
		if err != nil {
			return nil, nil, err
		}
		ag, err := sandboxagent.Adopt(ctx, o.Runtime, drv, st, append(opts, o.Options...)...)
		if err != nil {
			stop()
			return nil, nil, err
		}
		return ag, stop, nil
	}
}

// agentOptions are req's options and the tenant's hooks.
func (o StarterOptions) agentOptions(req CreateRequest) ([]sandboxagent.AgentOption, error) {
	opts, err := requestOptions(o.Config, o.OCIRuntimes, o.Tenants, req)
	if err != nil || o.Hooks == nil {
		return opts, err
	}
	return append(opts, sandboxagent.WithHooks(o.Hooks(req.Tenant))), nil
}

// requestConfig is the agent's configuration: the server's (base; nil:
// the library's default) with what the request may change: keepalive, a
// smaller disk limit, an allowed OCI runtime, and (the admin's) the audit
// trail.
func requestConfig(base *sandboxagent.Config, ociRuntimes []string, req CreateRequest) (sandboxagent.Config, error) {
	var cfg sandboxagent.Config
	if base != nil {
		cfg = *base
	} else {
		cfg = sandboxagent.DefaultConfig()
	}
	keepalive, err := seconds("keepalive", req.Keepalive)
	if err != nil {
		return cfg, err
	}
	if keepalive > 0 {
		cfg.Keepalive = keepalive
	}
	if req.Disk != "" {
		// A request may ask less than the operator's limit, never more or
		// none (none only where the operator said none).
		n, err := config.ParseDisk(req.Disk)
		if err != nil {
			return cfg, err
		}
		limit := cfg.DiskBytes
		if limit == 0 {
			limit = hardening.DefaultDiskBytes // the server's, where its engine enforces one
		}
		if limit > 0 && (n < 0 || n > limit) {
			return cfg, fmt.Errorf("%w: disk %q: this server's sandboxes may use at most %s", sandboxagent.ErrInvalidArgument, req.Disk, units.BytesSize(float64(limit)))
		}
		cfg.DiskBytes = n
	}
	switch {
	case req.OCIRuntime == "" || req.OCIRuntime == cfg.OCIRuntime:
	case !slices.Contains(ociRuntimes, req.OCIRuntime):
		return cfg, fmt.Errorf("%w: oci_runtime %q: this server lets a request choose none but %q (serve_oci_runtimes)", sandboxagent.ErrInvalidArgument, req.OCIRuntime, ociRuntimes)
	default:
		cfg.OCIRuntime = req.OCIRuntime
	}
	// The audit trail: the admin's request may turn it off or move it
	// (createAgent refuses both from tenants).
	if req.Audit != nil {
		cfg.AuditEnabled = *req.Audit
	}
	if req.AuditRoot != "" {
		if !filepath.IsAbs(req.AuditRoot) {
			return cfg, fmt.Errorf("%w: audit_root %q: want an absolute path", sandboxagent.ErrInvalidArgument, req.AuditRoot)
		}
		cfg.AuditRoot = req.AuditRoot
	}
	return cfg, nil
}

// requestOptions are the agent options a CreateRequest asks for.
func requestOptions(base *sandboxagent.Config, ociRuntimes []string, tenants *metering.Tenants, req CreateRequest) ([]sandboxagent.AgentOption, error) {
	cfg, err := requestConfig(base, ociRuntimes, req)
	if err != nil {
		return nil, err
	}
	egress, err := sandboxagent.ParseEgress(req.Egress)
	if err != nil {
		return nil, err
	}
	allow := req.AllowHosts
	if allow == nil {
		allow = cfg.AllowHosts
	}
	if err := sandboxagent.CheckAllowHosts(allow); err != nil {
		return nil, err
	}
	var memory int64
	if req.Memory != "" {
		if memory, err = units.RAMInBytes(req.Memory); err != nil || memory < 6<<20 {
			return nil, fmt.Errorf("%w: memory %q: want a size of at least 6m, like 512m or 2g", sandboxagent.ErrInvalidArgument, req.Memory)
		}
	}
	if req.Pids < 0 {
		return nil, fmt.Errorf("%w: pids %d: want a positive number", sandboxagent.ErrInvalidArgument, req.Pids)
	}
	opts := []sandboxagent.AgentOption{}
	if req.RepoDir != "" && req.Repo != nil {
		o := req.Repo.options()
		o.Within = req.RepoWithin
		opts = append(opts, sandboxagent.WithRepo(req.RepoDir, o))
	}
	if req.Budget != nil || tenants != nil {
		mo := metering.MeterOptions{Prices: cfg.Prices}
		if req.Budget != nil {
			mo.Budget = *req.Budget
		}
		if tenants != nil && req.Tenant != AdminTenant { // the admin has no tenant's limits
			mo.Parent = tenants.Meter(req.Tenant)
		}
		meter, err := metering.NewMeter(mo)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", sandboxagent.ErrInvalidArgument, err)
		}
		opts = append(opts, sandboxagent.WithMeter(meter))
	}
	return append(opts,
		sandboxagent.WithConfig(cfg),
		sandboxagent.WithModel(req.Model),
		sandboxagent.WithImage(req.Image),
		sandboxagent.WithEgress(egress, allow...),
		sandboxagent.WithEnv(req.Env),
		sandboxagent.WithResources(memory, req.Pids),
	), nil
}
