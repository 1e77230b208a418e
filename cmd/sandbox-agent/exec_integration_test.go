//go:build integration

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// cliEnv is the environment the CLI runs with in these tests: the engine,
// and the image name when the run sets one (.ci/run on Podman: the agent
// image was pulled from a loopback registry under its name).
func cliEnv() map[string]string {
	return map[string]string{"DOCKER_HOST": os.Getenv("DOCKER_HOST"), "SANDBOX_AGENT_IMAGE_NAME": os.Getenv("SANDBOX_AGENT_IMAGE_NAME")}
}

func TestIntegrationCLIExec(t *testing.T) {
	testenv.Runtime(t)
	img := testenv.Image()
	t.Run("exit code passes through", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, cliEnv(), "exec", "--image", img, "--", "sh", "-c", "echo hi; exit 3")
		if code != 3 || stdout != "hi\n" {
			t.Fatalf("exit %d stdout %q stderr %q", code, stdout, stderr)
		}
	})
	t.Run("timeout is 124 and kills the commands", func(t *testing.T) {
		// The commands would run 10 minutes: returning well before
		// proves the timeout killed them (the background one too) rather
		// than waiting for them. The bound guards against that hang only;
		// it says nothing of speed on a loaded machine.
		start := time.Now()
		code, _, stderr := runCLI(t, cliEnv(), "exec", "--image", img, "--timeout", "2s", "--", "sh", "-c", "sleep 600 & sleep 600")
		if code != 124 {
			t.Fatalf("exit %d, want 124 (stderr %q)", code, stderr)
		}
		if d := time.Since(start); d > 5*time.Minute {
			t.Errorf("returned after %v: the timeout waited for the commands", d)
		}
		if !strings.Contains(stderr, "timed out") {
			t.Errorf("stderr %q", stderr)
		}
	})
	t.Run("OOM kill is reported and keeps exit 137", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, cliEnv(), "exec", "--image", img, "--memory", "64m", "--",
			"sh", "-c", "echo start; x=a; while :; do x=$x$x; done")
		if code != 137 || stdout != "start\n" || !strings.Contains(stderr, "out of memory") {
			t.Fatalf("exit %d stdout %q stderr %q; want 137 and an out-of-memory report", code, stdout, stderr)
		}
	})
	t.Run("egress: none by default, the allow-list through the proxy, denials on stderr, open warns", func(t *testing.T) {
		probe := `getent hosts deb.debian.org >/dev/null && echo RESOLVED; echo "proxy=${HTTPS_PROXY:-none}"`
		code, stdout, stderr := runCLI(t, cliEnv(), "exec", "--image", img, "--", "sh", "-c", probe)
		if code != 0 || stdout != "proxy=none\n" {
			t.Fatalf("default: exit %d stdout %q stderr %q", code, stdout, stderr)
		}
		connect := `p=${HTTPS_PROXY##*:}; exec 3<>/dev/tcp/127.0.0.1/$p; printf 'CONNECT deb.debian.org:443 HTTP/1.1\r\nHost: deb.debian.org:443\r\n\r\n' >&3; IFS= read -r l <&3; echo "$l"`
		code, stdout, stderr = runCLI(t, cliEnv(), "exec", "--image", img, "--allow-host", "registry.npmjs.org", "--", "bash", "-c", connect)
		if code != 0 || !strings.Contains(stdout, " 403") || !strings.Contains(stderr, "sandbox-agent: egress to deb.debian.org:443 denied: not on the allow-list") {
			t.Fatalf("allow-list: exit %d stdout %q stderr %q", code, stdout, stderr)
		}
		code, _, stderr = runCLI(t, cliEnv(), "exec", "--image", img, "--egress", "open", "--", "true")
		if code != 0 || !strings.Contains(stderr, "warning: egress open") {
			t.Fatalf("open: exit %d stderr %q", code, stderr)
		}
	})
	t.Run("bad limits are our error", func(t *testing.T) {
		for _, args := range [][]string{{"--memory", "lots"}, {"--memory", "1k"}, {"--pids", "-1"}} {
			code, _, stderr := runCLI(t, cliEnv(), append(append([]string{"exec", "--image", img}, args...), "--", "true")...)
			if code != exitError || !strings.Contains(stderr, args[0]) {
				t.Errorf("%v: exit %d stderr %q", args, code, stderr)
			}
		}
	})
	t.Run("missing image is our error", func(t *testing.T) {
		code, _, stderr := runCLI(t, cliEnv(), "exec", "--image", "sandbox-agent-test/none:1", "--", "true")
		if code != exitError || !strings.Contains(stderr, "image not found") {
			t.Fatalf("exit %d stderr %q", code, stderr)
		}
	})
	t.Run("upload, env, workdir, download with planted symlinks", func(t *testing.T) {
		dir := t.TempDir()
		in := filepath.Join(dir, "in.txt")
		os.WriteFile(in, []byte("payload"), 0o644)
		out := filepath.Join(dir, "dest")
		os.Mkdir(out, 0o755)
		code, stdout, stderr := runCLI(t, cliEnv(), "exec", "--image", img, "--env", "GREETING=hello",
			"--workdir", "/tmp", "--upload", in+":/data/in.txt", "--download", "/tmp/out:"+out, "--",
			"sh", "-c", `mkdir out && cp /data/in.txt out/copy.txt && echo "$GREETING" > out/g.txt && ln -s / out/root && ln -s /etc/passwd out/passwd && ln -s .. out/up && pwd`)
		if code != 0 || stdout != "/tmp\n" {
			t.Fatalf("exit %d stdout %q stderr %q", code, stdout, stderr)
		}
		if b, _ := os.ReadFile(filepath.Join(out, "out", "copy.txt")); string(b) != "payload" {
			t.Errorf("copy.txt = %q", b)
		}
		if b, _ := os.ReadFile(filepath.Join(out, "out", "g.txt")); string(b) != "hello\n" {
			t.Errorf("g.txt = %q", b)
		}
		for _, n := range []string{"out/root", "out/passwd", "out/up"} {
			if !strings.Contains(stderr, "skipped "+n) {
				t.Errorf("stderr does not report %s skipped: %q", n, stderr)
			}
			if _, err := os.Lstat(filepath.Join(out, n)); err == nil {
				t.Errorf("%s was written", n)
			}
		}
		ents, _ := os.ReadDir(dir)
		if len(ents) != 2 {
			t.Errorf("extra entries beside the destination: %v", ents)
		}
	})
}

func TestIntegrationCLIGC(t *testing.T) {
	testenv.Runtime(t)
	code, stdout, stderr := runCLI(t, cliEnv(), "gc", "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, cliEnv(), "version")
	if code != 0 || !strings.Contains(stdout, "engine: ") {
		t.Fatalf("version: %d %q", code, stdout)
	}
}
