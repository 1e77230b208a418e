package runtimetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// exec: exit codes, separate streams, environment and working directory
// per exec, stdin, another user (or ErrUnsupportedByRuntime), live
// streaming and the output cap.
func (s *suite) exec(t *testing.T) {
	sb := s.start(t, sandboxagent.SandboxOptions{Env: map[string]string{"SANDBOX_VAR": "from-sandbox"}})
	ctx := ctxT(t, 5*time.Minute)

	big := make([]byte, 4<<20)
	_, _ = rand.Read(big)
	sum := sha256.Sum256(big)
	tests := []struct {
		name       string
		req        sandboxagent.ExecRequest
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"exit 0", sandboxagent.ExecRequest{Cmd: []string{"true"}}, 0, "", ""},
		{"exit code and separate streams", sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", "echo hi; echo err >&2; exit 3"}}, 3, "hi\n", "err\n"},
		{"missing command", sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", "runtimetest-no-such-command"}}, 127, "", "*"},
		{"sandbox env and per-exec env", sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", `printf '%s %s' "$SANDBOX_VAR" "$EXTRA"`}, Env: map[string]string{"EXTRA": "x y"}}, 0, "from-sandbox x y", ""},
		{"per-exec env overrides the sandbox's", sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", `printf %s "$SANDBOX_VAR"`}, Env: map[string]string{"SANDBOX_VAR": "per-exec"}}, 0, "per-exec", ""},
		{"workdir", sandboxagent.ExecRequest{Cmd: []string{"pwd"}, WorkDir: "/tmp"}, 0, "/tmp\n", ""},
		{"default workdir: the image's", sandboxagent.ExecRequest{Cmd: []string{"pwd"}}, 0, "/\n", ""},
		{"stdin", sandboxagent.ExecRequest{Cmd: []string{"cat"}, Stdin: strings.NewReader("piped\x00bytes")}, 0, "piped\x00bytes", ""},
		{"large stdin", sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", "sha256sum | cut -d' ' -f1"}, Stdin: bytes.NewReader(big)}, 0, hex.EncodeToString(sum[:]) + "\n", ""},
		{"no stdin reads EOF", sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", "cat; echo done"}}, 0, "done\n", ""},
		{"large stdout", sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' a"}}, 0, strings.Repeat("a", 3000000), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := sb.Run(ctx, tt.req)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.ExitCode != tt.wantCode {
				t.Errorf("exit code = %d, want %d (stderr %q)", res.ExitCode, tt.wantCode, res.Stderr)
			}
			if string(res.Stdout) != tt.wantStdout {
				t.Errorf("stdout = %.200q (%d bytes), want %.200q", res.Stdout, len(res.Stdout), tt.wantStdout)
			}
			switch tt.wantStderr {
			case "*":
				if len(res.Stderr) == 0 {
					t.Errorf("no stderr")
				}
			default:
				if string(res.Stderr) != tt.wantStderr {
					t.Errorf("stderr = %q, want %q", res.Stderr, tt.wantStderr)
				}
			}
			if res.TimedOut || res.Truncated {
				t.Errorf("TimedOut=%v Truncated=%v", res.TimedOut, res.Truncated)
			}
		})
	}

	// A missing binary run directly: the engine reports 127 (not found)
	// or 126 (cannot execute); engines differ.
	t.Run("missing binary", func(t *testing.T) {
		res, err := sb.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"/no/such/binary"}})
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if res.ExitCode != 127 && res.ExitCode != 126 {
			t.Errorf("exit code = %d, want 127 (or 126)", res.ExitCode)
		}
	})

	t.Run("user", func(t *testing.T) {
		res, err := sb.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"id", "-u"}, User: "nobody"})
		if !s.features.ExecUser {
			if !errors.Is(err, sandboxagent.ErrUnsupportedByRuntime) {
				t.Fatalf("without ExecUser, Run as nobody = %+v, %v; want ErrUnsupportedByRuntime", res, err)
			}
			return
		}
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "65534\n" {
			t.Fatalf("Run as nobody: %q exit %d %v; want 65534", res.Stdout, res.ExitCode, err)
		}
	})

	// The command waits for a file the test creates only once the first
	// lines arrived: they can only have come while it ran.
	t.Run("streaming", func(t *testing.T) {
		stdout, stderr := newLiveBuffer(), newLiveBuffer()
		finished := make(chan struct{})
		var res sandboxagent.ExecResult
		var err error
		go func() {
			defer close(finished)
			res, err = sb.Run(ctx, sandboxagent.ExecRequest{
				Cmd:    []string{"sh", "-c", "echo first; echo warn >&2; while [ ! -e /tmp/release ]; do sleep 0.1; done; echo second"},
				Stdout: stdout, Stderr: stderr, Timeout: 3 * time.Minute,
			})
		}()
		gotOut := stdout.waitFor("first\n", finished, 2*time.Minute)
		gotErr := stderr.waitFor("warn\n", finished, time.Minute)
		select {
		case <-finished:
			t.Fatalf("the command ended before it was released: %+v %v", res, err)
		default:
		}
		sh(t, ctx, sb, "touch /tmp/release")
		<-finished
		if !gotOut || !gotErr {
			t.Errorf("while the command ran the writers got stdout %q, stderr %q", stdout, stderr)
		}
		if err != nil || string(res.Stdout) != "first\nsecond\n" || string(res.Stderr) != "warn\n" {
			t.Errorf("captured %q %q, %v", res.Stdout, res.Stderr, err)
		}
		if stdout.String() != "first\nsecond\n" || stderr.String() != "warn\n" {
			t.Errorf("streamed %q %q", stdout, stderr)
		}
	})

	t.Run("output cap", func(t *testing.T) {
		live := newLiveBuffer()
		res, err := sb.Run(ctx, sandboxagent.ExecRequest{
			Cmd: []string{"sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a; echo; echo e >&2"}, MaxOutputBytes: 1000, Stdout: live,
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Stdout) != 1000 || !res.Truncated || res.ExitCode != 0 || string(res.Stderr) != "e\n" {
			t.Errorf("len=%d truncated=%v code=%d stderr=%q", len(res.Stdout), res.Truncated, res.ExitCode, res.Stderr)
		}
		if n := len(live.String()); n != 100001 {
			t.Errorf("the streaming writer got %d bytes, want all 100001", n)
		}
	})
}

