package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/images"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
	"github.com/sandbox-agent/sandbox-agent/runtime/docker"
	"github.com/sandbox-agent/sandbox-agent/runtime/execlimit"
	"github.com/sandbox-agent/sandbox-agent/runtime/kubernetes"
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
}

// connect opens the runtime the settings name: the Docker Engine API at
// dockerHost ("" = DOCKER_HOST or the default socket), Podman's
// compatible API (its socket found as runtime/podman does), or a
// Kubernetes cluster (kubeconfig, else in-cluster).
func connect(ctx context.Context, s settings, policy catalog.Policy) (*engine, error) {
	// One exec queue per engine: every sandbox of this process shares it.
	execs := execlimit.New(s.maxConcurrentExecs)
	switch s.runtime {
	case "kubernetes":
		// client-go logs a hung-up exec stream (an exec detached on
		// timeout) through klog to stderr; the command's errors say
		// what matters.
		quietKlog.Do(func() { klog.SetLogger(logr.Discard()) }) // klog's setter is not safe once client-go runs
		pull := corev1.PullIfNotPresent
		if policy == catalog.PolicyNever {
			pull = corev1.PullNever
		}
		rt, err := kubernetes.New(ctx, kubernetes.Options{Kubeconfig: s.kubeconfig, Namespace: s.namespace, PullPolicy: pull, PodPidsLimit: s.podPidsLimit, SeccompLocalhost: s.seccompLocalhost, ExecGate: execs})
		if err != nil {
			return nil, err
		}
		return &engine{rt: rt, close: func() error { return nil }}, nil
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

func dockerEngine(ctx context.Context, host string, execs docker.ExecGate) (*engine, error) {
	rt, err := docker.New(ctx, docker.Options{Host: host, ExecGate: execs})
	if err != nil {
		return nil, err
	}
	return &engine{rt: rt, images: images.NewEngine(rt.Client()), close: rt.Close}, nil
}

var quietKlog sync.Once

// errNoImageEngine: the images commands build and push with a Docker (or
// Podman) engine, which the kubernetes runtime does not have.
var errNoImageEngine = fmt.Errorf("%w: runtime kubernetes has no image engine: build and push images with a Docker engine (runtime docker), the cluster pulls them", sandboxagent.ErrUnsupportedByRuntime)
