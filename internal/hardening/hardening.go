// Package hardening compares a sandbox's hardening as asked with what the
// engine recorded: older engines silently drop fields they do not know,
// and a container taken over (adopted) must still be what was asked.
package hardening

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/sandbox-agent/sandbox-agent/internal/errdefs"
)

// Settings are a container's hardening settings.
type Settings struct {
	Privileged, ReadonlyRootfs, Init, NoNewPrivileges bool
	MemoryBytes, MemorySwap, NanoCPUs, PidsLimit      int64
	DiskBytes                                         int64 // 0: none asked (not checked)
	NetworkMode                                       string
	Seccomp                                           string // the profile's digest ("": the engine's default)
	OCIRuntime                                        string // "": the engine's default (not checked)
	CapDrop, CapAdd                                   []string
	Mounts                                            []Mount // bind mounts
}

// Mount is a bind mount's target and whether it is read-only.
type Mount struct {
	Target   string
	ReadOnly bool
}

// NormCaps upper-cases and strips CAP_ so engine spellings compare.
func NormCaps(in []string) string {
	out := make([]string, 0, len(in))
	for _, c := range in {
		out = append(out, strings.TrimPrefix(strings.ToUpper(c), "CAP_"))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// Diff returns the first setting of want that got does not honour, as
// want and got read it; ok when there is none.
func Diff(want, got Settings) (setting, w, g string, ok bool) {
	type check struct{ setting, want, got string }
	checks := []check{
		{"privileged", strconv.FormatBool(want.Privileged), strconv.FormatBool(got.Privileged)},
		{"readonly_rootfs", strconv.FormatBool(want.ReadonlyRootfs), strconv.FormatBool(got.ReadonlyRootfs)},
		{"init", strconv.FormatBool(want.Init), strconv.FormatBool(got.Init)},
		{"memory", strconv.FormatInt(want.MemoryBytes, 10), strconv.FormatInt(got.MemoryBytes, 10)},
		{"memory_swap", strconv.FormatInt(want.MemorySwap, 10), strconv.FormatInt(got.MemorySwap, 10)},
		{"nano_cpus", strconv.FormatInt(want.NanoCPUs, 10), strconv.FormatInt(got.NanoCPUs, 10)},
		{"network_mode", want.NetworkMode, got.NetworkMode},
	}
	// A pids limit set by the node (Kubernetes) may be stricter than asked,
	// never looser or absent.
	if got.PidsLimit <= 0 || got.PidsLimit > want.PidsLimit {
		checks = append(checks, check{"pids_limit", strconv.FormatInt(want.PidsLimit, 10) + " or less", strconv.FormatInt(got.PidsLimit, 10)})
	}
	checks = append(checks, check{"no_new_privileges", strconv.FormatBool(want.NoNewPrivileges), strconv.FormatBool(got.NoNewPrivileges)})
	if want.DiskBytes > 0 {
		checks = append(checks, check{"disk", strconv.FormatInt(want.DiskBytes, 10) + " bytes", strconv.FormatInt(got.DiskBytes, 10) + " bytes"})
	}
	if want.OCIRuntime != "" {
		checks = append(checks, check{"oci_runtime", want.OCIRuntime, got.OCIRuntime})
	}
	if want.Seccomp != "" {
		g := got.Seccomp
		if g == "" {
			g = "the engine's default profile (a sandbox created before sandbox-agent had its own, or by EngineSeccomp)"
		}
		checks = append(checks, check{"seccomp", want.Seccomp, g})
	}
	// A bind mount that lost its read-only flag would let the sandbox
	// write into a host folder.
	for _, m := range want.Mounts {
		rec := "missing"
		for _, g := range got.Mounts {
			if g.Target == m.Target {
				rec = fmt.Sprintf("%s read-only=%t", g.Target, g.ReadOnly)
			}
		}
		checks = append(checks, check{"mount", fmt.Sprintf("%s read-only=%t", m.Target, m.ReadOnly), rec})
	}
	if !want.Privileged {
		// A privileged container holds every capability whatever CapDrop
		// and CapAdd say (Podman reports exactly that bounding set; Docker
		// echoes the request), so the lists bind only when not privileged.
		checks = append(checks,
			check{"cap_drop", NormCaps(want.CapDrop), NormCaps(got.CapDrop)},
			check{"cap_add", NormCaps(want.CapAdd), NormCaps(got.CapAdd)})
	}
	for _, c := range checks {
		if c.want != c.got {
			return c.setting, c.want, c.got, false
		}
	}
	return "", "", "", true
}

// CheckOCIRuntime checks an OCI runtime's name ("" is the engine's
// default): a word the engine looks up among the runtimes it was given
// (Docker's "runtimes", a Kubernetes RuntimeClass), never a path.
func CheckOCIRuntime(name string) error {
	if name == "" {
		return nil
	}
	ok := len(name) <= 63
	for i, c := range name {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		ok = ok && (alnum || i > 0 && (c == '-' || c == '_' || c == '.'))
	}
	if !ok {
		return fmt.Errorf("%w: OCI runtime %q: want a runtime's name (letters, digits, - _ .), like runsc", errdefs.InvalidArgument, name)
	}
	return nil
}

// DefaultDiskBytes is a sandbox's disk limit when none is asked, on an
// engine that can enforce one: room for an agent image (about 1 GiB), a
// repository, its dependencies and build output. A server's tenants may
// ask less, never more.
const DefaultDiskBytes = 10 << 30
