# shellcheck shell=sh
# Starts the keepalive watchdog ($1, the text of keepalive.sh) with the
# remaining arguments, under bash when the image has it (command -v is a
# builtin: no fork), else under sh. Run by /bin/sh as the container's main
# command.
s=$1; shift
command -v bash >/dev/null 2>&1 && exec bash -c "$s" sandbox-agent-keepalive "$@"
exec /bin/sh -c "$s" sandbox-agent-keepalive "$@"
