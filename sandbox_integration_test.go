//go:build integration

// Integration tests: they start real containers on the engine named by
// DOCKER_HOST. Run with: go test -tags integration ./...
package sandboxagent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/runtime/docker"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestIntegrationExec(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{Env: map[string]string{"SANDBOX_VAR": "from-sandbox"}})
	ctx := ctxT(t)

	tests := []struct {
		name       string
		req        sandboxagent.ExecRequest
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"exit code and streams", sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", "echo hi; echo err >&2; exit 3"}}, 3, "hi\n", "err\n"},
		{"env", sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", `printf '%s %s' "$SANDBOX_VAR" "$EXTRA"`}, Env: map[string]string{"EXTRA": "x y"}}, 0, "from-sandbox x y", ""},
		{"workdir", sandboxagent.ExecRequest{Cmd: []string{"pwd"}, WorkDir: "/tmp"}, 0, "/tmp\n", ""},
		{"user", sandboxagent.ExecRequest{Cmd: []string{"id", "-u"}, User: "65534"}, 0, "65534\n", ""},
		{"stdin", sandboxagent.ExecRequest{Cmd: []string{"cat"}, Stdin: strings.NewReader("piped\x00bytes")}, 0, "piped\x00bytes", ""},
		{"no stdin reads EOF", sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", "cat; echo done"}}, 0, "done\n", ""},
		{"missing binary", sandboxagent.ExecRequest{Cmd: []string{"/no/such/binary"}}, 127, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := sb.Run(ctx, tt.req)
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			if tt.wantCode == 127 && res.ExitCode == 126 {
				// Engines differ: 126 (cannot execute) or 127 (not found).
			} else if res.ExitCode != tt.wantCode {
				t.Errorf("exit code = %d, want %d (stderr %q)", res.ExitCode, tt.wantCode, res.Stderr)
			}
			if tt.name != "missing binary" && string(res.Stdout) != tt.wantStdout {
				t.Errorf("stdout = %q, want %q", res.Stdout, tt.wantStdout)
			}
			if tt.wantStderr != "" && string(res.Stderr) != tt.wantStderr {
				t.Errorf("stderr = %q, want %q", res.Stderr, tt.wantStderr)
			}
		})
	}
}

// lockedBuffer lets a test read what a streaming writer got so far.
type lockedBuffer struct {
	ch chan string
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.ch <- string(p)
	return len(p), nil
}

func TestIntegrationExecStreams(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{})
	ctx := ctxT(t)
	live := &lockedBuffer{ch: make(chan string, 16)}
	done := make(chan sandboxagent.ExecResult, 1)
	go func() {
		res, err := sb.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", "echo first; sleep 3; echo second"}, Stdout: live})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	select {
	case got := <-live.ch:
		if got != "first\n" {
			t.Fatalf("first chunk %q", got)
		}
	case <-done:
		t.Fatal("command finished before any output was streamed")
	}
	select {
	case <-done:
		t.Fatal("command finished right after its first line: output was not streamed live")
	default:
	}
	res := <-done
	if string(res.Stdout) != "first\nsecond\n" {
		t.Fatalf("captured %q", res.Stdout)
	}
}

func TestIntegrationExecOutputCap(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{})
	res, err := sb.Run(ctxT(t), sandboxagent.ExecRequest{
		Cmd: []string{"sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a; echo"}, MaxOutputBytes: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != 1000 || !res.Truncated || res.ExitCode != 0 {
		t.Fatalf("len=%d truncated=%v code=%d", len(res.Stdout), res.Truncated, res.ExitCode)
	}
}

// survivors lists the processes inside the sandbox whose command line is
// exactly cmdline (the keepalive loop runs sleeps of its own).
func survivors(t *testing.T, ctx context.Context, sb *sandboxagent.Sandbox, cmdline string) string {
	t.Helper()
	res, err := sb.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c",
		`for d in /proc/[0-9]*; do c=$(tr '\0' ' ' < $d/cmdline 2>/dev/null) && [ "$c" = "$1 " ] && echo "${d#/proc/}: $c"; done; true`, "x", cmdline}})
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(res.Stdout))
}

