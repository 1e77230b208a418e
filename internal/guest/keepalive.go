package guest

import (
	"strconv"
	"time"
)

// KeepaliveCmd is a container's main command: Launcher running Keepalive
// with keepalive idle seconds (at least 1), a check every tenth of it (1
// to 5 s) and lifetime seconds (0 or less: none), and the two seconds
// counts it passes (for the container's labels).
func KeepaliveCmd(keepalive, lifetime time.Duration) (cmd []string, idle, life int64) {
	idle = max(int64(keepalive.Round(time.Second)/time.Second), 1)
	interval := min(max(idle/10, 1), 5)
	if lifetime > 0 {
		life = max(int64(lifetime.Round(time.Second)/time.Second), 1)
	}
	return []string{"/bin/sh", "-c", Launcher, "sandbox-agent-keepalive", Keepalive,
		strconv.FormatInt(idle, 10), strconv.FormatInt(interval, 10), strconv.FormatInt(life, 10)}, idle, life
}

// OnceCmd is a one-shot sandbox's main command: Once running cmd, bounded
// to lifeSecs seconds (0: none; the sandbox's LabelMaxLifetime).
func OnceCmd(lifeSecs int64, cmd []string) []string {
	return append([]string{"/bin/sh", "-c", Once, "sh", strconv.FormatInt(max(lifeSecs, 0), 10)}, cmd...)
}
