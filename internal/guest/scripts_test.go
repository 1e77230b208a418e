package guest

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
)

// The embedded scripts are the files in scripts/, each runs under the
// shell it names.
func TestScripts(t *testing.T) {
	scripts := map[string]string{
		"keepalive-launch.sh": Launcher,
		"keepalive.sh":        Keepalive,
		"exec-kill.sh":        ExecKill,
		"cgroup-counters.sh":  Counters,
		"process-scan.sh":     ProcessScan,
		"kill-group.bash":     KillGroup,
		"user-ids.sh":         UserIDs,
		"adopt-settle.sh":     AdoptSettle,
		"once.sh":             Once,
	}
	files, err := filepath.Glob("scripts/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(scripts) {
		t.Errorf("scripts/ holds %v, embedded are %d", files, len(scripts))
	}
	for name, text := range scripts {
		shell := "sh"
		if strings.HasSuffix(name, ".bash") {
			shell = "bash"
		}
		if first, _, _ := strings.Cut(text, "\n"); first != "# shellcheck shell="+shell {
			t.Errorf("%s: first line %q, want the shellcheck shell directive for %s", name, first, shell)
		}
		for _, sh := range []string{shell, "bash"} { // keepalive.sh runs under either
			if sh == "bash" && shell != "bash" && name != "keepalive.sh" {
				continue
			}
			path, err := exec.LookPath(sh)
			if err != nil {
				t.Logf("%s: no %s to check the syntax with", name, sh)
				continue
			}
			if out, err := exec.Command(path, "-n", "-c", text).CombinedOutput(); err != nil {
				t.Errorf("%s -n %s: %v: %s", sh, name, err, out)
			}
		}
	}
}

// shellcheck finds nothing in the scripts (.ci/run lints them too; this is
// for a local go test). Without shellcheck the test is skipped, except in
// CI, where that is a failure.
func TestScriptsShellcheck(t *testing.T) {
	sc, err := exec.LookPath("shellcheck")
	if err != nil {
		prereq.Missing(t, "shellcheck is not installed (apt-get install shellcheck)")
	}
	files, err := filepath.Glob("scripts/*.*sh")
	if err != nil || len(files) == 0 {
		t.Fatalf("scripts/: %v %v", files, err)
	}
	if out, err := exec.Command(sc, files...).CombinedOutput(); err != nil {
		t.Errorf("shellcheck: %v\n%s", err, out)
	}
	// keepalive.sh runs under bash when the image has it.
	if out, err := exec.Command(sc, "-s", "bash", "scripts/keepalive.sh").CombinedOutput(); err != nil {
		t.Errorf("shellcheck -s bash: %v\n%s", err, out)
	}
}

// The watchdog under bash survives seeks that fail: bash's read seeks a
// file back to the end of the line it used, and on /proc/PID/status of a
// process reaped meanwhile that fails (ESRCH, common under a fork bomb),
// leaving the file's unread lines in bash's buffer for its next read. It
// read them as the uptime, died of an arithmetic error, and took the
// sandbox with it. strace makes every seek fail; the watchdog must still
// reach its lifetime and exit 0.
func TestKeepaliveSurvivesFailedSeeks(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		prereq.Missing(t, "no strace to make the seeks fail")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		prereq.Missing(t, "no bash")
	}
	inject := []string{"-f", "-o", "/dev/null", "-e", "trace=lseek", "-e", "inject=lseek:error=ESRCH"}
	if out, err := exec.Command(strace, append(inject, "true")...).CombinedOutput(); err != nil {
		prereq.Missing(t, "strace cannot trace here (ptrace not allowed?): %v: %s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	// Keepalive 600 s, a check every second, a lifetime of 3 s.
	out, err := exec.CommandContext(ctx, strace, append(inject, bash, "-c", Keepalive, "sandbox-agent-keepalive", "600", "1", "3")...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "max lifetime of 3 s reached") {
		t.Fatalf("watchdog with failing seeks: %v: %s", err, out)
	}
	if d := time.Since(start); d < 2*time.Second {
		t.Errorf("ended after %v, before its lifetime", d)
	}
}
