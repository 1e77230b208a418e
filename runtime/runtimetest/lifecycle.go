package runtimetest

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// runLabel is an extra label the suite's sandboxes carry, so List can
// find exactly one test's containers.
const runLabel = "runtimetest.run"

// lifecycle: a sandbox starts running with our labels, List finds it by
// them, Close removes it (idempotently), also after the container died
// behind its back; a missing image and an unreachable engine are typed
// errors.
func (s *suite) lifecycle(t *testing.T) {
	t.Run("start inspect list close", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t, 3*time.Minute)
		run := randHex(6)
		sb := s.start(t, sandboxagent.SandboxOptions{Labels: map[string]string{runLabel: run}})
		host, _ := os.Hostname()

		st, err := sb.Inspect(ctx)
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		if !st.Running || st.Status != sandboxagent.StatusRunning {
			t.Errorf("Inspect: Running=%v Status=%q, want true/%q", st.Running, st.Status, sandboxagent.StatusRunning)
		}
		// (Podman reports the image by the name it resolved, e.g.
		// docker.io/library/debian:stable-slim.)
		if st.ID != sb.ID() || st.Name != sb.Name() || (st.Image != s.Image && !strings.HasSuffix(st.Image, "/"+s.Image)) {
			t.Errorf("Inspect: ID %q Name %q Image %q, want %q %q %q", st.ID, st.Name, st.Image, sb.ID(), sb.Name(), s.Image)
		}
		if st.Created.IsZero() {
			t.Errorf("Inspect: no creation time")
		}
		keepalive := strconv.FormatInt(int64(s.Config.Keepalive.Round(time.Second)/time.Second), 10)
		if s.Config.Keepalive <= 0 {
			keepalive = strconv.FormatInt(int64(sandboxagent.DefaultConfig().Keepalive/time.Second), 10)
		}
		for k, want := range map[string]string{
			sandboxagent.LabelManaged:   "true",
			sandboxagent.LabelHost:      host,
			sandboxagent.LabelPID:       strconv.Itoa(os.Getpid()),
			sandboxagent.LabelKeepalive: keepalive,
			runLabel:                    run,
		} {
			if got := st.Labels[k]; got != want {
				t.Errorf("label %s = %q, want %q (labels %v)", k, got, want, st.Labels)
			}
		}
		if n, err := strconv.ParseInt(st.Labels[sandboxagent.LabelCreated], 10, 64); err != nil || n <= 0 {
			t.Errorf("label %s = %q, want Unix seconds", sandboxagent.LabelCreated, st.Labels[sandboxagent.LabelCreated])
		}

		list, err := s.Runtime.List(ctx, map[string]string{sandboxagent.LabelManaged: "true", runLabel: run})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if len(list) != 1 || list[0].ID != sb.ID() || !list[0].Running || list[0].Status != sandboxagent.StatusRunning || list[0].Labels[runLabel] != run {
			t.Errorf("List by labels = %+v, want the one running sandbox %s", list, sb.ID())
		}
		if other, err := s.Runtime.List(ctx, map[string]string{runLabel: run + "-other"}); err != nil || len(other) != 0 {
			t.Errorf("List by a label nobody has = %+v, %v; want none", other, err)
		}

		if err := sb.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := sb.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if _, err := sb.Exec(ctx, []string{"true"}); !errors.Is(err, sandboxagent.ErrClosed) {
			t.Errorf("Exec after Close: %v, want ErrClosed", err)
		}
		s.waitRemoved(t, ctx, sb.ID(), run)
		if err := s.Runtime.Remove(ctx, sb.ID()); err != nil {
			t.Errorf("Remove of a removed container: %v, want nil", err)
		}
		if _, err := s.Runtime.Inspect(ctx, "runtimetest-no-such-"+randHex(6)); !errors.Is(err, sandboxagent.ErrContainerNotFound) {
			t.Errorf("Inspect of a container that never existed: %v, want ErrContainerNotFound", err)
		}
	})

	t.Run("close after the container died", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t, 3*time.Minute)
		run := randHex(6)
		sb := s.start(t, sandboxagent.SandboxOptions{Labels: map[string]string{runLabel: run}})
		// Killed behind the sandbox's back.
		if err := s.Runtime.Kill(ctx, sb.ID()); err != nil {
			t.Fatalf("Kill: %v", err)
		}
		if !poll(time.Minute, func() bool {
			st, err := s.Runtime.Inspect(ctx, sb.ID())
			return errors.Is(err, sandboxagent.ErrContainerNotFound) || (err == nil && !st.Running)
		}) {
			t.Fatal("still running a minute after Kill")
		}
		if _, err := sb.Exec(ctx, []string{"true"}); !errors.Is(err, sandboxagent.ErrContainerNotFound) {
			t.Errorf("Exec in a killed sandbox: %v, want ErrContainerNotFound", err)
		}
		if err := sb.Close(); err != nil {
			t.Errorf("Close after death: %v", err)
		}
		if err := sb.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		s.waitRemoved(t, ctx, sb.ID(), run)
	})

	t.Run("missing image", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t, 3*time.Minute)
		run := randHex(6)
		cfg := s.Config
		sb, err := sandboxagent.NewSandbox(ctx, s.Runtime, sandboxagent.SandboxOptions{
			Image: "sandbox-agent-test/no-such-image:1", Config: cfg, Labels: map[string]string{runLabel: run},
		})
		if !errors.Is(err, sandboxagent.ErrImageNotFound) {
			if sb != nil {
				sb.Close()
			}
			t.Fatalf("NewSandbox with a missing image: %v, want ErrImageNotFound", err)
		}
		if left, err := s.Runtime.List(ctx, map[string]string{runLabel: run}); err != nil || len(left) != 0 {
			t.Errorf("a failed start left %+v (%v)", left, err)
		}
	})

	t.Run("unreachable engine", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t, 3*time.Minute)
		dead := s.Unreachable(t)
		if _, err := dead.Info(ctx); !errors.Is(err, sandboxagent.ErrEngineUnavailable) {
			t.Errorf("Info: %v, want ErrEngineUnavailable", err)
		}
		sb, err := sandboxagent.NewSandbox(ctx, dead, sandboxagent.SandboxOptions{Image: s.Image, Config: s.Config})
		if !errors.Is(err, sandboxagent.ErrEngineUnavailable) {
			if sb != nil {
				sb.Close()
			}
			t.Errorf("NewSandbox: %v, want ErrEngineUnavailable", err)
		}
	})
}

// waitRemoved waits (bounded) until the container is gone: Inspect says
// ErrContainerNotFound and List by its run label finds nothing.
func (s *suite) waitRemoved(t *testing.T, ctx context.Context, id, run string) {
	t.Helper()
	var lastErr error
	var lastList []sandboxagent.ContainerState
	if !poll(2*time.Minute, func() bool {
		_, lastErr = s.Runtime.Inspect(ctx, id)
		lastList, _ = s.Runtime.List(ctx, map[string]string{runLabel: run})
		return errors.Is(lastErr, sandboxagent.ErrContainerNotFound) && len(lastList) == 0
	}) {
		t.Errorf("container %s not removed: Inspect %v, List %+v", id, lastErr, lastList)
	}
}
