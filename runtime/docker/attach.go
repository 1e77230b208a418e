package docker

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// Attach streams the main process's stdout and stderr of the created
// container id to the writers and returns wait, which gives the process's
// exit code once it exited and its output ended (sandboxagent.RunOnce).
// It attaches and registers the wait before the caller's Start, as
// `docker run` does, so no output and no exit is missed. When ctx is done
// wait returns ctx.Err() (the container keeps running: kill it).
func (r *Runtime) Attach(ctx context.Context, id string, stdout, stderr io.Writer) (wait func() (int, error), err error) {
	att, err := r.cli.ContainerAttach(ctx, id, client.ContainerAttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, classify("attach container", err, sandboxagent.ErrContainerNotFound)
	}
	w := r.cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	copied := make(chan error, 1)
	go func() {
		// Demultiplexed by our own choice (no TTY), as Exec's stream.
		_, err := stdcopy.StdCopy(orDiscard(stdout), orDiscard(stderr), att.Reader)
		copied <- err
	}()
	stop := context.AfterFunc(ctx, att.Close) // a hijacked stream ignores ctx
	return func() (int, error) {
		defer stop()
		defer att.Close()
		var code int
		select {
		case res := <-w.Result:
			if res.Error != nil && res.Error.Message != "" {
				return -1, fmt.Errorf("wait for container: %s", res.Error.Message)
			}
			code = int(res.StatusCode)
		case err := <-w.Error:
			if ctx.Err() != nil {
				return -1, ctx.Err()
			}
			return -1, classify("wait for container", err, sandboxagent.ErrContainerNotFound)
		}
		// The stream ends once the process and every holder of its pipes
		// are gone, which the exit implies (the pid namespace dies with
		// its init).
		select {
		case err := <-copied:
			if err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil {
				return -1, fmt.Errorf("container output: %w", err)
			}
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			return -1, ctx.Err()
		}
		return code, nil
	}, nil
}

// RecordsOOMKills says whether the engine records an OOM kill of any of a
// container's processes in its state (sandboxagent.RunOnce reads it after
// the exit): Docker does; Podman 4 does not (4.3.1 on cgroup v1 reports
// OOMKilled false for a process the OOM killer took). It asks the engine
// once if no answer told it yet (the client's version negotiation ping).
func (r *Runtime) RecordsOOMKills(ctx context.Context) bool {
	if !r.seen.Load() {
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
