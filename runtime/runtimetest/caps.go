package runtimetest

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// capNumbers are the Linux capability numbers (linux/capability.h).
var capNumbers = map[string]uint{
	"CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "FSETID": 4, "KILL": 5,
	"SETGID": 6, "SETUID": 7, "SETPCAP": 8, "LINUX_IMMUTABLE": 9, "NET_BIND_SERVICE": 10,
	"NET_BROADCAST": 11, "NET_ADMIN": 12, "NET_RAW": 13, "IPC_LOCK": 14, "IPC_OWNER": 15,
	"SYS_MODULE": 16, "SYS_RAWIO": 17, "SYS_CHROOT": 18, "SYS_PTRACE": 19, "SYS_PACCT": 20,
	"SYS_ADMIN": 21, "SYS_BOOT": 22, "SYS_NICE": 23, "SYS_RESOURCE": 24, "SYS_TIME": 25,
	"SYS_TTY_CONFIG": 26, "MKNOD": 27, "LEASE": 28, "AUDIT_WRITE": 29, "AUDIT_CONTROL": 30,
	"SETFCAP": 31, "MAC_OVERRIDE": 32, "MAC_ADMIN": 33, "SYSLOG": 34, "WAKE_ALARM": 35,
	"BLOCK_SUSPEND": 36, "AUDIT_READ": 37, "PERFMON": 38, "BPF": 39, "CHECKPOINT_RESTORE": 40,
}

// capMask is the /proc/PID/status bitmask (16 hex digits) of the named
// capabilities ("CAP_" prefix and case ignored).
func capMask(caps []string) (string, error) {
	var m uint64
	for _, c := range caps {
		n, ok := capNumbers[strings.TrimPrefix(strings.ToUpper(c), "CAP_")]
		if !ok {
			return "", fmt.Errorf("unknown capability %q", c)
		}
		m |= 1 << n
	}
	return fmt.Sprintf("%016x", m), nil
}

// capNames names the capabilities of a bitmask, for messages.
func capNames(hexMask string) string {
	m, err := strconv.ParseUint(strings.TrimSpace(hexMask), 16, 64)
	if err != nil {
		return "?" + hexMask
	}
	var out []string
	for name, n := range capNumbers {
		if m&(1<<n) != 0 {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// statusField returns the value of a "Key:\tvalue" line of a
// /proc/PID/status dump, "" when absent.
func statusField(status, key string) string {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// cgroupValue is one limit file the sandbox sees.
type cgroupValue struct {
	path  string
	value int64 // math.MaxInt64: "max" (no limit)
	own   bool  // the sandbox's own cgroup (its cgroup root), not an ancestor
}

// parseCgroupValues reads limitScript's "own|up PATH VALUE" lines.
func parseCgroupValues(out string) []cgroupValue {
	var vals []cgroupValue
	seen := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || seen[f[1]] {
			continue
		}
		seen[f[1]] = true
		v := cgroupValue{path: f[1], own: f[0] == "own", value: math.MaxInt64}
		if f[2] != "max" {
			n, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				continue
			}
			if n < 1<<60 { // cgroup v1 writes "no limit" as a page-rounded MaxInt64
				v.value = n
			}
		}
		vals = append(vals, v)
	}
	return vals
}

// effectiveLimit is the tightest limit among vals and where it is: the
// sandbox's own cgroup's when it sets one, else the nearest ancestor's.
func effectiveLimit(vals []cgroupValue) (cgroupValue, bool) {
	var best cgroupValue
	found := false
	for _, v := range vals {
		if v.value == math.MaxInt64 {
			continue
		}
		if !found || v.value < best.value {
			best, found = v, true
		}
	}
	return best, found
}
