package sandboxagent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ResourceEvents are the sandbox's cgroup counters: how often the OOM
// killer struck and how many forks the pids limit refused since the
// sandbox started.
type ResourceEvents struct {
	OOMKills  int64
	PidsLimit int64 // refused forks
}

// ResourceEvents reads the sandbox's resource counters (one exec).
func (s *Sandbox) ResourceEvents(ctx context.Context) (ResourceEvents, error) {
	if s.isClosed() {
		return ResourceEvents{}, ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	code, err := s.rt.Exec(ctx, s.id, RuntimeExec{Cmd: []string{"/bin/sh", "-c", countersScript}, Stdout: &out, Stderr: &out})
	if err != nil {
		return ResourceEvents{}, fmt.Errorf("read resource counters: %w", err)
	}
	if code != 0 {
		return ResourceEvents{}, fmt.Errorf("read resource counters: exit %d: %s", code, bytes.TrimSpace(out.Bytes()))
	}
	return parseCounters(out.Bytes()), nil
}

func parseCounters(b []byte) ResourceEvents {
	var ev ResourceEvents
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			continue
		}
		switch k {
		case "oom":
			ev.OOMKills = n
		case "pids":
			ev.PidsLimit = n
		}
	}
	return ev
}

// suspectLimits says whether a finished command may have hit a limit and
// the counters are worth an exec: it was killed by a signal (the OOM
// killer sends SIGKILL), timed out, or complained of a failed fork.
func suspectLimits(res ExecResult) bool {
	if res.TimedOut || res.ExitCode >= 128 {
		return true
	}
	for _, p := range []string{"fork", "Resource temporarily unavailable", "EAGAIN"} {
		if bytes.Contains(res.Stderr, []byte(p)) {
			return true
		}
	}
	return false
}