func TestIntegrationExecTimeoutKillsTree(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{})
	ctx := ctxT(t)
	tests := []struct {
		name, script, wantOut string
	}{
		{"background children", "echo before; sleep 100 & sleep 100", "before\n"},
		// A child that starts its own session and ignores SIGTERM still
		// carries the exec's tag and gets SIGKILL after the grace period.
		{"setsid and ignored TERM", `trap '' TERM; setsid sh -c "trap '' TERM; sleep 100" & echo started; sleep 100`, "started\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			res, err := sb.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", tt.script}, Timeout: 2 * time.Second})
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			if !res.TimedOut || res.ExitCode != sandboxagent.ExitCodeTimeout {
				t.Fatalf("TimedOut=%v ExitCode=%d, want true/124", res.TimedOut, res.ExitCode)
			}
			if string(res.Stdout) != tt.wantOut {
				t.Errorf("partial stdout = %q, want %q", res.Stdout, tt.wantOut)
			}
			if d := time.Since(start); d > 30*time.Second { // a hang guard, not a benchmark
				t.Errorf("timeout took %v", d)
			}
			if left := survivors(t, ctx, sb, "sleep 100"); left != "" {
				t.Fatalf("sleep processes survived: %s", left)
			}
		})
	}
	// The sandbox stays usable.
	res, err := sb.Exec(ctx, []string{"echo", "still here"})
	if err != nil || string(res.Stdout) != "still here\n" {
		t.Fatalf("after timeout: %q %v", res.Stdout, err)
	}
}

func TestIntegrationExecContextCancel(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{})
	ctx, cancel := context.WithCancel(ctxT(t))
	time.AfterFunc(time.Second, cancel)
	res, err := sb.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", "echo x; sleep 100 & sleep 100"}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if !res.TimedOut || res.ExitCode != 124 || string(res.Stdout) != "x\n" {
		t.Fatalf("res = %+v", res)
	}
	if left := survivors(t, ctxT(t), sb, "sleep 100"); left != "" {
		t.Fatalf("sleep processes survived: %s", left)
	}
}

func TestIntegrationHardening(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{})
	ctx := ctxT(t)
	st, err := sb.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Privileged || !st.Init || st.PidsLimit != sandboxagent.DefaultPidsLimit ||
		st.MemoryBytes != sandboxagent.DefaultMemoryBytes || st.MemorySwap != st.MemoryBytes || st.NetworkMode != "none" {
		t.Fatalf("hardening not as expected: %+v", st)
	}
	if st.Labels[sandboxagent.LabelManaged] != "true" || st.Labels[sandboxagent.LabelCreated] == "" {
		t.Fatalf("labels: %v", st.Labels)
	}
	// What the kernel says, from inside.
	res, err := sb.Exec(ctx, []string{"sh", "-c", "grep -E '^(CapEff|CapBnd|NoNewPrivs):' /proc/self/status"})
	if err != nil {
		t.Fatal(err)
	}
	status := string(res.Stdout)
	// CHOWN(0) DAC_OVERRIDE(1) FOWNER(3) FSETID(4) KILL(5) SETGID(6) SETUID(7) = 0xfb
	for _, want := range []string{"CapEff:\t00000000000000fb", "CapBnd:\t00000000000000fb", "NoNewPrivs:\t1"} {
		if !strings.Contains(status, want) {
			t.Errorf("want %q in\n%s", want, status)
		}
	}
	// No network by default.
	res, err = sb.Exec(ctx, []string{"sh", "-c", "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(res.Stdout)); len(got) != 1 || got[0] != "lo" {
		t.Errorf("interfaces = %v, want only lo", got)
	}
}

func TestIntegrationFiles(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{})
	ctx := ctxT(t)

	content := []byte("quotes \" ' and\nnewlines\n\x00binary ünïcode")
	if err := sb.WriteFile(ctx, "/tmp/new/dir/f.txt", content, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := sb.ReadFile(ctx, "/tmp/new/dir/f.txt", 0)
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("ReadFile = %q, %v", got, err)
	}
	if _, err := sb.ReadFile(ctx, "/tmp/new/dir/f.txt", 3); !errors.Is(err, sandboxagent.ErrLimitExceeded) {
		t.Fatalf("ReadFile over cap: %v", err)
	}
	if _, err := sb.ReadFile(ctx, "/no/such/file", 0); !errors.Is(err, sandboxagent.ErrPathNotFound) {
		t.Fatalf("ReadFile missing: %v", err)
	}

	// Upload a tree, change it inside, download it back.
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "proj", "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "proj", "a.txt"), []byte("A"), 0o644)
	os.WriteFile(filepath.Join(src, "proj", "sub", "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755)
	if err := sb.Upload(ctx, filepath.Join(src, "proj"), "/work/proj"); err != nil {
		t.Fatal(err)
	}
	res, err := sb.Exec(ctx, []string{"sh", "-c", "/work/proj/sub/run.sh && cat /work/proj/a.txt && echo B > /work/proj/b.txt"})
	if err != nil || string(res.Stdout) != "ran\nA" {
		t.Fatalf("in sandbox: %q %q %v", res.Stdout, res.Stderr, err)
	}
	dst := t.TempDir()
	rep, err := sb.Download(ctx, "/work/proj", dst)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Path != filepath.Join(dst, "proj") || rep.Files != 3 {
		t.Fatalf("report %+v", rep)
	}
	b, _ := os.ReadFile(filepath.Join(dst, "proj", "b.txt"))
	if string(b) != "B\n" {
		t.Fatalf("b.txt = %q", b)
	}
	// A single file to an explicit name.
	if _, err := sb.Download(ctx, "/work/proj/a.txt", filepath.Join(dst, "renamed.txt")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "renamed.txt")); string(b) != "A" {
		t.Fatalf("renamed.txt = %q", b)
	}
	if _, err := sb.Download(ctx, "/no/such", filepath.Join(dst, "x")); !errors.Is(err, sandboxagent.ErrPathNotFound) {
		t.Fatalf("download missing: %v", err)
	}
	assertNoStaging(t, dst)
}

