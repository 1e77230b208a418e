// Package labels holds the container labels the library sets and reads
// that are not part of its public API (sandboxagent.Label* are).
package labels

const (
	// Owner is the stable identity of the server owning the sandbox
	// (sandboxagent.WithOwner): gc keeps it running whatever became of
	// its pid label.
	Owner = "sandbox-agent.owner"
	// Seccomp is the digest of the seccomp profile the sandbox was created
	// with (seccomp.Digest): adoption accepts a profile of another version
	// of sandbox-agent by it.
	Seccomp = "sandbox-agent.seccomp"
	// Sockets names the sandbox's socket folder (its base name), so gc can
	// remove it when the owner died.
	Sockets = "sandbox-agent.sockets"
	// Checkpoint marks a committed checkpoint's image; its value is the
	// checkpoint (sandboxagent.Checkpoint) as base64url JSON.
	Checkpoint = "sandbox-agent.checkpoint"
)
