package sandboxagent

import _ "embed"

// The shell programs the library runs inside sandboxes live in scripts/,
// one file each, so shellcheck lints them (.ci/run); each file says which
// shell runs it and what its arguments are. They are passed to the
// container as the text of an "sh -c" (or "bash -c") argument, never
// copied into it.

// keepaliveLauncher is the container's main command, run by /bin/sh: it
// runs keepaliveScript ($1) under bash when the image has it, else sh.
//
//go:embed scripts/keepalive-launch.sh
var keepaliveLauncher string

// keepaliveScript is the watchdog: it exits (and the container removes
// itself) once no command the host started (an exec's root process) has
// run for $1 seconds, checking every $2 seconds, or once the sandbox is
// $3 seconds old (0: never); it forks nothing after start under bash.
//
//go:embed scripts/keepalive.sh
var keepaliveScript string

// killScript terminates every process of one exec ($1: its execTagVar
// value), SIGTERM then, after $2 hundredths of a second, SIGKILL.
//
//go:embed scripts/exec-kill.sh
var killScript string

// countersScript prints the OOM-kill and refused-fork counters of the
// sandbox's cgroup without forking.
//
//go:embed scripts/cgroup-counters.sh
var countersScript string

// scanScript prints the pids cgroup's process count ("current N") and
// every /proc/PID/stat line without forking.
//
//go:embed scripts/process-scan.sh
var scanScript string

// killGroupScript kills process group $1 ("-PGID") with bash's builtin
// kill, for images without procps kill.
//
//go:embed scripts/kill-group.bash
var killGroupScript string

// userIDsScript prints the uid and gid an exec runs as.
//
//go:embed scripts/user-ids.sh
var userIDsScript string
