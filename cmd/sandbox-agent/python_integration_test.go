//go:build integration

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/sandbox-agent/sandbox-agent/images/catalog"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// The Python package (python/) as a user gets it: its wheel built by
// .ci/build_wheel.sh, installed with `pip install --no-index` into a fresh
// venv, and its pytest suite run from there with no Go toolchain and no
// sandbox-agent on PATH: the unit tests against a fake engine, and the
// integration tests driving the engine the wheel carries (a private serve
// per Python process) on this engine with the fake model, for
// SANDBOX_AGENT_TEST_DRIVERS (default pi and claude).
func TestPythonPackage(t *testing.T) {
	drivers := os.Getenv("SANDBOX_AGENT_TEST_DRIVERS")
	if drivers == "" {
		drivers = "pi claude"
	}
	rt := testenv.Runtime(t)
	for _, d := range strings.Fields(drivers) {
		img, err := catalog.Resolve(d, "", os.Getenv("SANDBOX_AGENT_IMAGE_NAME"), "")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err = rt.Client().ImageInspect(ctx, img)
		cancel()
		if cerrdefs.IsNotFound(err) {
			prereq.Missing(t, "%s image %s is not in the engine's store (.ci/setup builds it)", d, img)
		} else if err != nil {
			t.Fatalf("inspect %s: %v", img, err)
		}
	}
	py := pythonVenv(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	// -p no:cacheprovider: nothing written into the checkout.
	cmd := exec.CommandContext(ctx, py.python, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider",
		filepath.Join(root, "python", "tests"))
	cmd.Dir = py.dir // not the checkout: `import sandbox_agent` must find the installed wheel
	cmd.Env = append(py.env, "SANDBOX_AGENT_TEST_INTEGRATION=1", "SANDBOX_AGENT_TEST_DRIVERS="+drivers)
	out, err := cmd.CombinedOutput()
	t.Logf("%s:\n%s", strings.Join(cmd.Args, " "), out)
	if err != nil {
		t.Fatalf("the Python suite failed: %v", err)
	}
	if bytes.Contains(out, []byte(" skipped")) {
		t.Fatal("the Python suite skipped tests")
	}
}

// BenchmarkPythonAsk: what the Python package adds to a turn, and its
// engine's start on first use. python/benchmarks/bench_ask.py (run from the
// installed wheel) times N asks of one agent on the fake model against the
// same turns' own duration in the engine (the Go API's Ask, measured by
// the engine in the same run): the overhead is the difference, per turn;
// and the private engine's start against a plain run of the same binary
// (`sandbox-agent version`).
func BenchmarkPythonAsk(b *testing.B) {
	py := pythonVenv(b)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(py.python, filepath.Join(root, "python", "benchmarks", "bench_ask.py"), "--json")
		cmd.Dir, cmd.Env, cmd.Stderr = py.dir, py.env, os.Stderr
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("bench_ask.py: %v", err)
		}
		var res map[string]float64
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			res = nil
			_ = json.Unmarshal(sc.Bytes(), &res)
		}
		if res == nil {
			b.Fatalf("bench_ask.py printed no result:\n%s", out)
		}
		for _, k := range []string{"overhead_p50_ms", "overhead_p90_ms", "ask_p50_ms", "engine_p50_ms", "start_ms", "start_baseline_ms", "start_ratio"} {
			b.ReportMetric(res[k], k)
		}
	}
}

// venv is a fresh venv with the package's wheel installed, and the
// environment to run its Python in: PATH without Go or sandbox-agent.
type venv struct {
	dir, python string
	env         []string
}

// pythonVenv builds the wheel (.ci/build_wheel.sh, the host's platform)
// and installs it with `pip install --no-index` into a fresh venv of
// Debian's python3 that sees the system's site-packages (for Debian's
// pytest: nothing is downloaded).
func pythonVenv(t testing.TB) venv {
	t.Helper()
	const sysPython = "/usr/bin/python3"
	if err := exec.Command(sysPython, "-c", "import ensurepip, venv, pytest, setuptools, wheel").Run(); err != nil {
		prereq.Missing(t, "%s with venv, pytest, setuptools and wheel (python3-venv python3-pytest python3-setuptools python3-wheel; .ci/setup installs them): %v", sysPython, err)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		prereq.Missing(t, "bash: %v", err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	build := exec.Command("bash", filepath.Join(root, ".ci", "build_wheel.sh"), "--out", filepath.Join(dir, "dist"))
	build.Dir = root
	var stderr bytes.Buffer
	build.Stderr = &stderr
	out, err := build.Output()
	if err != nil {
		t.Fatalf("build_wheel.sh: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	wheel := lines[len(lines)-1]
	if !strings.HasSuffix(wheel, ".whl") {
		t.Fatalf("build_wheel.sh printed %q last, want the wheel's path", wheel)
	}
	t.Logf("wheel: %s", filepath.Base(wheel))
	v := filepath.Join(dir, "venv")
	for _, args := range [][]string{
		{sysPython, "-m", "venv", "--system-site-packages", v},
		{filepath.Join(v, "bin", "pip"), "install", "--no-index", "--no-deps", "--no-cache-dir", "--disable-pip-version-check", "-q", wheel},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	env := []string{"PATH=" + filepath.Join(v, "bin") + ":/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "PATH", k == "SANDBOX_AGENT_BIN", k == "PYTHONPATH", k == "VIRTUAL_ENV", strings.HasPrefix(k, "GO"), k == "SANDBOX_AGENT_URL", k == "SANDBOX_AGENT_TOKEN":
		default:
			env = append(env, kv)
		}
	}
	return venv{dir: dir, python: filepath.Join(v, "bin", "python"), env: env}
}
