// Package guest holds the programs the host runs inside a sandbox — the
// keepalive watchdog, the exec killer, the cgroup and process scans — and
// the parsers of what they print, which come from a hostile container.
//
// The programs live in scripts/, one file each, so shellcheck lints them
// (.ci/run); each file says which shell runs it and what its arguments
// are. They are passed to the container as the text of an "sh -c" (or
// "bash -c") argument, never copied into it.
package guest

import _ "embed"

// Launcher is the container's main command, run by /bin/sh: it runs
// Keepalive ($1) under bash when the image has it, else sh.
//
//go:embed scripts/keepalive-launch.sh
var Launcher string

// Keepalive is the watchdog: it exits (and the container removes itself)
// once no command the host started (an exec's root process) has run for
// $1 seconds, checking every $2 seconds, or once the sandbox is $3
// seconds old (0: never); it forks nothing after start under bash.
//
//go:embed scripts/keepalive.sh
var Keepalive string

// Once is a one-shot sandbox's main command, run by /bin/sh: it bounds
// the command (after $1) to the lifetime $1 (seconds, 0: none), then
// becomes it.
//
//go:embed scripts/once.sh
var Once string

// ExecKill terminates every process of one exec ($1: the value of the
// exec's tag variable, or of the variable $3), SIGTERM then, after $2
// hundredths of a second, SIGKILL.
//
//go:embed scripts/exec-kill.sh
var ExecKill string

// Counters prints the OOM-kill and refused-fork counters of the sandbox's
// cgroup without forking (see ParseCounters).
//
//go:embed scripts/cgroup-counters.sh
var Counters string

// AdoptSettle is the one exec of an adoption, run as the sandbox's user:
// Counters ($5), every TCP listener ("listen PORT UID", see Listeners),
// then ExecKill ($1) for the dead host's turns ($2-$4).
//
//go:embed scripts/adopt-settle.sh
var AdoptSettle string

// ProcessScan prints the pids cgroup's process count ("current N") and
// every /proc/PID/stat line without forking (see Value, Groups,
// FirstSession).
//
//go:embed scripts/process-scan.sh
var ProcessScan string

// KillGroup kills process group $1 ("-PGID") with bash's builtin kill, for
// images without procps kill.
//
//go:embed scripts/kill-group.bash
var KillGroup string

// UserIDs prints the uid and gid an exec runs as.
//
//go:embed scripts/user-ids.sh
var UserIDs string
