package main

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/config"
	"github.com/sandbox-agent/sandbox-agent/internal/configfile"
	"github.com/sandbox-agent/sandbox-agent/internal/hardening"
	"github.com/sandbox-agent/sandbox-agent/metering"
	"github.com/sandbox-agent/sandbox-agent/runtime/startlimit"
	"github.com/sandbox-agent/sandbox-agent/server"
)

// settings are the keys only the command line reads (which engine, which
// gateway, how many sandboxes start at once), beside the library's Config.
// Same file, same precedence, one key table in the README.
type settings struct {
	// runtime is where sandboxes run: docker (the default), podman or
	// kubernetes.
	runtime string
	// dockerHost overrides DOCKER_HOST for the engine connection.
	dockerHost string
	// kubeconfig and namespace, for the kubernetes runtime.
	kubeconfig string
	namespace  string
	// podPidsLimit is the kubelet's podPidsLimit, for clusters whose RBAC
	// does not let us read it (nodes/proxy).
	podPidsLimit int64
	// seccompLocalhost: pods under sandbox-agent's seccomp profile, a
	// Localhost profile every node holds.
	seccompLocalhost bool
	// gatewayURL and gatewayKey: the OpenAI/Anthropic compatible gateway
	// the CLIs other than opencode use against real models.
	gatewayURL string
	gatewayKey string
	// maxConcurrentStarts bounds how many sandboxes start at once (smoke).
	maxConcurrentStarts int
	// maxConcurrentExecs is the width of the engine's exec admission
	// queue (0: none, the default).
	maxConcurrentExecs int
	// serve's limits: agents it owns, turns running at once, bytes of a
	// request body.
	serveMaxAgents int
	// servePoolSize agents kept ready per distinct create request, in at
	// most servePoolMax pools (server.Pools).
	servePoolSize, servePoolMax int
	serveMaxTurns               int
	serveMaxBodyBytes           int64
	// serve's state (a SQLite file, or a postgres:// URL) and its
	// per-tenant limits (0: none).
	state                string
	serveTenantMaxAgents int
	serveTenantMaxTurns  int
	// serveTenantBudget caps each tenant's model usage per
	// serveTenantBudgetPeriod (0: over the state's life), shared by the
	// replicas through the state.
	serveTenantBudget       metering.Budget
	serveTenantBudgetPeriod time.Duration
	// serveLeaseTTL: how long a turn's lease outlives a dead replica.
	serveLeaseTTL time.Duration
	// serveOCIRuntimes: the OCI runtimes a create request may choose
	// beside the server's own (oci_runtime).
	serveOCIRuntimes []string
	// serveTenantCheckpointBytes caps the bytes of the checkpoints one
	// tenant of serve keeps (0: no limit).
	serveTenantCheckpointBytes int64
	// serveRepoRoot: the folder under which a create request's repo.path
	// may name a repository of the host ("": none may).
	serveRepoRoot string
	// checkpointRetention: gc removes the checkpoints older than this
	// that no server owns.
	checkpointRetention time.Duration
}

// The defaults of the checkpoint keys of the command line.
const (
	defaultTenantCheckpointBytes = 20 << 30
	defaultCheckpointRetention   = 7 * 24 * time.Hour
)

func defaultSettings() settings {
	return settings{
		gatewayURL:          "http://127.0.0.1:4000",
		gatewayKey:          "sk-sandbox-agent",
		maxConcurrentStarts: startlimit.DefaultWidth,
		serveMaxAgents:      server.DefaultMaxAgents,
		servePoolMax:        server.DefaultPoolMax,
		serveMaxTurns:       server.DefaultMaxConcurrentTurns,
		serveMaxBodyBytes:   server.DefaultMaxBodyBytes,

		serveTenantCheckpointBytes: defaultTenantCheckpointBytes,
		checkpointRetention:        defaultCheckpointRetention,
	}
}

