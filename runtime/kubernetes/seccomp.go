package kubernetes

import (
	"regexp"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-agent/sandbox-agent/runtime/kubernetes/nodeseccomp"
)

// LocalhostSeccompPath is where, under a node's kubelet seccomp directory
// (<kubelet root>/seccomp), the node holds profile for
// Options.SeccompLocalhost: sandbox-agent/<hex of seccomp.Digest>.json.
// The name carries the content, so a node holding another version's
// profile does not pass for this one, and Inspect reads the digest back
// from the pod. `sandbox-agent seccomp install` writes the file.
func LocalhostSeccompPath(profile []byte) string { return nodeseccomp.Path(profile) }

// LocalhostSeccompFile is the file's content: the compacted profile, so
// that its SHA-256 is the hex in LocalhostSeccompPath.
func LocalhostSeccompFile(profile []byte) ([]byte, error) { return nodeseccomp.File(profile) }

var localhostName = regexp.MustCompile(`^sandbox-agent/([0-9a-f]{64})\.json$`)

// seccompOf is what Inspect reports for a pod's profile: the digest its
// LocalhostSeccompPath names (this version's profile or another's), ""
// for the node's RuntimeDefault (or none), else "localhost/PATH", which
// matches no digest.
func seccompOf(p *corev1.SeccompProfile) string {
	if p == nil || p.Type != corev1.SeccompProfileTypeLocalhost || p.LocalhostProfile == nil {
		return ""
	}
	if m := localhostName.FindStringSubmatch(*p.LocalhostProfile); m != nil {
		return "sha256:" + m[1]
	}
	return "localhost/" + *p.LocalhostProfile
}
