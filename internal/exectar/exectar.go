// Package exectar copies files into and out of a sandbox through an exec
// of the image's own tar, for runtimes whose engine has no copy API
// (Kubernetes) or whose copy API does not see what the sandbox sees
// (gVisor: its /tmp is a tmpfs inside its own kernel). What comes out is
// a tar made inside the sandbox: hostile input, for safetar.
package exectar

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// Stream runs argv in the sandbox with stdio attached (nil: not attached)
// and returns its exit code.
type Stream func(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error)

// What the copy scripts exit with when the path is missing, or there but
// not open to the user the copy runs as.
const (
	exitNoPath   = 90
	exitNoAccess = 91
)

// copyInScript extracts stdin into $1. Whatever happens it reads stdin to
// the end before it exits: a command that exits while the client still
// sends (a missing folder, a tar that failed) left client-go's exec
// stream waiting until the copy's timeout.
const copyInScript = `if cd -- "$1" 2>/dev/null; then tar -x -f - -p; rc=$?; elif [ -e "$1" ]; then rc=91; else rc=90; fi
cat >/dev/null
exit "$rc"`

// copyOutScript writes a tar of $2 (in folder $1) to stdout, a symlink as
// itself. GNU tar's exit 1 ("file changed as we read it": a live folder)
// still made a whole archive.
const copyOutScript = `cd -- "$1" 2>/dev/null || { [ -e "$1" ] && exit 91; exit 90; }
{ [ -e "$2" ] || [ -L "$2" ]; } || exit 90
tar -c -f - --numeric-owner -- "$2"; rc=$?
[ "$rc" = 1 ] && exit 0
exit "$rc"`

// CopyTo extracts a tar stream into dir with the image's tar, as whoever
// stream runs commands as (owners in the archive apply only for root).
// where names the sandbox in errors ("pod", "container").
func CopyTo(ctx context.Context, stream Stream, where, dir string, tr io.Reader) error {
	var errb bytes.Buffer
	code, err := stream(ctx, []string{"/bin/sh", "-c", copyInScript, "sandbox-agent-copy", dir}, tr, io.Discard, &Limited{W: &errb, N: 4096})
	switch {
	case err != nil:
		return fmt.Errorf("copy to %s %s: %w", where, dir, err)
	case code == exitNoPath:
		return fmt.Errorf("copy to %s %s: %w", where, dir, sandboxagent.ErrPathNotFound)
	case code == exitNoAccess:
		return fmt.Errorf("copy to %s %s: %w (the copy runs as the sandbox's user)", where, dir, fs.ErrPermission)
	case code != 0:
		return fmt.Errorf("copy to %s %s: tar exited %d: %s", where, dir, code, strings.TrimSpace(errb.String()))
	}
	return nil
}

// CopyFrom streams a tar of p (a symlink as itself, never followed), made
// by the image's tar. A missing path is ErrPathNotFound before any byte
// is returned; a failure later ends the stream with an error.
func CopyFrom(ctx context.Context, stream Stream, where, p string) (io.ReadCloser, error) {
	dir, base := path.Split(path.Clean(p))
	if dir == "" {
		dir = "."
	}
	if base == "" || base == "/" {
		base, dir = ".", "/"
	}
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	go func() {
		var errb bytes.Buffer
		code, err := stream(ctx, []string{"/bin/sh", "-c", copyOutScript, "sandbox-agent-copy", dir, base}, nil, pw, &Limited{W: &errb, N: 4096})
		switch {
		case err != nil:
			pw.CloseWithError(fmt.Errorf("copy from %s %s: %w", where, p, err))
		case code == exitNoPath:
			pw.CloseWithError(fmt.Errorf("copy from %s %s: %w", where, p, sandboxagent.ErrPathNotFound))
		case code == exitNoAccess:
			pw.CloseWithError(fmt.Errorf("copy from %s %s: %w (the copy runs as the sandbox's user)", where, p, fs.ErrPermission))
		case code != 0:
			pw.CloseWithError(fmt.Errorf("copy from %s %s: tar exited %d: %s", where, p, code, strings.TrimSpace(errb.String())))
		default:
			pw.Close()
		}
	}()
	br := bufio.NewReaderSize(pr, 64<<10)
	if _, err := br.Peek(1); err != nil && err != io.EOF {
		cancel()
		pr.Close()
		return nil, err
	}
	return &readCloser{Reader: br, close: func() error { cancel(); return pr.Close() }}, nil
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r *readCloser) Close() error { return r.close() }

// Limited keeps the first N bytes written to W and drops the rest (a
// diagnostic of a hostile command must not grow the host's memory).
type Limited struct {
	W io.Writer
	N int
}

func (l *Limited) Write(p []byte) (int, error) {
	if l.N > 0 {
		k := min(len(p), l.N)
		l.W.Write(p[:k])
		l.N -= k
	}
	return len(p), nil
}
