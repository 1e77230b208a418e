// Package gittest runs the host's git for tests: a fixed identity, none
// of the user's or the system's config, gc off.
package gittest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
)

// Env is the environment of Run's git.
func Env() []string {
	return append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=user", "GIT_AUTHOR_EMAIL=user@example.com", "GIT_COMMITTER_NAME=user", "GIT_COMMITTER_EMAIL=user@example.com")
}

// Need fails (CI) or skips the test when git is not on the host.
func Need(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		prereq.Missing(t, "git is not installed on the host: %v", err)
	}
}

// Run runs git in dir and returns its trimmed output; a failure fails
// the test.
func Run(t testing.TB, dir string, args ...string) string {
	t.Helper()
	c := exec.Command("git", append([]string{"-c", "gc.auto=0"}, args...)...)
	c.Dir = dir
	c.Env = Env()
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// Init makes a repository at dir (created as needed) on branch main with
// one commit, "base", of files (name → content); it returns the commit.
func Init(t testing.TB, dir string, files map[string]string) string {
	t.Helper()
	Need(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	Run(t, dir, "init", "-q", "-b", "main")
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Run(t, dir, "add", "-A")
	Run(t, dir, "commit", "-q", "--allow-empty", "-m", "base")
	return Run(t, dir, "rev-parse", "HEAD")
}
