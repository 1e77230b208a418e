package runtimetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// limits: a memory hog past MemoryBytes is a *ResourceError matching
// ErrOutOfMemory, a fork bomb under PidsLimit one matching ErrPidsLimit,
// and the sandbox is usable afterwards. They run one at a time (Run runs
// them before the parallel subtests): a fork bomb must not starve the
// engine's execs of a small machine.
func (s *suite) limits(t *testing.T) {
	t.Run("memory hog", s.memoryHog)
	t.Run("fork bomb", s.forkBomb)
	if !s.features.PidsLimit {
		// The node's limit is the only one: asking a stricter one than
		// it enforces is refused before the sandbox runs anything.
		t.Run("pids limit refused", func(t *testing.T) {
			s.refused(t, sandboxagent.SandboxOptions{PidsLimit: 8}, "pids_limit")
		})
	}
}

// refused checks that NewSandbox fails with a *HardeningError on setting
// and leaves no container of this run behind.
func (s *suite) refused(t *testing.T, opts sandboxagent.SandboxOptions, setting string) {
	t.Helper()
	run := randHex(6)
	opts.Image, opts.Config = s.Image, s.Config
	opts.Labels = map[string]string{"runtimetest.refused": run}
	ctx := ctxT(t, 3*time.Minute)
	sb, err := sandboxagent.NewSandbox(ctx, s.Runtime, opts)
	if err == nil {
		sb.Close()
		t.Fatalf("NewSandbox succeeded; want a HardeningError on %s", setting)
	}
	var he *sandboxagent.HardeningError
	if !errors.As(err, &he) || he.Setting != setting {
		t.Fatalf("NewSandbox: %v; want a HardeningError on %s", err, setting)
	}
	t.Logf("refused: %v", err)
	left, err := s.Runtime.List(ctx, map[string]string{"runtimetest.refused": run})
	if err != nil || len(left) != 0 {
		t.Errorf("left behind: %+v %v", left, err)
	}
}

func (s *suite) memoryHog(t *testing.T) {
	const limit = 64 << 20
	sb := s.start(t, sandboxagent.SandboxOptions{MemoryBytes: limit})
	ctx := ctxT(t, 5*time.Minute)
	// A shell doubling a string until the OOM killer stops it.
	res, err := sb.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", "x=a; while :; do x=$x$x; done"}, Timeout: 2 * time.Minute})
	var re *sandboxagent.ResourceError
	if !errors.Is(err, sandboxagent.ErrOutOfMemory) || !errors.As(err, &re) {
		t.Fatalf("want an out-of-memory ResourceError, got %v (exit %d, timed out %v)", err, res.ExitCode, res.TimedOut)
	}
	if re.Limit != limit || re.Events < 1 || res.ExitCode != 137 {
		t.Errorf("ResourceError = %+v, exit %d; want limit %d, one kill, exit 137", re, res.ExitCode, limit)
	}
	t.Logf("reported: %v", err)
	// The sandbox survives its command's death; a later failure is not
	// blamed on the old kill.
	out, err := sb.Exec(ctx, []string{"sh", "-c", "echo ok; kill -9 $$"})
	if err != nil || string(out.Stdout) != "ok\n" || out.ExitCode != 137 {
		t.Errorf("after the OOM kill: %q exit %d err %v; want ok, 137, no error", out.Stdout, out.ExitCode, err)
	}
}

func (s *suite) forkBomb(t *testing.T) {
	const ask = 256
	for _, tc := range []struct {
		name string
		cmd  string
	}{
		// The first process waits: the bomb runs into the timeout.
		{"waiting", "b(){ b|b& }; b; sleep 600"},
		// The first process returns at once and leaves the bomb behind;
		// the next command that cannot fork reports the limit. Such a
		// bomb can also die out by itself once its forks fail (on Podman
		// it does within a second): then no command of ours ran into the
		// limit, and there is nothing to report but the counters.
		{"detached", "b(){ b|b& }; b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Half a CPU: the bomb must not starve the engine's execs of
			// the whole (2-core) machine.
			sb := s.start(t, sandboxagent.SandboxOptions{PidsLimit: ask, CPUs: 0.5})
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
			defer cancel()
			limit := s.enforcedPids(t, ctx, sb, ask)
			res, err := sb.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", tc.cmd}, Timeout: 5 * time.Second})
			for i := 0; err == nil && i < 10; i++ {
				// The bomb's first process exited early; it is noticed by
				// the next command that needs to fork.
				time.Sleep(time.Second)
				res, err = sb.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", "for i in 1 2 3 4 5 6 7 8; do /bin/true; done"}, Timeout: 5 * time.Second})
			}
			var re *sandboxagent.ResourceError
			switch {
			case err == nil && tc.name == "detached":
				// Died out before any probe met it: the counters must show
				// the refused forks.
				ev, cerr := sb.ResourceEvents(ctx)
				if cerr != nil || ev.PidsLimit <= 0 {
					t.Fatalf("no probe met the bomb, and the counters show no refused fork: %+v %v", ev, cerr)
				}
				t.Logf("the bomb died out by itself after %d refused forks; nothing to report", ev.PidsLimit)
			case !errors.Is(err, sandboxagent.ErrPidsLimit) || !errors.As(err, &re):
				t.Fatalf("want a pids ResourceError, got %v (exit %d)", err, res.ExitCode)
			case re.Limit != limit || re.Events <= 0:
				t.Errorf("ResourceError = %+v, want limit %d and refused forks", re, limit)
			default:
				t.Logf("reported: %v", err)
			}
			// The bomb is gone, the keepalive survived it, and the sandbox
			// is usable again. The bomb's processes die on their own time
			// after the kill, and the engine may refuse an exec until
			// they have: wait for that, to a deadline. Left are init, the
			// keepalive and the shell counting (builtins only).
			var n int
			if !poll(30*time.Second, func() bool { n, err = pidsCurrent(ctx, sb); return err == nil && n <= 3 }) {
				t.Errorf("30 s after the bomb was reported: %d processes in the sandbox (%v); pid ppid pgrp sid state comm:\n%s", n, err, procLines(sandboxProcs(t, sb)))
			}
			out, err := sb.Exec(ctx, []string{"sh", "-c", "echo ok | cat"})
			if err != nil || string(out.Stdout) != "ok\n" {
				t.Errorf("sandbox after the bomb: %q %v", out.Stdout, err)
			}
		})
	}
}

// pidsCurrent counts the processes in the sandbox's pids cgroup, the
// measuring shell included. It reads with builtins: while a killed bomb's
// processes are still being torn down a fork may fail, and that is an
// error to retry, not a count.
func pidsCurrent(ctx context.Context, sb *sandboxagent.Sandbox) (int, error) {
	res, err := sb.Exec(ctx, []string{"sh", "-c", `for f in /sys/fs/cgroup/pids.current /sys/fs/cgroup/pids/pids.current; do [ -r "$f" ] && read -r n < "$f" && echo "$n"; done`})
	if err != nil {
		return -1, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		return -1, fmt.Errorf("pids.current: %q (exit %d, stderr %q)", res.Stdout, res.ExitCode, res.Stderr)
	}
	return n, nil
}
