# shellcheck shell=sh
# The main command of a one-shot sandbox (sandboxagent.RunOnce), run by
# /bin/sh under the container's init. $1: the sandbox's lifetime in
# seconds (0: none); the rest: the command. A watchdog bounds the command
# without the host (one that died leaves nothing running past the
# lifetime): it kills every process it may signal once the lifetime is up.
# It is forked twice, so that init adopts it: not a child the command
# sees. Then the shell becomes the command (exec): its pid, signals and
# exit status are the command's own ($0 is "sh": a command not found is
# told as a shell tells it, exit 127).
life=$1; shift
if [ "$life" -gt 0 ]; then
  ( (sleep "$life"; kill -KILL -1) </dev/null >/dev/null 2>&1 & )
fi
exec "$@"
