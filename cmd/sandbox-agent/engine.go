package main

import (
	"context"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/images"
	"github.com/sandbox-agent/sandbox-agent/runtime/docker"
)

// engine is the container engine the commands use, seen through the
// library's ports: the Runtime sandboxes run on and the Engine images are
// built with. This is the one place that names a concrete engine.
type engine struct {
	rt     sandboxagent.Runtime
	images images.PullEngine
	close  func() error
}

// connect opens the Docker Engine API (Podman's compatible API too) at
// host ("" = DOCKER_HOST or the default socket).
func connect(ctx context.Context, host string) (*engine, error) {
	rt, err := docker.New(ctx, docker.Options{Host: host})
	if err != nil {
		return nil, err
	}
	return &engine{rt: rt, images: images.NewEngine(rt.Client()), close: rt.Close}, nil
}
