//go:build integration

package sandboxagent_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/runtime/docker"
)

// The disk limit, enforced for real by a Docker engine on btrfs with quota
// groups (.ci/docker-btrfs.sh, started and removed here): a write past it
// fails inside, the command reports ErrDiskLimit, and the engine's disk
// grows by at most the limit; a sandbox asking nothing gets the default.
// On the main engine (overlay2 on ext4, which enforces nothing) a limit
// asked is refused with ErrHardening.
func TestIntegrationDiskLimit(t *testing.T) {
	if info := testenv.Engine(t); info.Name != "docker" {
		t.Skipf("the btrfs engine is a second dockerd: Docker only, not %s", info.Name)
	}
	if os.Geteuid() != 0 {
		prereq.Missing(t, "a loop-mounted btrfs and a second dockerd need root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	t.Run("refused where not enforced", func(t *testing.T) {
		rt := testenv.Runtime(t)
		if err := rt.DiskQuotas(ctx); err == nil {
			t.Skip("the main engine enforces disk limits")
		}
		_, err := sandboxagent.NewSandbox(ctx, rt, sandboxagent.SandboxOptions{Image: testenv.Image(), Config: testenv.Config(), DiskBytes: 1 << 30})
		var he *sandboxagent.HardeningError
		if !errors.As(err, &he) || he.Setting != "disk" {
			t.Fatalf("a disk limit on an engine that cannot enforce it: %v, want ErrHardening on disk", err)
		}
		t.Logf("refused: %v", err)
		// No limit asked: none is set, and the sandbox starts.
		sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{})
		if st, err := sb.Inspect(ctx); err != nil || st.DiskBytes != 0 {
			t.Errorf("default on overlay2: disk %d %v, want none", st.DiskBytes, err)
		}
	})

	const state = "/var/lib/sandbox-agent-btrfs"
	script := func(arg string) *exec.Cmd {
		c := exec.Command("bash", ".ci/docker-btrfs.sh", arg)
		c.Env = append(os.Environ(), "BTRFS_STATE="+state)
		return c
	}
	// Stopped whatever start did (a half-started engine too), after the
	// sandboxes are closed (cleanups run last-registered first).
	t.Cleanup(func() {
		if out, err := script("stop").CombinedOutput(); err != nil {
			t.Errorf("docker-btrfs.sh stop: %v: %s", err, out)
		}
	})
	out, err := script("start").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("docker-btrfs.sh start: %v: %s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	host := lines[len(lines)-1]
	rt, err := docker.New(ctx, docker.Options{Host: host})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if err := rt.DiskQuotas(ctx); err != nil {
		t.Fatalf("the btrfs engine: %v", err)
	}
	cfg := testenv.Config()
	start := func(t *testing.T, opts sandboxagent.SandboxOptions) *sandboxagent.Sandbox {
		opts.Image, opts.Config = testenv.Image(), cfg
		sb, err := sandboxagent.NewSandbox(ctx, rt, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Close() })
		return sb
	}
	t.Run("default", func(t *testing.T) {
		sb := start(t, sandboxagent.SandboxOptions{})
		if st, err := sb.Inspect(ctx); err != nil || st.DiskBytes != 10<<30 {
			t.Errorf("default limit %d %v, want %d", st.DiskBytes, err, 10<<30)
		}
	})
	t.Run("enforced", func(t *testing.T) {
		const limit = 256 << 20 // the image's layers count too
		sb := start(t, sandboxagent.SandboxOptions{DiskBytes: limit})
		used := func() int64 {
			var st syscall.Statfs_t
			if err := syscall.Statfs(state+"/mnt", &st); err != nil {
				t.Fatal(err)
			}
			return int64(st.Blocks-st.Bfree) * st.Bsize
		}
		before := used()
		res, err := sb.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"dd", "if=/dev/zero", "of=/tmp/big", "bs=1M", "count=600"}, Timeout: 3 * time.Minute})
		var re *sandboxagent.ResourceError
		if !errors.Is(err, sandboxagent.ErrDiskLimit) || !errors.As(err, &re) || re.Limit != limit || res.ExitCode == 0 {
			t.Fatalf("600 MB written under a 256 MiB limit: exit %d, %v (stderr %s); want a failed write and ErrDiskLimit", res.ExitCode, err, res.Stderr)
		}
		t.Logf("reported: %v; inside: %s", err, strings.TrimSpace(string(res.Stderr)))
		if grew := used() - before; grew > limit {
			t.Errorf("the engine's disk grew by %d bytes, more than the %d-byte limit", grew, limit)
		} else {
			t.Logf("the engine's disk grew by %d MiB", grew>>20)
		}
		// The sandbox lives on: a file deleted frees its room.
		if res, err := sb.Exec(ctx, []string{"sh", "-c", "rm /tmp/big && echo ok > /tmp/small && cat /tmp/small"}); err != nil || string(res.Stdout) != "ok\n" {
			t.Errorf("after freeing: %q %v %s", res.Stdout, err, res.Stderr)
		}
	})
}
