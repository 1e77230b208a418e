//go:build integration

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// version's engine line, read from the engine's ping, says what the
// engine's full answer (Runtime.Info: /version) says.
func TestIntegrationCLIVersion(t *testing.T) {
	rt := testenv.Runtime(t)
	info, err := rt.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, cliEnv(), "version")
	want := fmt.Sprintf("sandbox-agent %s\nengine: %s %s (API %s)\n", version, info.Name, info.Version, info.APIVersion)
	if code != exitOK || stdout != want {
		t.Fatalf("version: exit %d stdout %q stderr %q, want %q", code, stdout, stderr, want)
	}
}

// BenchmarkProcessStart measures sandbox-agent as a whole process, as a
// shell runs it: `exec -- true` against `docker run --rm --network none
// IMAGE true` (the same image, the two interleaved A B A B so that drift
// and other load hit both alike), and `version` and `--help` of the
// default build against the build with the Kubernetes runtime (-tags
// kubernetes), with their sizes. One iteration (-benchtime 1x) runs
// SANDBOX_AGENT_START_ROUNDS pairs (default 30) and 50 runs of each
// version and --help. .ci/bench prints the metrics.
func BenchmarkProcessStart(b *testing.B) {
	testenv.Runtime(b)
	for _, tool := range []string{"go", "docker"} {
		if _, err := exec.LookPath(tool); err != nil {
			prereq.Missing(b, "%s not installed", tool)
		}
	}
	rounds := 30
	if v := os.Getenv("SANDBOX_AGENT_START_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 {
			b.Fatalf("SANDBOX_AGENT_START_ROUNDS=%q: want a number of at least 2", v)
		}
		rounds = n
	}
	dir := b.TempDir()
	slim, k8s := filepath.Join(dir, "sandbox-agent"), filepath.Join(dir, "sandbox-agent-kubernetes")
	for bin, tags := range map[string]string{slim: "", k8s: "kubernetes"} {
		// As the release builds them (.ci/release.sh): static, without
		// debug info.
		build := exec.Command("go", "build", "-tags", tags, "-trimpath", "-ldflags", "-s -w", "-o", bin, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("go build -tags %q: %v\n%s", tags, err, out)
		}
	}
	// A clean environment: the engine, no user configuration.
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "DOCKER_HOST=" + os.Getenv("DOCKER_HOST"),
		"SANDBOX_AGENT_CONFIG=" + filepath.Join(dir, "none.json")}
	run := func(name string, args ...string) time.Duration {
		cmd := exec.Command(name, args...)
		cmd.Env = env
		start := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(start)
		if err != nil {
			b.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return d
	}
	img := testenv.Image()
	// Warm up: the image's layers and both binaries in the page cache.
	run("docker", "run", "--rm", "--network", "none", img, "true")
	run(slim, "exec", "--image", img, "--", "true")
	run(k8s, "--help")
	load := loadavg()
	for b.Loop() {
		var dockerRun, saExec []time.Duration
		for range rounds {
			dockerRun = append(dockerRun, run("docker", "run", "--rm", "--network", "none", img, "true"))
			saExec = append(saExec, run(slim, "exec", "--image", img, "--", "true"))
		}
		report := func(prefix string, ds []time.Duration) {
			b.ReportMetric(ms(pct(ds, 50)), prefix+"-p50-ms")
			b.ReportMetric(ms(pct(ds, 90)), prefix+"-p90-ms")
		}
		report("docker-run", dockerRun)
		report("exec", saExec)
		b.ReportMetric(float64(pct(saExec, 50))/float64(pct(dockerRun, 50)), "exec/docker-run")
		b.ReportMetric(float64(pct(saExec, 90))/float64(pct(dockerRun, 90)), "exec/docker-run-p90")
		for _, c := range []struct {
			name string
			args []string
		}{{"version", []string{"version"}}, {"help", []string{"--help"}}} {
			var plain, kube []time.Duration
			for range 50 {
				plain = append(plain, run(slim, c.args...))
				kube = append(kube, run(k8s, c.args...))
			}
			report(c.name, plain)
			report(c.name+"-k8s", kube)
		}
	}
	for bin, name := range map[string]string{slim: "size-mb", k8s: "size-k8s-mb"} {
		st, err := os.Stat(bin)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(st.Size())/1e6, name)
	}
	b.Logf("load average %s before, %s after", load, loadavg())
}

// loadavg is /proc/loadavg's three averages, "?" where there is none.
func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
