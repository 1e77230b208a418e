package runtimetest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// keepalive: an idle sandbox stops by itself after its keepalive (and is
// removed, with AutoRemove; without, it stays stopped until Close); a
// running command keeps it alive; its watchdog leaves no zombie.
func (s *suite) keepalive(t *testing.T) {
	t.Run("idle self-destructs", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t, 3*time.Minute)
		run := randHex(6)
		sb := s.start(t, sandboxagent.SandboxOptions{Keepalive: 2 * time.Second, Labels: map[string]string{runLabel: run}})
		var st sandboxagent.ContainerState
		var err error
		stopped := poll(time.Minute, func() bool {
			st, err = sb.Inspect(ctx)
			if s.features.AutoRemove {
				return errors.Is(err, sandboxagent.ErrContainerNotFound)
			}
			return errors.Is(err, sandboxagent.ErrContainerNotFound) || (err == nil && !st.Running)
		})
		if !stopped {
			t.Fatalf("idle sandbox with a 2 s keepalive still there a minute later: %+v %v (AutoRemove %v)", st, err, s.features.AutoRemove)
		}
		if !s.features.AutoRemove {
			// The documented downgrade: stopped, not gone, until Close.
			if err != nil || st.Status != sandboxagent.StatusExited {
				t.Errorf("without AutoRemove a self-destructed sandbox stays, stopped: %+v %v; want Status exited", st, err)
			}
			if list, err := s.Runtime.List(ctx, map[string]string{runLabel: run}); err != nil || len(list) != 1 || list[0].Running {
				t.Errorf("List of the stopped sandbox: %+v %v", list, err)
			}
		}
		if _, err := sb.Exec(ctx, []string{"true"}); !errors.Is(err, sandboxagent.ErrContainerNotFound) {
			t.Errorf("Exec in a self-destructed sandbox: %v, want ErrContainerNotFound", err)
		}
		if err := sb.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		s.waitRemoved(t, ctx, sb.ID(), run)
	})

	t.Run("a running command keeps it alive", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t, 3*time.Minute)
		sb := s.start(t, sandboxagent.SandboxOptions{Keepalive: 3 * time.Second})
		// Three keepalives long.
		res, err := sb.Exec(ctx, []string{"sleep", "9"})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("long command: %+v %v", res, err)
		}
		if st, err := sb.Inspect(ctx); err != nil || !st.Running {
			t.Fatalf("sandbox died while a command was running: %+v %v", st, err)
		}
		if _, err := sb.Exec(ctx, []string{"true"}); err != nil {
			t.Fatalf("exec after the long command: %v", err)
		}
	})

	// A zombie would count against the pids limit (and as activity) for
	// the sandbox's whole life. The watchdog's one fork (bash's process
	// substitution) happens at start, and bash does not reap it by itself
	// while it waits in read -t: left alone, it stays a zombie until at
	// least the first tick (5 s here). So zombies are looked for before
	// that tick, and again after it and a few execs.
	t.Run("no zombie", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t, 3*time.Minute)
		start := time.Now()
		sb := s.start(t, sandboxagent.SandboxOptions{Keepalive: 10 * time.Minute}) // a tick every 5 s
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
	})
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
	res, err := sb.Exec(ctxT(t, time.Minute), []string{"sh", "-c", `echo "self $$"; for p in /proc/[0-9]*/stat; do read -r l < "$p" && echo "$l"; done 2>/dev/null`})
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

func procLines(ps []sandboxProc) string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = "  " + p.String()
	}
	return strings.Join(lines, "\n")
}
