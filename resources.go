package sandboxagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sandbox-agent/sandbox-agent/internal/guest"
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
	code, err := s.rt.Exec(ctx, s.id, RuntimeExec{Cmd: []string{"/bin/sh", "-c", guest.Counters}, Stdout: &out, Stderr: &out})
	if err != nil {
		return ResourceEvents{}, fmt.Errorf("read resource counters: %w", err)
	}
	if code != 0 {
		return ResourceEvents{}, fmt.Errorf("read resource counters: exit %d: %s", code, bytes.TrimSpace(out.Bytes()))
	}
	c := guest.ParseCounters(out.Bytes())
	return ResourceEvents{OOMKills: c.OOMKills, PidsLimit: c.PidsLimit}, nil
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

// diskFull are what a write at the disk limit prints: ENOSPC (an
// overlay's quota, a full filesystem), EDQUOT (btrfs quota groups).
var diskFull = [][]byte{[]byte("No space left on device"), []byte("Disk quota exceeded")}

// diskUsage is a Runtime that can measure a container's disk use as its
// limit counts it (Docker: the container's size with its image's).
type diskUsage interface {
	DiskUsage(ctx context.Context, id string) (int64, error)
}

// diskMeasureEvery bounds how often a sandbox's words make the engine
// measure its disk (a walk of its layer): a sandbox printing "No space
// left on device" in a loop must not keep the engine busy.
const diskMeasureEvery = 30 * time.Second

// checkDisk turns a failed command that says its write failed for space
// into a ResourceError (ErrDiskLimit) when the sandbox has a disk limit
// and the engine confirms the sandbox is at it (90 %): the words are the
// sandbox's, the measure is the engine's (at most one per
// diskMeasureEvery; a later failure within it reuses it). Without a
// measure the words are not believed.
func (s *Sandbox) checkDisk(ctx context.Context, cmd string, res ExecResult) error {
	if s.diskBytes <= 0 || res.ExitCode == 0 {
		return nil
	}
	said := false
	for _, m := range diskFull {
		said = said || bytes.Contains(res.Stderr, m) || bytes.Contains(res.Stdout, m)
	}
	du, ok := s.rt.(diskUsage)
	if !said || !ok {
		return nil
	}
	s.diskMu.Lock()
	defer s.diskMu.Unlock()
	if time.Since(s.diskMeasured) >= diskMeasureEvery {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		used, err := du.DiskUsage(ctx, s.id)
		if err != nil {
			return nil
		}
		s.diskUsed, s.diskMeasured = used, time.Now()
	}
	if s.diskUsed*10 < s.diskBytes*9 {
		return nil
	}
	return &ResourceError{Resource: resourceDisk, Limit: s.diskBytes, Cmd: cmd}
}

// checkLimits compares the counters with those last seen and turns new
// events into a ResourceError (memory first: an OOM kill also explains a
// signal exit). Counting is per sandbox: with concurrent commands an event
// is blamed on the first one to look.
//
// When the counters cannot be read because the container is gone, the
// error wraps ErrContainerNotFound (the command died with its sandbox), or
// ErrEngineUnavailable when the engine itself went away.
//
// killBomb says whether a tree holding the pids is killed (false: the
// caller's attempt just failed, another would only take minutes more).
func (s *Sandbox) checkLimits(cmd, user string, killBomb bool) error {
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
		return &ResourceError{Resource: resourceMemory, Limit: s.memoryBytes, Events: oom, Cmd: cmd}
	case pids > 0:
		// The tree holding the pids (a fork bomb, perhaps started by an
		// earlier command whose first process exited) must not keep them.
		if killBomb {
			_, _ = s.killBomb(user)
		}
		return &ResourceError{Resource: resourcePids, Limit: s.pidsLimit, Events: pids, Cmd: cmd}
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

// killBomb kills the process group holding the most processes (see
// guest.KillBomb).
func (s *Sandbox) killBomb(user string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	exec := func(cmd []string, stdout, stderr io.Writer) (int, error) {
		return s.rt.Exec(ctx, s.id, RuntimeExec{Cmd: cmd, User: user, Stdout: stdout, Stderr: stderr})
	}
	gone := func(err error) bool {
		return errors.Is(err, ErrContainerNotFound) || errors.Is(err, ErrEngineUnavailable)
	}
	// Whether pid 1 is an init with the keepalive behind it; when
	// Inspect cannot tell, the keepalive is spared all the same.
	behindInit := true
	if st, err := s.rt.Inspect(ctx, s.id); err == nil {
		behindInit = st.Init
	}
	return guest.KillBomb(ctx, guest.Retrying(ctx, exec, gone), s.pidsLimit, behindInit)
}
