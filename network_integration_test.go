//go:build integration

package sandboxagent_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// resolve returns the address name resolves to inside the sandbox ("" when
// it does not resolve).
func resolve(t *testing.T, sb *sandboxagent.Sandbox, name string) string {
	t.Helper()
	res, err := sb.Exec(ctxT(t), []string{"getent", "hosts", name})
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(res.Stdout))
	if res.ExitCode != 0 || len(f) == 0 {
		return ""
	}
	return f[0]
}

// How a sandbox on the engine's bridge names the host differs: Docker
// resolves ExtraHosts "NAME:host-gateway" (to its bridge's gateway) and
// adds no name of its own; Podman 4 does not resolve host-gateway (the
// runtime refuses it rather than let Podman write it into /etc/hosts as
// is) and adds host.containers.internal itself. No traffic leaves the
// sandbox: only names are resolved.
func TestIntegrationBridgeHostNames(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	info := testenv.Engine(t)
	podman4 := info.Name == "podman" && strings.HasPrefix(info.Version, "4.")

	opts := sandboxagent.SandboxOptions{Image: testenv.Image(), Config: testenv.Config(), Network: "bridge",
		ExtraHosts: []string{"sandbox-agent-gw:host-gateway"}}
	if podman4 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sb, err := sandboxagent.NewSandbox(ctx, rt, opts)
		if err == nil {
			sb.Close()
		}
		if !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Fatalf("host-gateway on Podman %s: %v, want ErrInvalidArgument", info.Version, err)
		}
		opts.ExtraHosts = nil
	}
	sb := testenv.Sandbox(t, rt, opts)
	gw := resolve(t, sb, "sandbox-agent-gw")
	internal := resolve(t, sb, "host.containers.internal")
	t.Logf("%s %s, bridge: host-gateway -> %q, host.containers.internal -> %q", info.Name, info.Version, gw, internal)
	switch {
	case info.Name == "docker":
		if net.ParseIP(gw) == nil {
			t.Errorf("host-gateway resolved to %q, want an address", gw)
		}
	case podman4:
		if net.ParseIP(internal) == nil {
			t.Errorf("host.containers.internal resolved to %q, want an address", internal)
		}
	default: // a later Podman: both
		if net.ParseIP(gw) == nil || net.ParseIP(internal) == nil {
			t.Errorf("host-gateway -> %q, host.containers.internal -> %q: want addresses", gw, internal)
		}
	}
}
