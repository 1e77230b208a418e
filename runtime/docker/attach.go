package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// Attach streams the main process's stdout and stderr of the created
// container id to the writers and returns wait, which gives the process's
// exit code, and whether the OOM killer struck in the container, once it
// exited and its output ended (sandboxagent.RunOnce). Both come from the
// engine's events (oom, then die, in the engine's order), subscribed with
// the attach before the caller's Start, as `docker run` attaches and
// waits: nothing is missed, and an auto-removed container needs no
// inspect after its exit. When ctx is done wait returns ctx.Err() (the
// container keeps running: kill it); wait returns only once the output
// copy stopped writing to the writers.
func (r *Runtime) Attach(ctx context.Context, id string, stdout, stderr io.Writer) (wait func() (code int, oomKilled bool, err error), err error) {
	evCtx, stopEvents := context.WithCancel(ctx)
	ev := r.cli.Events(evCtx, client.EventsListOptions{Filters: make(client.Filters).
		Add("type", string(events.ContainerEventType)).
		Add("container", id).
		Add("event", string(events.ActionOOM), string(events.ActionDie))})
	att, err := r.cli.ContainerAttach(ctx, id, client.ContainerAttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		stopEvents()
		return nil, classify("attach container", err, sandboxagent.ErrContainerNotFound)
	}
	copied := make(chan error, 1)
	go func() {
		// Demultiplexed by our own choice (no TTY), as Exec's stream.
		_, err := stdcopy.StdCopy(orDiscard(stdout), orDiscard(stderr), att.Reader)
		copied <- err
	}()
	stop := context.AfterFunc(ctx, att.Close) // a hijacked stream ignores ctx
	return func() (int, bool, error) {
		defer stop()
		defer stopEvents()
		code, oom, werr := exitOf(ctx, ev)
		if werr != nil {
			att.Close()
		}
		// The stream ends once the process and every holder of its pipes
		// are gone, which the exit implies (the pid namespace dies with
		// its init); a stream still open after the exit is hung up.
		var cerr error
		select {
		case cerr = <-copied:
		case <-time.After(5 * time.Second):
			att.Close()
			cerr = <-copied
		}
		att.Close()
		switch {
		case werr != nil:
			return -1, false, werr
		case ctx.Err() != nil:
			return -1, false, ctx.Err()
		case cerr != nil && !errors.Is(cerr, io.EOF):
			return -1, false, fmt.Errorf("container output: %w", cerr)
		}
		return code, oom, nil
	}, nil
}

// exitOf reads the container's events until its die: the exit code it
// carries, and whether an oom came before it.
func exitOf(ctx context.Context, ev client.EventsResult) (code int, oom bool, err error) {
	for {
		select {
		case m := <-ev.Messages:
			switch m.Action {
			case events.ActionOOM:
				oom = true
			case events.ActionDie:
				code, err := strconv.Atoi(m.Actor.Attributes["exitCode"])
				if err != nil {
					return -1, false, fmt.Errorf("wait for container: its die event has no exit code (%q)", m.Actor.Attributes["exitCode"])
				}
				return code, oom, nil
			}
		case err := <-ev.Err:
			if ctx.Err() != nil {
				return -1, false, ctx.Err()
			}
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return -1, false, classify("wait for container (engine events)", err, sandboxagent.ErrContainerNotFound)
		}
	}
}

// RecordsOOMKills says whether the engine tells an OOM kill of any of a
// container's processes (its oom event; sandboxagent.RunOnce): Docker
// does; Podman 4 records none (4.3.1 on cgroup v1 reports OOMKilled false
// for a process the OOM killer took). It asks the engine once if no
// answer told it yet (the client's version negotiation ping).
func (r *Runtime) RecordsOOMKills(ctx context.Context) bool {
	if !r.seen.Load() {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := r.cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
			return false
		}
	}
	_, pod := r.podman()
	return !pod
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
