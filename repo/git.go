package repo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// hardening is passed to every git the package runs, on the host and in
// the sandbox: no hook, no fsmonitor, no automatic gc or maintenance, no
// signing program, no submodule recursion.
var hardening = []string{
	"-c", "core.hooksPath=/dev/null",
	"-c", "core.fsmonitor=false",
	"-c", "core.untrackedCache=false",
	"-c", "gc.auto=0",
	"-c", "maintenance.auto=false",
	"-c", "commit.gpgSign=false",
	"-c", "tag.gpgSign=false",
	"-c", "submodule.recurse=false",
	"-c", "fetch.recurseSubmodules=false",
	"-c", "protocol.allow=never",
	"-c", "protocol.file.allow=always",
	"-c", "core.sshCommand=false",
	"-c", "credential.helper=",
}

// gitEnv is the whole environment of a host git: the caller's GIT_*
// variables (GIT_DIR, GIT_CONFIG_PARAMETERS, GIT_EXTERNAL_DIFF, ...) are
// not inherited, nor is the system's or the user's config read.
func gitEnv() []string {
	env := []string{
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_ATTR_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_OPTIONAL_LOCKS=0",
		"GIT_NO_REPLACE_OBJECTS=1",
		"LC_ALL=C",
	}
	// HOME and XDG_CONFIG_HOME: the user's ignore file (git/ignore),
	// which Options.Worktree's listing honours.
	for _, k := range []string{"PATH", "HOME", "XDG_CONFIG_HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// git runs host git in dir with the hardening and returns its stdout.
type git struct {
	dir   string
	extra []string // more environment (GIT_INDEX_FILE, identities)
	// maxVM caps the process's address space (bytes; 0: none): git
	// reading hostile objects fails instead of taking the host's memory.
	maxVM int64
}

func (g git) cmd(ctx context.Context, args ...string) *exec.Cmd {
	argv := append(append([]string{"git"}, hardening...), args...)
	if g.maxVM > 0 {
		argv = append([]string{"sh", "-c", `ulimit -v "$0" || exit 125; exec "$@"`, strconv.FormatInt(g.maxVM>>10, 10)}, argv...)
	}
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Dir = g.dir
	c.Env = append(gitEnv(), g.extra...)
	return c
}

// run runs git with stdin and returns its trimmed stdout; a failure's
// error carries git's stderr.
func (g git) run(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	c := g.cmd(ctx, args...)
	c.Stdin = stdin
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &limitedBuffer{buf: &errb, max: 64 << 10}
	if err := c.Run(); err != nil {
		return "", gitError(args, err, errb.String())
	}
	return strings.TrimRight(out.String(), "\n"), nil
}

func (g git) out(ctx context.Context, args ...string) (string, error) {
	return g.run(ctx, nil, args...)
}

// ok runs git and says whether it exited 0 (a failure to run at all is
// an error).
func (g git) ok(ctx context.Context, args ...string) (bool, error) {
	c := g.cmd(ctx, args...)
	err := c.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return false, nil
	}
	if err != nil {
		return false, gitError(args, err, "")
	}
	return true, nil
}

func gitError(args []string, err error, stderr string) error {
	if errors.Is(err, exec.ErrNotFound) {
		return fmt.Errorf("%w on the host: %w", ErrNoGit, err)
	}
	name := "git"
	for i := 0; i < len(args); i++ {
		if args[i] == "-c" {
			i++
			continue
		}
		if !strings.HasPrefix(args[i], "-") {
			name += " " + args[i]
			break
		}
	}
	if s := strings.TrimSpace(stderr); s != "" {
		return fmt.Errorf("%s: %w: %s", name, err, s)
	}
	return fmt.Errorf("%s: %w", name, err)
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	buf *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if n := l.max - l.buf.Len(); n > 0 {
		l.buf.Write(p[:min(n, len(p))])
	}
	return len(p), nil
}
