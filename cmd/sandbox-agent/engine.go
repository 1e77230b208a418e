package main

import (
	"context"
	"fmt"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/images"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
	"github.com/sandbox-agent/sandbox-agent/runtime/docker"
	"github.com/sandbox-agent/sandbox-agent/runtime/execlimit"
	"github.com/sandbox-agent/sandbox-agent/runtime/podman"
)

// engine is the container engine the commands use, seen through the
// library's ports: the Runtime sandboxes run on and the Engine images are
// built with (nil on Kubernetes: the cluster pulls images itself, by
// imagePullPolicy). This is the one place that names a concrete engine.
type engine struct {
	rt     sandboxagent.Runtime
	images images.PullEngine
	close  func() error
	// version, when set, names the engine from its ping alone (the
	// version command); nil: rt.Info.
	version func(ctx context.Context) (sandboxagent.EngineInfo, error)
}

// connect opens the runtime the settings name: the Docker Engine API at
// dockerHost ("" = DOCKER_HOST or the default socket), Podman's
// compatible API (its socket found as runtime/podman does), or a
// Kubernetes cluster (kubeconfig, else in-cluster) in a build with the
// Kubernetes runtime (kubernetes.go).
func connect(ctx context.Context, s settings, policy catalog.Policy) (*engine, error) {
	// One exec queue per engine (max_concurrent_execs; 0: none): every
	// sandbox of this process shares it.
	var execs *execlimit.Queue
	if s.maxConcurrentExecs > 0 {
		execs = execlimit.New(s.maxConcurrentExecs)
	}
	switch s.runtime {
	case "kubernetes":
		return connectKubernetes(ctx, s, policy, execs)
	case "podman":
		host := s.dockerHost
		if host == "" {
			h, err := podman.Host()
			if err != nil {
				return nil, err
			}
			host = h
		}
		return dockerEngine(ctx, host, execs)
	}
	return dockerEngine(ctx, s.dockerHost, execs)
}

func dockerEngine(ctx context.Context, host string, execs *execlimit.Queue) (*engine, error) {
	var gate docker.ExecGate // a nil *Queue is no gate
	if execs != nil {
		gate = execs
	}
	rt, err := docker.New(ctx, docker.Options{Host: host, ExecGate: gate})
	if err != nil {
		return nil, err
	}
	cli := rt.Client()
	return &engine{rt: rt, images: images.NewEngine(cli), close: rt.Close,
		version: func(ctx context.Context) (sandboxagent.EngineInfo, error) { return pingVersion(ctx, cli) }}, nil
}

// errNoImageEngine: the images commands build and push with a Docker (or
// Podman) engine, which the kubernetes runtime does not have.
var errNoImageEngine = fmt.Errorf("%w: runtime kubernetes has no image engine: build and push images with a Docker engine (runtime docker), the cluster pulls them", sandboxagent.ErrUnsupportedByRuntime)