// timeout: a command past its timeout, or whose context is cancelled, is
// killed with its whole process tree (children in the background, in
// their own session, ignoring SIGTERM); the result keeps the output so
// far, says 124 and TimedOut; the sandbox stays usable.
func (s *suite) timeout(t *testing.T) {
	sb := s.start(t, sandboxagent.SandboxOptions{})
	ctx := ctxT(t, 5*time.Minute)

	// First, with the context: the survivor scan is shown to see the
	// running tree before it is asked to see none.
	t.Run("context cancel", func(t *testing.T) {
		mark := randHex(8)
		live := newLiveBuffer()
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		finished := make(chan struct{})
		var res sandboxagent.ExecResult
		var err error
		go func() {
			defer close(finished)
			res, err = sb.Run(runCtx, sandboxagent.ExecRequest{
				Cmd: []string{"sh", "-c", "echo x; sleep 100 & sleep 100"}, Env: map[string]string{markVar: mark},
				Stdout: live, Timeout: 3 * time.Minute,
			})
		}()
		if !live.waitFor("x\n", finished, 2*time.Minute) {
			t.Fatalf("no output from the command: %q", live)
		}
		var seen []string
		if !poll(time.Minute, func() bool { seen = marked(t, ctx, sb, mark); return len(seen) >= 3 }) {
			t.Fatalf("the scan saw %v of the running tree (sh and two sleeps)", seen)
		}
		cancel()
		<-finished
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if !res.TimedOut || res.ExitCode != 124 || string(res.Stdout) != "x\n" {
			t.Errorf("res = %+v, want TimedOut, 124 and stdout x", res)
		}
		if left := marked(t, ctx, sb, mark); len(left) != 0 {
			t.Errorf("processes survived the cancel: %v", left)
		}
	})

	for _, tt := range []struct {
		name, script, wantOut string
	}{
		{"background children", "echo before; sleep 100 & sleep 100", "before\n"},
		// A child that starts its own session and ignores SIGTERM still
		// carries the exec's tag and gets SIGKILL after the grace period.
		{"setsid and ignored TERM", `trap '' TERM; setsid sh -c "trap '' TERM; sleep 100" & echo started; while :; do sleep 1; done`, "started\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mark := randHex(8)
			res, err := sb.Run(ctx, sandboxagent.ExecRequest{
				Cmd: []string{"sh", "-c", tt.script}, Env: map[string]string{markVar: mark}, Timeout: 5 * time.Second,
			})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if !res.TimedOut || res.ExitCode != 124 {
				t.Errorf("TimedOut=%v ExitCode=%d, want true/124", res.TimedOut, res.ExitCode)
			}
			if string(res.Stdout) != tt.wantOut {
				t.Errorf("partial stdout = %q, want %q", res.Stdout, tt.wantOut)
			}
			if left := marked(t, ctx, sb, mark); len(left) != 0 {
				t.Errorf("processes survived the timeout: %v", left)
			}
		})
	}

	res, err := sb.Exec(ctx, []string{"echo", "still here"})
	if err != nil || string(res.Stdout) != "still here\n" {
		t.Fatalf("after the timeouts: %q %v", res.Stdout, err)
	}
}
