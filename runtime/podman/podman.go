// Package podman connects a sandboxagent.Runtime to Podman's
// Docker-compatible API service (podman system service). It only finds the
// socket: the implementation is runtime/docker, which recognises Podman
// from its responses and handles its differences.
//
// Start the service with, rootful:
//
//	podman system service --time=0 unix:///run/podman/podman.sock
//
// or rootless (as the user; systemd users: systemctl --user start podman.socket):
//
//	podman system service --time=0 unix://$XDG_RUNTIME_DIR/podman/podman.sock
package podman

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/runtime/docker"
)

// RootfulSocket is where a rootful Podman service listens by default.
const RootfulSocket = "/run/podman/podman.sock"

// Options configures the connection.
type Options struct {
	// Host is the service's address, e.g. unix:///run/podman/podman.sock;
	// empty: see Host.
	Host string
	// ExecGate admits execs as docker.Options.ExecGate does.
	ExecGate docker.ExecGate
}

// Host finds the Podman service: CONTAINER_HOST (Podman's own variable)
// when it is a unix:// or tcp:// address, else the first socket that
// exists of the rootless one ($XDG_RUNTIME_DIR/podman/podman.sock) when
// not running as root, and the rootful one (/run/podman/podman.sock).
func Host() (string, error) {
	return findHost(os.Getenv("CONTAINER_HOST"), os.Getuid(), os.Getenv("XDG_RUNTIME_DIR"), RootfulSocket)
}

func findHost(containerHost string, uid int, xdg, rootful string) (string, error) {
	if strings.HasPrefix(containerHost, "unix://") || strings.HasPrefix(containerHost, "tcp://") {
		return containerHost, nil
	}
	var tried []string
	for _, s := range candidates(uid, xdg, rootful) {
		if fi, err := os.Stat(s); err == nil && fi.Mode().Type() == os.ModeSocket {
			return "unix://" + s, nil
		}
		tried = append(tried, s)
	}
	return "", fmt.Errorf("%w: no Podman socket at %s (start one: podman system service --time=0)",
		sandboxagent.ErrEngineUnavailable, strings.Join(tried, " or "))
}

// candidates lists the sockets to try, most specific first.
func candidates(uid int, xdg, rootful string) []string {
	var out []string
	if uid != 0 {
		if xdg == "" {
			xdg = filepath.Join("/run/user", fmt.Sprint(uid))
		}
		out = append(out, filepath.Join(xdg, "podman", "podman.sock"))
	}
	return append(out, rootful)
}

// New returns a Runtime talking to Podman. Like docker.New it connects
// lazily; Info then reports Name "podman" (and Rootless).
func New(ctx context.Context, opts Options) (*docker.Runtime, error) {
	host := opts.Host
	if host == "" {
		h, err := Host()
		if err != nil {
			return nil, err
		}
		host = h
	}
	return docker.New(ctx, docker.Options{Host: host, ExecGate: opts.ExecGate})
}
