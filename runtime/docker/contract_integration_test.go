//go:build integration

package docker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/runtime/docker"
	"github.com/sandbox-agent/sandbox-agent/runtime/runtimetest"
)

// The runtime contract (runtime/runtimetest) on the engine DOCKER_HOST
// names: Docker, or Podman's compatible API (CI's Podman step sets
// DOCKER_HOST and SANDBOX_AGENT_TEST_ENGINE=podman, which testenv checks).
func TestIntegrationContract(t *testing.T) {
	rt := testenv.Runtime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	info, err := rt.Info(ctx)
	if err != nil {
		prereq.Missing(t, "no container engine: %v", err)
	}
	if info.Name != "docker" && info.Name != "podman" {
		t.Fatalf("engine name %q, want docker or podman", info.Name)
	}
	if info.Version == "" || info.APIVersion == "" {
		t.Fatalf("incomplete engine info %+v", info)
	}
	if _, err := rt.Client().ImageInspect(ctx, testenv.Image()); cerrdefs.IsNotFound(err) {
		prereq.Missing(t, "test image %s is missing (build it with .ci/build_base.sh)", testenv.Image())
	}
	runtimetest.Run(t, runtimetest.Backend{
		Runtime: rt,
		Image:   testenv.Image(),
		Config:  testenv.Config(),
		Foreign: func(t *testing.T) func() bool { return foreign(t, rt) },
		Unreachable: func(t *testing.T) sandboxagent.Runtime {
			dead, err := docker.New(context.Background(), docker.Options{Host: "unix://" + filepath.Join(t.TempDir(), "no-engine.sock")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { dead.Close() })
			return dead
		},
	})
}

// foreign starts a container straight through the engine's client, not
// through the Runtime: it looks like a sandbox of this host whose owner
// died, except that LabelManaged is not "true".
func foreign(t *testing.T, rt *docker.Runtime) func() bool {
	t.Helper()
	c := rt.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	host, _ := os.Hostname()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	res, err := c.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: "not-ours-" + hex.EncodeToString(b),
		Config: &container.Config{
			Image: testenv.Image(),
			Cmd:   []string{"sleep", "600"},
			Labels: map[string]string{
				sandboxagent.LabelManaged: "false",
				sandboxagent.LabelHost:    host,
				sandboxagent.LabelPID:     "999999999", // no such process
			},
		},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatalf("create the foreign container: %v", err)
	}
	t.Cleanup(func() {
		_, _ = c.ContainerRemove(context.Background(), res.ID, client.ContainerRemoveOptions{Force: true})
	})
	if _, err := c.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatalf("start the foreign container: %v", err)
	}
	return func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ins, err := c.ContainerInspect(ctx, res.ID, client.ContainerInspectOptions{})
		return err == nil && ins.Container.State != nil && ins.Container.State.Running
	}
}
