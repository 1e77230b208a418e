// Package sandboxsh is what the drivers share for touching a sandbox
// through ContainerOps.Run: small sh scripts with arguments and stdin, and
// files written as the sandbox's user.
package sandboxsh

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// Exit codes the drivers' session scripts use: no such session; it
// already exists. Run returns them without an error for the caller to
// interpret.
const (
	ExitNoSession = 3
	ExitExists    = 4
)

// Run runs script with sh -c in the sandbox (as its user, in its working
// directory) with args as $1..., stdin as its input, and returns stdout
// and the exit code. A non-zero exit is an error, except ExitNoSession and
// ExitExists. Errors are prefixed with the driver's name.
func Run(ctx context.Context, c sandboxagent.ContainerOps, driver string, stdin []byte, script string, args ...string) ([]byte, int, error) {
	req := sandboxagent.ExecRequest{Cmd: append([]string{"sh", "-c", script, "sh"}, args...)}
	if stdin != nil {
		req.Stdin = bytes.NewReader(stdin)
	}
	res, err := c.Run(ctx, req)
	if err != nil {
		return nil, -1, fmt.Errorf("%s: %w", driver, err)
	}
	if res.TimedOut {
		return nil, res.ExitCode, fmt.Errorf("%s: sandbox command: %w", driver, sandboxagent.ErrTimeout)
	}
	switch res.ExitCode {
	case 0, ExitNoSession, ExitExists:
		return res.Stdout, res.ExitCode, nil
	}
	return nil, res.ExitCode, fmt.Errorf("%s: sandbox command failed (exit %d): %s", driver, res.ExitCode, FirstLine(string(res.Stderr)))
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

const writeHomeScript = `set -e
f="$HOME/$1"
mkdir -p -- "$(dirname -- "$f")"
tmp="$f.tmp.$$"
cat > "$tmp"
chmod "$2" "$tmp"
mv -f -- "$tmp" "$f"`

// WriteHomeFile writes data to $HOME/rel atomically, creating parents.
// The file belongs to the sandbox's user, who runs the CLI and must be
// able to rewrite it.
func WriteHomeFile(ctx context.Context, c sandboxagent.ContainerOps, driver, rel string, data []byte, mode fs.FileMode) error {
	if !fs.ValidPath(rel) || rel == "." {
		return fmt.Errorf("%w: path %q", sandboxagent.ErrInvalidArgument, rel)
	}
	if data == nil {
		data = []byte{}
	}
	_, code, err := Run(ctx, c, driver, data, writeHomeScript, rel, strconv.FormatUint(uint64(mode.Perm()), 8))
	if err == nil && code != 0 {
		err = fmt.Errorf("%s: write ~/%s: exit %d", driver, rel, code)
	}
	return err
}
