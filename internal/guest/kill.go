package guest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"time"
)

// Run runs one command as an exec of its own in the sandbox and returns
// its output and exit code.
type Run func(cmd ...string) (out string, code int, err error)

// Retrying is a Run over exec that tries again every 200 ms, until ctx
// ends, an exec that failed to start — at the pids limit the engine may
// fail to start one at all (runc's own processes need pids in the
// container's cgroup), which passes as a bomb's processes churn — unless
// final says the error is for good (the container or the engine gone).
func Retrying(ctx context.Context, exec func(cmd []string, stdout, stderr io.Writer) (int, error), final func(error) bool) Run {
	return func(cmd ...string) (string, int, error) {
		for {
			var out, errb bytes.Buffer
			code, err := exec(cmd, &out, &errb)
			if err == nil || ctx.Err() != nil || final(err) {
				return out.String(), code, err
			}
			if serr := sleep(ctx, 200*time.Millisecond); serr != nil {
				return "", -1, fmt.Errorf("%w (after: %w)", serr, err)
			}
		}
	}
}

// KillBomb kills the process group owning the most processes, without
// forking inside the sandbox (a fork bomb leaves no pid to fork with):
// each step is its own exec, which the engine attaches to the container
// even at its pids limit. Every exec runs as its own process group and a
// bomb's processes stay in it, so one kill(-pgid) takes all of them at
// once — listing pids would not: a bomb's processes live milliseconds.
// The container's own session (init, keepalive) is never chosen. It
// reports whether a group was killed. behindInit says pid 1 is an init
// with the keepalive behind it (the keepalive is spared either way).
func KillBomb(ctx context.Context, run Run, pidsLimit int64, behindInit bool) (bool, error) {
	var current, refused, killed int64 = -1, -1, -1
	// groups scans, after killing the group kill ("-PGID") when set: under
	// the bomb every exec takes seconds, and the scan that follows a kill
	// is one the kill needs anyway.
	groups := func(kill ...string) (map[int]int, error) {
		var out string
		for {
			o, code, err := run(append([]string{"/bin/sh", "-c", ProcessScan, "sandbox-agent-scan"}, kill...)...)
			if err != nil {
				return nil, err
			}
			// The scan prints "self" first; without it, and with exit
			// 126, the engine could not start the exec at all (Docker's
			// runc: "error executing setns process", when the bomb holds
			// the pid its setns child needs). That is no empty sandbox:
			// try again until one starts.
			if out = o; Value(out, "self") >= 0 || code != 126 {
				break
			}
			if err := sleep(ctx, 200*time.Millisecond); err != nil {
				return nil, fmt.Errorf("process scan never started (last exit %d): %w", code, err)
			}
		}
		current, refused, killed = Value(out, "current"), Value(out, "refused"), Value(out, "kill")
		g := Groups(out)
		// The scanning shell leads its exec's own group: when the bomb's
		// processes die faster than a throttled scan reads them, it may
		// be all the scan sees, and it is never the bomb.
		delete(g, int(Value(out, "self")))
		if behindInit {
			// The keepalive, session and group leader, may share no
			// session with init (Kubernetes): killing it ends the
			// sandbox. (Without an init it is pid 1, left out above.)
			delete(g, FirstSession(out))
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
		low := current >= 0 && current*2 < pidsLimit && refused <= first
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
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return false, err
		}
		if g, err = groups(); err != nil {
			return false, err
		}
	}
	arg := "-" + strconv.Itoa(pgid)
	for i := range 10 {
		if i > 0 {
			// Killed processes linger until init reaps them.
			if err := sleep(ctx, 100*time.Millisecond); err != nil {
				return true, err
			}
		}
		if i > 0 && killed != 0 {
			// The shell's builtin kill did not signal the group: procps
			// kill, else bash's builtin. (When it did, the group is still
			// dying, or a straggler forked meanwhile: it goes again.)
			if _, code, err := run("kill", "-s", "KILL", "--", arg); err != nil || code >= 126 {
				_, _, _ = run("bash", "-c", KillGroup, "sandbox-agent-kill", arg)
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
		if g[pgid] == 0 && (current*2 < pidsLimit || refused <= before) {
			return true, nil
		}
	}
	return true, fmt.Errorf("process group %d survived 10 kills", pgid)
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
