// Package nodeseccomp names and encodes sandbox-agent's seccomp profile as
// a Kubernetes node's Localhost profile. It is apart from
// runtime/kubernetes so that `sandbox-agent seccomp install`, run on a
// node, does not link client-go (nor need a build with the Kubernetes
// runtime).
package nodeseccomp

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/sandbox-agent/sandbox-agent/seccomp"
)

// Path is where, under a node's kubelet seccomp directory
// (<kubelet root>/seccomp), the node holds profile:
// sandbox-agent/<hex of seccomp.Digest>.json. The name carries the
// content, so a node holding another version's profile does not pass for
// this one.
func Path(profile []byte) string {
	return "sandbox-agent/" + strings.TrimPrefix(seccomp.Digest(profile), "sha256:") + ".json"
}

// File is the file's content: the compacted profile, so that its SHA-256
// is the hex in Path.
func File(profile []byte) ([]byte, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, profile); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
