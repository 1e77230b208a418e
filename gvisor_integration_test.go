//go:build integration

package sandboxagent_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/seccomp"
)

// A sandbox under gVisor (runsc on Docker, .ci/gvisor.sh): its kernel is
// gVisor's, the engine reports the runtime, files written inside (its /tmp
// is a tmpfs in gVisor's kernel, which the engine's copy API cannot see)
// come out and go in, a timed-out command's processes are killed, and the
// system calls sandbox-agent's profile denies never reach the host kernel.
func TestIntegrationGVisor(t *testing.T) {
	t.Parallel()
	runsc := testenv.GVisor(t)
	rt := testenv.Runtime(t)
	img, err := catalog.Resolve("pi", "", testenv.Config().ImageName, "")
	if err != nil {
		t.Fatal(err)
	}
	sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{Image: img, OCIRuntime: runsc})
	ctx := ctxT(t)
	st, err := sb.Inspect(ctx)
	if err != nil || st.Runtime != runsc || st.Seccomp != seccomp.Digest(seccomp.Profile()) {
		t.Fatalf("Inspect: runtime %q seccomp %q %v; want %s and sandbox-agent's profile", st.Runtime, st.Seccomp, err, runsc)
	}
	host, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatal(err)
	}
	res, err := sb.Exec(ctx, []string{"uname", "-r"})
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) == strings.TrimSpace(string(host)) {
		t.Fatalf("uname -r in the sandbox: %q %v (the host's is %q): not gVisor's kernel", res.Stdout, err, host)
	}
	t.Logf("the sandbox's kernel: %s", bytesTrim(res.Stdout))

	// Files: written inside /tmp, read and downloaded on the host; uploaded
	// and read inside.
	if res, err := sb.Exec(ctx, []string{"sh", "-c", "mkdir -p /tmp/g && echo inside > /tmp/g/a && chmod 600 /tmp/g/a"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("write inside: %v %s", err, res.Stderr)
	}
	if b, err := sb.ReadFile(ctx, "/tmp/g/a", 0); err != nil || string(b) != "inside\n" {
		t.Errorf("ReadFile of a file written inside /tmp: %q %v", b, err)
	}
	dst := t.TempDir()
	if _, err := sb.Download(ctx, "/tmp/g", dst); err != nil {
		t.Errorf("Download: %v", err)
	} else if b, err := os.ReadFile(filepath.Join(dst, "g", "a")); err != nil || string(b) != "inside\n" {
		t.Errorf("downloaded: %q %v", b, err)
	}
	if err := sb.WriteFile(ctx, "/tmp/g/b", []byte("from the host\n"), 0o644); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	if res, err := sb.Exec(ctx, []string{"cat", "/tmp/g/b"}); err != nil || string(res.Stdout) != "from the host\n" {
		t.Errorf("the uploaded file inside: %q %v %s", res.Stdout, err, res.Stderr)
	}

	// A timed-out command and what it started are killed.
	res, err = sb.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", "sleep 300 & sleep 300"}, Timeout: 2 * time.Second})
	if err != nil || !res.TimedOut {
		t.Fatalf("timeout: %+v %v", res, err)
	}
	if res, _ := sb.Exec(ctx, []string{"sh", "-c", "ps -eo args | grep -c '^sleep 300' || true"}); strings.TrimSpace(string(res.Stdout)) != "0" {
		t.Errorf("after the timeout, sleeps left: %s", res.Stdout)
	}

	// gVisor's kernel serves the calls the profile denies (runsc applies
	// an OCI profile only to the container's first process): none is the
	// host kernel's, and none succeeds.
	res, err = sb.Exec(ctx, []string{"perl", "-e", `use Socket; for (425, 323, 321, 298, 250) { $! = 0; my $r = syscall($_, 0, 0, 0, 0, 0); printf "%d %d %d\n", $_, $r, $! + 0 } $! = 0; printf "vsock %d\n", socket(my $v, 40, SOCK_STREAM, 0) ? 0 : $! + 0;`})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("probe: %v %s", err, res.Stderr)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[1] != "-1" || len(f) == 2 && f[1] == "0" {
			t.Errorf("under gVisor a denied call succeeded: %q", line)
		}
	}
	t.Logf("denied calls under gVisor (nr ret errno): %s", strings.ReplaceAll(bytesTrim(res.Stdout), "\n", "; "))

	// At the memory limit the engine kills gVisor's kernel, and runsc
	// never ends the exec: the command fails as soon as the container
	// is seen stopped, not at its timeout.
	small := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{Image: img, OCIRuntime: runsc, MemoryBytes: 256 << 20})
	res, err = small.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", "x=a; while :; do x=$x$x; done"}, Timeout: 2 * time.Minute})
	if !errors.Is(err, sandboxagent.ErrContainerNotFound) || res.TimedOut {
		t.Errorf("at the memory limit under gVisor: %v (timed out %v), want ErrContainerNotFound before the timeout", err, res.TimedOut)
	}
}

func bytesTrim(b []byte) string { return strings.TrimSpace(string(b)) }
