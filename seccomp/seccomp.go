// Package seccomp holds sandbox-agent's seccomp profile: the engine
// default of Moby's profiles module (the version in go.mod: newer than
// the profile built into older engines, Docker 20.10's among them),
// without the system calls an agent never needs (Denied). A denied call
// fails with EPERM, as every call outside the profile does.
//
// The profile is a file in this folder, sandbox-agent.json, in the JSON
// format Docker and Podman read (and a Kubernetes node's Localhost
// profiles); TestProfile checks it is what the profiles module and Denied
// make, and rewrites it with -update.
package seccomp

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
)

//go:embed sandbox-agent.json
var profile []byte

// Profile is the profile's JSON.
func Profile() []byte { return bytes.Clone(profile) }

// Denied are the system calls the profile refuses that the engine default
// allows (some only to containers with a capability sandboxes never get):
// io_uring (a kernel attack surface of its own), userfaultfd (a staple of
// kernel exploits), bpf and perf_event_open, and the kernel keyring
// (not namespaced). Socket domains are refused separately (DeniedDomains).
var Denied = []string{
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"userfaultfd", "bpf", "perf_event_open",
	"add_key", "keyctl", "request_key",
}

// DeniedDomains are socket domains socket(2) refuses: AF_VSOCK (40), a
// channel to the hypervisor when the host is a VM.
var DeniedDomains = []uint64{40}

// Digest names a seccomp profile by the SHA-256 of its compacted
// JSON ("sha256:HEX"; "" for none), as a sandbox-agent Runtime reports what the engine
// recorded: engines keep the JSON, not always with the same whitespace.
func Digest(profile []byte) string {
	if len(profile) == 0 {
		return ""
	}
	var b bytes.Buffer
	if json.Compact(&b, profile) != nil {
		b.Reset()
		b.Write(profile)
	}
	sum := sha256.Sum256(b.Bytes())
	return "sha256:" + hex.EncodeToString(sum[:])
}