// settingsKeys are the command line's own keys (the library's are in
// config.Keys).
var settingsKeys = []configfile.Key[settings]{
	{Name: "runtime", Env: "SANDBOX_AGENT_RUNTIME", Apply: func(s *settings, raw string) error {
		switch v := strings.TrimSpace(raw); v {
		case "", "docker", "podman", "kubernetes":
			s.runtime = v
			return nil
		}
		return fmt.Errorf("%w: runtime %q (want docker, podman or kubernetes)", sandboxagent.ErrInvalidArgument, raw)
	}},
	configfile.String("docker_host", "DOCKER_HOST", func(s *settings) *string { return &s.dockerHost }),
	configfile.String("kubeconfig", "KUBECONFIG", func(s *settings) *string { return &s.kubeconfig }),
	configfile.String("kubernetes_namespace", "SANDBOX_AGENT_KUBERNETES_NAMESPACE", func(s *settings) *string { return &s.namespace }),
	configfile.Int("kubernetes_pod_pids_limit", 1, func(s *settings, n int64) { s.podPidsLimit = n }),
	configfile.Bool("kubernetes_seccomp_localhost", configfile.EnvName("kubernetes_seccomp_localhost"), func(s *settings) *bool { return &s.seccompLocalhost }),
	configfile.String("gateway_url", "GATEWAY_URL", func(s *settings) *string { return &s.gatewayURL }),
	configfile.String("gateway_key", "GATEWAY_KEY", func(s *settings) *string { return &s.gatewayKey }),
	configfile.Int("max_concurrent_starts", 1, func(s *settings, n int64) { s.maxConcurrentStarts = int(n) }),
	configfile.Int("max_concurrent_execs", 0, func(s *settings, n int64) { s.maxConcurrentExecs = int(n) }),
	configfile.Int("serve_max_agents", 1, func(s *settings, n int64) { s.serveMaxAgents = int(n) }),
	configfile.Int("serve_max_concurrent_turns", 1, func(s *settings, n int64) { s.serveMaxTurns = int(n) }),
	configfile.Int("serve_max_body_bytes", 1<<10, func(s *settings, n int64) { s.serveMaxBodyBytes = n }),
	configfile.Int("serve_pool_size", 0, func(s *settings, n int64) { s.servePoolSize = int(n) }),
	configfile.Int("serve_pool_max", 1, func(s *settings, n int64) { s.servePoolMax = int(n) }),
	configfile.String("state", "SANDBOX_AGENT_STATE", func(s *settings) *string { return &s.state }),
	configfile.Int("serve_tenant_max_agents", 0, func(s *settings, n int64) { s.serveTenantMaxAgents = int(n) }),
	configfile.Int("serve_tenant_max_turns", 0, func(s *settings, n int64) { s.serveTenantMaxTurns = int(n) }),
	configfile.Int("serve_tenant_budget_tokens", 0, func(s *settings, n int64) { s.serveTenantBudget.Tokens = n }),
	{Name: "serve_tenant_budget_usd", Env: configfile.EnvName("serve_tenant_budget_usd"), Apply: func(s *settings, raw string) error {
		v, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("want a number of US dollars, at least 0, got %q", raw)
		}
		s.serveTenantBudget.USD = v
		return nil
	}},
	configfile.Duration("serve_tenant_budget_period", func(s *settings) *time.Duration { return &s.serveTenantBudgetPeriod }),
	configfile.Duration("serve_lease_ttl", func(s *settings) *time.Duration { return &s.serveLeaseTTL }),
	configfile.List("serve_oci_runtimes", "SANDBOX_AGENT_SERVE_OCI_RUNTIMES", func(s *settings) *[]string { return &s.serveOCIRuntimes }, func(names []string) error {
		for _, n := range names {
			if err := hardening.CheckOCIRuntime(n); err != nil {
				return err
			}
		}
		return nil
	}),
	configfile.Int("serve_tenant_checkpoint_bytes", 0, func(s *settings, n int64) { s.serveTenantCheckpointBytes = n }),
	configfile.Duration("checkpoint_retention", func(s *settings) *time.Duration { return &s.checkpointRetention }),
	{Name: "serve_repo_root", Env: configfile.EnvName("serve_repo_root"), Apply: func(s *settings, raw string) error {
		v := strings.TrimSpace(raw)
		if v != "" && !filepath.IsAbs(v) {
			return fmt.Errorf("want an absolute folder, got %q", raw)
		}
		s.serveRepoRoot = v
		return nil
	}},
}

// loadConfig reads the library's keys and the command line's from the
// same file and environment. Errors are *config.Error.
func loadConfig(path string, getenv func(string) string) (sandboxagent.Config, settings, error) {
	lib, err := config.Load(path, getenv, settingsKeyNames()...)
	if err != nil {
		return sandboxagent.Config{}, settings{}, err
	}
	s := defaultSettings()
	var libKeys []string
	for _, k := range config.Keys() {
		libKeys = append(libKeys, k[0])
	}
	if err := configfile.Load(&s, path, getenv, settingsKeys, libKeys); err != nil {
		var fe *configfile.Error
		if errors.As(err, &fe) {
			err = &config.Error{Key: fe.Key, Source: fe.Source, Err: fe.Err}
		}
		return sandboxagent.Config{}, settings{}, err
	}
	return lib, s, nil
}

// settingsKeyNames are the names of the command line's own keys, which
// the library's LoadConfig is told to leave alone.
func settingsKeyNames() []string {
	out := make([]string, len(settingsKeys))
	for i, k := range settingsKeys {
		out[i] = k.Name
	}
	return out
}
