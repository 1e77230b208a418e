package kit

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// Exit codes the drivers' session scripts use: no such session; it
// already exists. Shell.Run returns them without an error for the caller
// to interpret.
const (
	ExitNoSession = 3
	ExitExists    = 4
)

// Shell runs sh scripts in the sandbox for one driver, as the sandbox's
// user, in its working directory. Every script starts with H set to Dir,
// the directory the driver's files live in.
type Shell struct {
	// Driver is the driver's name; errors start with it.
	Driver string
	// Dir is the driver's directory as a shell expression, e.g.
	// `${CODEX_HOME:-$HOME/.codex}`; "" is $HOME. Scripts see it as $H,
	// and WriteFile and Remove take paths relative to it.
	Dir string
	// DirUmask, when set, is the umask under which WriteFile creates
	// missing directories (e.g. "077" for a CLI that keeps its folders
	// private); "" keeps the sandbox's.
	DirUmask string
	// Env is the environment of every script.
	Env map[string]string
}

var _ Files = Shell{}

func (s Shell) prelude() string {
	dir := s.Dir
	if dir == "" {
		dir = "$HOME"
	}
	return `H="` + dir + `"` + "\n"
}

// Exec runs script with sh -c (after the $H prelude) with args as $1...
// and stdin as its input. The error is only for a command that could not
// run or timed out; the exit code is the caller's to read.
func (s Shell) Exec(ctx context.Context, c sandboxagent.ContainerOps, stdin []byte, script string, args ...string) (sandboxagent.ExecResult, error) {
	req := sandboxagent.ExecRequest{Cmd: append([]string{"sh", "-c", s.prelude() + script, "sh"}, args...), Env: s.Env}
	if stdin != nil {
		req.Stdin = bytes.NewReader(stdin)
	}
	res, err := c.Run(ctx, req)
	if err != nil {
		return res, fmt.Errorf("%s: %w", s.Driver, err)
	}
	if res.TimedOut {
		return res, fmt.Errorf("%s: sandbox command: %w", s.Driver, sandboxagent.ErrTimeout)
	}
	return res, nil
}

// Run is Exec for scripts whose failure is an error: it returns stdout
// and the exit code. A non-zero exit is an error, except ExitNoSession and
// ExitExists.
func (s Shell) Run(ctx context.Context, c sandboxagent.ContainerOps, stdin []byte, script string, args ...string) ([]byte, int, error) {
	res, err := s.Exec(ctx, c, stdin, script, args...)
	if err != nil {
		return nil, res.ExitCode, err
	}
	switch res.ExitCode {
	case 0, ExitNoSession, ExitExists:
		return res.Stdout, res.ExitCode, nil
	}
	return nil, res.ExitCode, fmt.Errorf("%s: sandbox command failed (exit %d): %s", s.Driver, res.ExitCode, FirstLine(string(res.Stderr)))
}

// Require fails with ErrCLIMissing when cli is not on the sandbox's PATH.
func (s Shell) Require(ctx context.Context, c sandboxagent.ContainerOps, cli string) error {
	res, err := s.Exec(ctx, c, nil, `command -v "$1" >/dev/null 2>&1`, cli)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%s: %w", s.Driver, sandboxagent.ErrCLIMissing)
	}
	return nil
}

// FirstLine is s's first non-empty line, trimmed.
func FirstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}

// Fold is s on one line: its words joined by single spaces.
func Fold(s string) string { return strings.Join(strings.Fields(s), " ") }

// writeScript writes stdin to $H/$1 with mode $2, creating parents under
// umask $3 (scripts/write.sh).
//
//go:embed scripts/write.sh
var writeScript string

// checkRel refuses a path that is not a clean relative one.
func checkRel(rel string) error {
	if !fs.ValidPath(rel) || rel == "." {
		return fmt.Errorf("%w: path %q", sandboxagent.ErrInvalidArgument, rel)
	}
	return nil
}

// WriteFile writes data to $H/rel atomically, creating parents. The file
// belongs to the sandbox's user, who runs the CLI and must be able to
// rewrite it.
func (s Shell) WriteFile(ctx context.Context, c sandboxagent.ContainerOps, rel string, data []byte, mode fs.FileMode) error {
	if err := checkRel(rel); err != nil {
		return err
	}
	if data == nil {
		data = []byte{}
	}
	res, err := s.Exec(ctx, c, data, writeScript, rel, strconv.FormatUint(uint64(mode.Perm()), 8), s.DirUmask)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%s: write %s: exit %d: %s", s.Driver, rel, res.ExitCode, FirstLine(string(res.Stderr)))
	}
	return nil
}

// Remove removes $H/rel and all it holds; a missing one is no error.
func (s Shell) Remove(ctx context.Context, c sandboxagent.ContainerOps, rel string) error {
	if err := checkRel(rel); err != nil {
		return err
	}
	_, _, err := s.Run(ctx, c, nil, `rm -rf -- "$H/$1"`, rel)
	return err
}
