package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// podPidsLimit is the pids limit the node's kubelet puts on every pod
// (Kubernetes has no per-pod setting): read from the kubelet's live
// configuration through the API server (nodes/proxy), else
// Options.PodPidsLimit; 0 when neither tells.
func (r *Runtime) podPidsLimit(ctx context.Context, node string) int64 {
	if node == "" {
		return 0
	}
	r.pidsMu.Lock()
	defer r.pidsMu.Unlock()
	if n, ok := r.pids[node]; ok {
		return n
	}
	n, err := r.kubeletPidsLimit(ctx, node)
	if err != nil {
		if !apierrors.IsForbidden(err) && !apierrors.IsNotFound(err) {
			return r.opts.PodPidsLimit // a passing failure: do not cache it
		}
		n = r.opts.PodPidsLimit
	}
	r.pids[node] = n
	return n
}

func (r *Runtime) kubeletPidsLimit(ctx context.Context, node string) (int64, error) {
	raw, err := r.cs.CoreV1().RESTClient().Get().Resource("nodes").Name(node).SubResource("proxy").Suffix("configz").DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	var cz struct {
		KubeletConfig struct {
			PodPidsLimit *int64 `json:"podPidsLimit"`
		} `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(raw, &cz); err != nil {
		return 0, fmt.Errorf("kubelet configz of %s: %w", node, err)
	}
	if cz.KubeletConfig.PodPidsLimit == nil || *cz.KubeletConfig.PodPidsLimit < 0 {
		return 0, nil // unlimited
	}
	return *cz.KubeletConfig.PodPidsLimit, nil
}
