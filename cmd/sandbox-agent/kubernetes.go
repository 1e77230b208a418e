//go:build kubernetes

package main

import (
	"context"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/sandbox-agent/sandbox-agent/images/catalog"
	"github.com/sandbox-agent/sandbox-agent/runtime/execlimit"
	"github.com/sandbox-agent/sandbox-agent/runtime/kubernetes"
)

// The Kubernetes runtime links client-go: 40 MB more binary and 20 ms more
// at every start, so only a build with the tag kubernetes carries it
// (docs/kubernetes.md).
const kubernetesBuilt = true

// connectKubernetes opens the cluster the settings name (kubeconfig, else
// in-cluster).
func connectKubernetes(ctx context.Context, s settings, policy catalog.Policy, execs *execlimit.Queue) (*engine, error) {
	var gate kubernetes.ExecGate // a nil *Queue is no gate
	if execs != nil {
		gate = execs
	}
	// client-go logs a hung-up exec stream (an exec detached on
	// timeout) through klog to stderr; the command's errors say
	// what matters.
	quietKlog.Do(func() { klog.SetLogger(logr.Discard()) }) // klog's setter is not safe once client-go runs
	pull := corev1.PullIfNotPresent
	if policy == catalog.PolicyNever {
		pull = corev1.PullNever
	}
	rt, err := kubernetes.New(ctx, kubernetes.Options{Kubeconfig: s.kubeconfig, Namespace: s.namespace, PullPolicy: pull, PodPidsLimit: s.podPidsLimit, SeccompLocalhost: s.seccompLocalhost, ExecGate: gate})
	if err != nil {
		return nil, err
	}
	return &engine{rt: rt, close: func() error { return nil }}, nil
}

var quietKlog sync.Once
