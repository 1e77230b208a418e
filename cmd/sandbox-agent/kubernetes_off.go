//go:build !kubernetes

package main

import (
	"context"
	"fmt"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
	"github.com/sandbox-agent/sandbox-agent/runtime/execlimit"
)

// kubernetesBuilt: this build has no Kubernetes runtime (kubernetes.go
// has it, under the build tag kubernetes).
const kubernetesBuilt = false

// errNoKubernetes is runtime kubernetes asked of a build without it.
var errNoKubernetes = fmt.Errorf("%w: runtime kubernetes: this sandbox-agent is built without the Kubernetes runtime: use the release's sandbox-agent-kubernetes binary, or go install -tags kubernetes", sandboxagent.ErrEngineUnavailable)

func connectKubernetes(context.Context, settings, catalog.Policy, *execlimit.Queue) (*engine, error) {
	return nil, errNoKubernetes
}
