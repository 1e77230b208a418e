package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-agent/sandbox-agent/seccomp"
)

// LocalhostSeccompPath is where, under a node's kubelet seccomp directory
// (<kubelet root>/seccomp), the node holds profile for Options.SeccompLocalhost:
// sandbox-agent/<SHA-256 of the file's bytes>.json. The name carries the
// content, so a node holding another version's profile fails the pod's
// start instead of passing for this one:
//
//	install -D -m 0644 seccomp/sandbox-agent.json \
//	  "/var/lib/kubelet/seccomp/sandbox-agent/$(sha256sum < seccomp/sandbox-agent.json | cut -c1-64).json"
func LocalhostSeccompPath(profile []byte) string {
	sum := sha256.Sum256(profile)
	return "sandbox-agent/" + hex.EncodeToString(sum[:]) + ".json"
}

// seccompOf is what Inspect reports for a pod's profile: sandbox-agent's
// digest (seccomp.Digest) when the pod names this version's file, ""
// for the node's RuntimeDefault (or none), else the Localhost path, which
// matches no digest.
func seccompOf(p *corev1.SeccompProfile) string {
	if p == nil || p.Type != corev1.SeccompProfileTypeLocalhost || p.LocalhostProfile == nil {
		return ""
	}
	if ours := seccomp.Profile(); *p.LocalhostProfile == LocalhostSeccompPath(ours) {
		return seccomp.Digest(ours)
	}
	return "localhost/" + *p.LocalhostProfile
}
