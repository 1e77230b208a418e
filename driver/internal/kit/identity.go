package kit

import sandboxagent "github.com/sandbox-agent/sandbox-agent"

// Identity answers the three questions of sandboxagent.Driver that every
// CLI answers with constants: its name, its image and its traits. Embed
// it in the driver (built with NewIdentity).
type Identity struct {
	name   string
	image  string
	traits sandboxagent.Traits
}

// NewIdentity is the identity of the CLI name, running in image ("" =
// the built-in image from versions.json), with traits.
func NewIdentity(name, image string, traits sandboxagent.Traits) Identity {
	return Identity{name: name, image: image, traits: traits}
}

// Name is the CLI's name as in versions.json.
func (i Identity) Name() string { return i.name }

// Image is the driver's image; "" means the built-in one.
func (i Identity) Image() string { return i.image }

// Traits says what the CLI's turns report (continue, thinking, usage,
// deltas).
func (i Identity) Traits() sandboxagent.Traits { return i.traits }