// checkLimits compares the counters with those last seen and turns new
// events into a ResourceError (memory first: an OOM kill also explains a
// signal exit). Counting is per sandbox: with concurrent commands an event
// is blamed on the first one to look.
//
// When the counters cannot be read because the container is gone, the
// error wraps ErrContainerNotFound (the command died with its sandbox), or
// ErrEngineUnavailable when the engine itself went away.
func (s *Sandbox) checkLimits(cmd, user string) error {
	// Under a fork bomb one exec may take many seconds, or fail to start
	// at all while the container runs: that is not "nothing happened".
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var ev ResourceEvents
	for {
		var err error
		if ev, err = s.ResourceEvents(ctx); err == nil {
			break
		}
		if derr := s.died(ctx, cmd); derr != nil || ctx.Err() != nil {
			return derr
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.limitsMu.Lock()
	oom := ev.OOMKills - s.seen.OOMKills
	pids := ev.PidsLimit - s.seen.PidsLimit
	s.seen = ev
	s.limitsMu.Unlock()
	switch {
	case oom > 0:
		return &ResourceError{Resource: ResourceMemory, Limit: s.memoryBytes, Events: oom, Cmd: cmd}
	case pids > 0:
		// The tree holding the pids (a fork bomb, perhaps started by an
		// earlier command whose first process exited) must not keep them.
		_, _ = s.killBomb(user)
		return &ResourceError{Resource: ResourcePids, Limit: s.pidsLimit, Events: pids, Cmd: cmd}
	}
	return nil
}

// died explains a failed counter read: an error wrapping
// ErrContainerNotFound when the container is gone or stopped, or
// ErrEngineUnavailable when the engine cannot be reached; nil when the
// container runs. The engine may still call a just-killed container
// running for a moment, so it looks again for up to two seconds.
func (s *Sandbox) died(ctx context.Context, cmd string) error {
	for range 10 {
		st, err := s.rt.Inspect(ctx, s.id)
		switch {
		case errors.Is(err, ErrContainerNotFound):
			return fmt.Errorf("%s: the sandbox's container died while the command ran: %w", cmd, err)
		case err == nil && !st.Running:
			how := fmt.Sprintf("status %s, exit code %d", st.Status, st.ExitCode)
			if st.OOMKilled {
				how += ", killed for memory"
			}
			if st.Reason != "" {
				how += ", " + st.Reason
			}
			return fmt.Errorf("%s: the sandbox's container died while the command ran (%s): %w", cmd, how, ErrContainerNotFound)
		case errors.Is(err, ErrEngineUnavailable):
			return fmt.Errorf("%s: the container engine went away while the command ran: %w", cmd, err)
		case err != nil:
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

// killBomb kills the process group owning the most processes, without
// forking inside the sandbox (a fork bomb leaves no pid to fork with):
// each step is its own exec, which the engine attaches to the container
// even at its pids limit. Every exec runs as its own process group and a
// bomb's processes stay in it, so one kill(-pgid) takes all of them at
// once — listing pids would not: a bomb's processes live milliseconds.
// The container's own session (init, keepalive) is never chosen. It
// reports whether a group was killed.
func (s *Sandbox) killBomb(user string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(cmd ...string) (string, int, error) {
		for {
			var out, errb bytes.Buffer
			code, err := s.rt.Exec(ctx, s.id, RuntimeExec{Cmd: cmd, User: user, Stdout: &out, Stderr: &errb})
			if err == nil || ctx.Err() != nil || errors.Is(err, ErrContainerNotFound) || errors.Is(err, ErrEngineUnavailable) {
				return out.String(), code, err
			}
			// At the limit the engine may fail to start an exec at all
			// (runc's own processes need pids in the container's
			// cgroup): that passes as the bomb's processes churn.
			select {
			case <-ctx.Done():
				return "", -1, fmt.Errorf("%w (after: %w)", ctx.Err(), err)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	// Whether pid 1 is an init with the keepalive behind it; when
	// Inspect cannot tell, the keepalive is spared all the same.
	behindInit := true
	if st, err := s.rt.Inspect(ctx, s.id); err == nil {
		behindInit = st.Init
	}
	var current, refused, killed int64 = -1, -1, -1
	// groups scans, after killing the group kill ("-PGID") when set: under
	// the bomb every exec takes seconds, and the scan that follows a kill
	// is one the kill needs anyway.
	groups := func(kill ...string) (map[int]int, error) {
		out, _, err := run(append([]string{"/bin/sh", "-c", scanScript, "sandbox-agent-scan"}, kill...)...)
		if err != nil {
			return nil, err
		}
		current, refused, killed = parseValue(out, "current"), parseValue(out, "refused"), parseValue(out, "kill")
		g := parseGroups(out)
		// The scanning shell leads its exec's own group: when the bomb's
		// processes die faster than a throttled scan reads them, it may
		// be all the scan sees, and it is never the bomb.
		delete(g, int(parseValue(out, "self")))
		if behindInit {
			// The keepalive, session and group leader, may share no
			// session with init (Kubernetes): killing it ends the
			// sandbox. (Without an init it is pid 1, left out above.)
			delete(g, firstSession(out))
		}
		return g, nil
	}
	g, err := groups()
	if err != nil {
		return false, err
	}
	// Once the bomb is gone (its own exec's kill may have got it) the
	// largest group is an innocent command: kill only while the limit
	// is still (about) exhausted. A live bomb's count swings, though:
	// thinned by failed forks it fills the limit again within
	// milliseconds. So a low count is believed only when it stays low
	// for a second and no fork was refused meanwhile (a refused fork
	// means something is still running into the limit: the bomb). A
	// scan that saw no group of two or more (the bomb's processes live
	// milliseconds) is taken again too.
	pgid := 0
	for i, first := 0, refused; ; i++ {
		low := current >= 0 && current*2 < s.pidsLimit && refused <= first
		most := 0
		for id, n := range g {
			if n > most {
				pgid, most = id, n
			}
		}
		if !low && most >= 2 {
			break
		}
		if i == 5 {
			return false, nil
		}
		time.Sleep(200 * time.Millisecond)
		if g, err = groups(); err != nil {
			return false, err
		}
	}
	arg := "-" + strconv.Itoa(pgid)
	for i := range 10 {
		if i > 0 {
			// Killed processes linger until init reaps them.
			time.Sleep(100 * time.Millisecond)
		}
		if i > 0 && killed != 0 {
			// The shell's builtin kill did not signal the group: procps
			// kill, else bash's builtin. (When it did, the group is still
			// dying, or a straggler forked meanwhile: it goes again.)
			if _, code, err := run("kill", "-s", "KILL", "--", arg); err != nil || code >= 126 {
				_, _, _ = run("bash", "-c", killGroupScript, "sandbox-agent-kill", arg)
			}
		}
		before := refused
		g, err := groups(arg)
		if err != nil {
			return true, err
		}
		// Gone from a scan that may have missed it (see above) is
		// believed when the limit is free again or nothing ran into it
		// since the kill.
		if g[pgid] == 0 && (current*2 < s.pidsLimit || refused <= before) {
			return true, nil
		}
	}
	return true, fmt.Errorf("process group %d survived 10 kills", pgid)
}

// parseValue finds the "KEY N" line of scanScript's output ("current",
// "refused"); -1 when there is none.
func parseValue(out, key string) int64 {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
				return n
			}
		}
	}
	return -1
}

// parseGroups counts processes per process group in /proc/PID/stat
// lines, leaving out the container's main session (sid 0 or 1: init and
// the keepalive).
func parseGroups(out string) map[int]int {
	g := map[int]int{}
	for _, line := range strings.Split(out, "\n") {
		// "pid (comm) state ppid pgrp session ..."; comm may hold
		// spaces and parentheses: fields start after the last ')'.
		i := strings.LastIndexByte(line, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(line[i+1:])
		if len(f) < 4 {
			continue
		}
		pgrp, err1 := strconv.Atoi(f[2])
		sid, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil || pgrp <= 1 || sid <= 1 {
			continue
		}
		g[pgrp]++
	}
	return g
}

// firstSession is the session of the earliest started process but pid 1
// in /proc/PID/stat lines (-1 when none says when it started). Behind an
// init that is the keepalive, which started before any exec: under
// Kubernetes' pause process it leads a session (and group) of its own,
// not init's.
func firstSession(out string) int {
	sid, first := -1, uint64(0)
	for _, line := range strings.Split(out, "\n") {
		head, _, _ := strings.Cut(line, " (")
		i := strings.LastIndexByte(line, ')')
		pid, err := strconv.Atoi(head)
		if i < 0 || err != nil || pid <= 1 {
			continue
		}
		// starttime is field 22 of the line, the 20th after comm.
		f := strings.Fields(line[i+1:])
		if len(f) < 20 {
			continue
		}
		n, err1 := strconv.Atoi(f[3])
		st, err2 := strconv.ParseUint(f[19], 10, 64)
		if err1 == nil && err2 == nil && (sid < 0 || st < first) {
			sid, first = n, st
		}
	}
	return sid
}