// assertNoStaging checks no staging directory was left behind.
func assertNoStaging(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".sandbox-agent-download-") {
			t.Errorf("staging directory left behind: %s", e.Name())
		}
	}
}

// A command plants symlinks to /, /etc/passwd and .. (and a FIFO) in the
// directory it produces: the download writes only regular content, inside
// the destination, and reports what it skipped.
func TestIntegrationDownloadHostileSymlinks(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{})
	ctx := ctxT(t)
	res, err := sb.Exec(ctx, []string{"sh", "-c", `set -e; mkdir -p /out/sub; echo ok > /out/real.txt
ln -s / /out/root; ln -s /etc/passwd /out/passwd; ln -s .. /out/up; ln -s ../../../../etc /out/sub/etc; mkfifo /out/fifo`})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("plant: %v %s", err, res.Stderr)
	}
	parent := t.TempDir()
	dst := filepath.Join(parent, "dest")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	before := listTree(t, parent)
	rep, err := sb.Download(ctx, "/out", dst)
	if err != nil {
		t.Fatal(err)
	}
	skipped := map[string]bool{}
	for _, s := range rep.Skipped {
		skipped[s.Name] = true
	}
	for _, n := range []string{"out/root", "out/passwd", "out/up", "out/sub/etc", "out/fifo"} {
		if !skipped[n] {
			t.Errorf("%s not reported as skipped (report %+v)", n, rep.Skipped)
		}
	}
	after := listTree(t, parent)
	for p := range after {
		if !before[p] && !strings.HasPrefix(p, "dest/") {
			t.Errorf("written outside the destination: %s", p)
		}
	}
	for p := range after {
		fi, err := os.Lstat(filepath.Join(parent, p))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() && !fi.IsDir() {
			t.Errorf("%s is %v: only files and directories may be written", p, fi.Mode().Type())
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "out", "real.txt")); string(b) != "ok\n" {
		t.Errorf("real.txt = %q", b)
	}
	assertNoStaging(t, dst)
}

func listTree(t *testing.T, root string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[filepath.ToSlash(rel)] = true
		return nil
	})
	return out
}

func TestIntegrationCloseIdempotent(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{})
	ctx := ctxT(t)
	// Kill it behind our back: Close must still succeed, twice.
	if err := rt.Kill(ctx, sb.ID()); err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(); err != nil {
		t.Fatalf("Close after death: %v", err)
	}
	if err := sb.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := sb.Exec(ctx, []string{"true"}); !errors.Is(err, sandboxagent.ErrClosed) {
		t.Fatalf("Run after Close: %v", err)
	}
	if _, err := rt.Inspect(ctx, sb.ID()); !errors.Is(err, sandboxagent.ErrContainerNotFound) {
		t.Fatalf("container still there: %v", err)
	}
}

