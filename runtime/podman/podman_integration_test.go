//go:build integration

package podman_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/runtime/podman"
)

// New finds a running Podman service and Info recognises it. Skipped where
// no Podman socket exists, unless SANDBOX_AGENT_TEST_ENGINE=podman.
func TestIntegrationPodmanNew(t *testing.T) {
	host, err := podman.Host()
	if err != nil {
		if os.Getenv("SANDBOX_AGENT_TEST_ENGINE") == "podman" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := podman.New(ctx, podman.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	info, err := rt.Info(ctx)
	if err != nil {
		if prereq.InCI() && os.Getenv("SANDBOX_AGENT_TEST_ENGINE") == "podman" {
			t.Fatal(err)
		}
		t.Skipf("podman at %s does not answer: %v", host, err)
	}
	if info.Name != "podman" || info.Version == "" {
		t.Fatalf("Info at %s = %+v, want podman", host, info)
	}
	t.Logf("%s: podman %s, API %s, rootless %v", host, info.Version, info.APIVersion, info.Rootless)
}