func TestIntegrationErrors(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	ctx := ctxT(t)
	_, err := sandboxagent.NewSandbox(ctx, rt, sandboxagent.SandboxOptions{Image: "sandbox-agent-test/no-such-image:1"})
	if !errors.Is(err, sandboxagent.ErrImageNotFound) {
		t.Fatalf("missing image: %v", err)
	}
	dead, err := docker.New(ctx, docker.Options{Host: "unix:///nonexistent/docker.sock"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sandboxagent.NewSandbox(ctx, dead, sandboxagent.SandboxOptions{Image: testenv.Image()})
	if !errors.Is(err, sandboxagent.ErrEngineUnavailable) {
		t.Fatalf("dead engine: %v", err)
	}
}

// waitGone polls until the container no longer exists.
func waitGone(t *testing.T, rt sandboxagent.Runtime, id string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		_, err := rt.Inspect(context.Background(), id)
		if errors.Is(err, sandboxagent.ErrContainerNotFound) {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("container %s still exists after %v", id, within)
}

func TestIntegrationKeepalive(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	ctx := ctxT(t)
	sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{Keepalive: 3 * time.Second})
	// A running command keeps the sandbox alive past its keepalive.
	res, err := sb.Exec(ctx, []string{"sleep", "6"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("long command: %+v %v", res, err)
	}
	if _, err := sb.Exec(ctx, []string{"true"}); err != nil {
		t.Fatalf("sandbox died while a command was running: %v", err)
	}
	// Idle, it removes itself.
	waitGone(t, rt, sb.ID(), 12*time.Second)
	if _, err := sb.Exec(ctx, []string{"true"}); !errors.Is(err, sandboxagent.ErrContainerNotFound) {
		t.Fatalf("exec in a dead sandbox: %v", err)
	}
}

// sandboxProc is one process of a sandbox, from its /proc/PID/stat.
type sandboxProc struct {
	pid, ppid, pgrp, sid int
	state                string // R, S, Z, ...
	comm                 string
}

func (p sandboxProc) String() string {
	return fmt.Sprintf("%d %d %d %d %s %s", p.pid, p.ppid, p.pgrp, p.sid, p.state, p.comm)
}

// sandboxProcs lists the sandbox's processes but the shell listing them
// (builtins only: it forks nothing, and it runs at the pids limit).
func sandboxProcs(t *testing.T, sb *sandboxagent.Sandbox) []sandboxProc {
	t.Helper()
	res, err := sb.Exec(ctxT(t), []string{"sh", "-c", `echo "self $$"; for p in /proc/[0-9]*/stat; do read -r l < "$p" && echo "$l"; done 2>/dev/null`})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("list processes: %v (exit %d, %q)", err, res.ExitCode, res.Stderr)
	}
	var self int
	var ps []sandboxProc
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		if v, ok := strings.CutPrefix(line, "self "); ok {
			self, _ = strconv.Atoi(v)
			continue
		}
		// "pid (comm) state ppid ..."; comm may hold spaces and ')'.
		open, closing := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
		if open < 1 || closing < open {
			continue
		}
		f := strings.Fields(line[closing+1:])
		pid, err1 := strconv.Atoi(strings.TrimSpace(line[:open]))
		if err1 != nil || len(f) < 4 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pgrp, _ := strconv.Atoi(f[2])
		sid, _ := strconv.Atoi(f[3])
		ps = append(ps, sandboxProc{pid: pid, ppid: ppid, pgrp: pgrp, sid: sid, state: f[0], comm: line[open+1 : closing]})
	}
	out := ps[:0]
	for _, p := range ps {
		if p.pid != self {
			out = append(out, p)
		}
	}
	return out
}

// pollProcs lists the sandbox's processes until ok accepts them or the
// deadline passes, and returns the last listing and whether ok accepted it.
func pollProcs(t *testing.T, sb *sandboxagent.Sandbox, deadline time.Time, ok func([]sandboxProc) bool) ([]sandboxProc, bool) {
	t.Helper()
	for {
		ps := sandboxProcs(t, sb)
		if ok(ps) {
			return ps, true
		}
		if time.Now().After(deadline) {
			return ps, false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func noZombie(ps []sandboxProc) bool {
	for _, p := range ps {
		if p.state == "Z" {
			return false
		}
	}
	return true
}

// The keepalive watchdog leaves no child unreaped: a zombie would count
// against the pids limit (and as activity) for the sandbox's whole life.
// The watchdog's one fork (bash's process substitution) happens at start,
// and bash does not reap it by itself while it waits in read -t: left
// alone, it stays a zombie until at least the first tick (5 s here). So
// zombies are looked for before that tick, and again after it and a few
// execs.
func TestIntegrationKeepaliveNoZombie(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	ctx := ctxT(t)
	start := time.Now()
	sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{Keepalive: 10 * time.Minute}) // a tick every 5 s
	if ps, ok := pollProcs(t, sb, start.Add(4*time.Second), noZombie); !ok {
		t.Errorf("zombie in a fresh sandbox (pid ppid pgrp sid state comm):\n%s", procLines(ps))
	}
	for _, cmd := range [][]string{
		{"true"},
		{"sh", "-c", "echo a | cat"},
		{"sh", "-c", "sleep 0.2 >/dev/null 2>&1 & echo started"}, // an orphan for init to reap
	} {
		if res, err := sb.Exec(ctx, cmd); err != nil || res.ExitCode != 0 {
			t.Fatalf("%q: %v (exit %d)", cmd, err, res.ExitCode)
		}
	}
	time.Sleep(time.Until(start.Add(6 * time.Second))) // past the first tick
	if ps, ok := pollProcs(t, sb, time.Now().Add(5*time.Second), noZombie); !ok {
		t.Errorf("zombie after a few execs and a keepalive tick (pid ppid pgrp sid state comm):\n%s", procLines(ps))
	}
}

func procLines(ps []sandboxProc) string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = "  " + p.String()
	}
	return strings.Join(lines, "\n")
}

// The child mode of this test binary: start a sandbox, print its id, and
// wait to be killed.
func TestMain(m *testing.M) {
	if os.Getenv("SANDBOX_AGENT_TEST_CHILD") == "1" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

func childMain() int {
	ctx := context.Background()
	rt, err := docker.New(ctx, docker.Options{})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	ka, _ := time.ParseDuration(os.Getenv("SANDBOX_AGENT_TEST_KEEPALIVE"))
	sb, err := sandboxagent.NewSandbox(ctx, rt, sandboxagent.SandboxOptions{Image: testenv.Image(), Keepalive: ka, Config: testenv.Config()})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	fmt.Println("ID", sb.ID())
	time.Sleep(time.Hour)
	return 0
}

// startOrphan runs a child process that starts a sandbox, then SIGKILLs it.
func startOrphan(t *testing.T, keepalive time.Duration) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SANDBOX_AGENT_TEST_CHILD=1", "SANDBOX_AGENT_TEST_KEEPALIVE="+keepalive.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, _ := out.Read(buf)
	line := strings.TrimSpace(string(buf[:n]))
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	id, ok := strings.CutPrefix(line, "ID ")
	if !ok {
		t.Fatalf("child: %q", line)
	}
	return id
}

func TestIntegrationOrphanRemovesItself(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	id := startOrphan(t, 3*time.Second)
	waitGone(t, rt, id, 15*time.Second)
}

func TestIntegrationGC(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	ctx := ctxT(t)
	orphan := startOrphan(t, time.Hour)
	t.Cleanup(func() { rt.Remove(context.Background(), orphan) })
	live := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{})

	// A foreign container that merely looks similar.
	foreign, err := rt.Create(ctx, sandboxagent.ContainerSpec{
		Name: "not-ours-" + strconv.Itoa(os.Getpid()), Image: testenv.Image(), Cmd: []string{"sleep", "300"},
		Labels: map[string]string{"sandbox-agent.managed": "false"}, NetworkMode: "none", Init: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Remove(context.Background(), foreign) })
	if err := rt.Start(ctx, foreign); err != nil {
		t.Fatal(err)
	}

	res, err := sandboxagent.GC(ctx, rt, sandboxagent.GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	removed := map[string]bool{}
	for _, e := range res.Removed {
		removed[e.ID] = true
	}
	if !removed[orphan] {
		t.Errorf("orphan %s not removed: %+v", orphan, res)
	}
	if removed[live.ID()] {
		t.Errorf("live sandbox of a running owner removed")
	}
	if _, err := rt.Inspect(ctx, orphan); !errors.Is(err, sandboxagent.ErrContainerNotFound) {
		t.Errorf("orphan still exists: %v", err)
	}
	if st, err := rt.Inspect(ctx, foreign); err != nil || !st.Running {
		t.Errorf("foreign container touched: %+v %v", st, err)
	}
	if st, err := rt.Inspect(ctx, live.ID()); err != nil || !st.Running {
		t.Errorf("live sandbox touched: %v", err)
	}
}

// Files put into the sandbox belong to its user, so an unprivileged CLI can
// rewrite what was uploaded for it.
func TestIntegrationFilesOwnedBySandboxUser(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{User: "65534:65534"})
	ctx := ctxT(t)
	if err := sb.WriteFile(ctx, "/tmp/owned/f.txt", []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := sb.Exec(ctx, []string{"sh", "-c", "echo b >> /tmp/owned/f.txt && stat -c '%u:%g' /tmp/owned/f.txt && cat /tmp/owned/f.txt"})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || string(res.Stdout) != "65534:65534\na\nb\n" {
		t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}
