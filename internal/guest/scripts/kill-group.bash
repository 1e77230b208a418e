# shellcheck shell=bash
# Sends SIGKILL to the process group $1 ("-PGID") with bash's builtin
# kill: the last resort after process-scan.sh's /bin/sh builtin and
# procps kill. Run by bash.
kill -s KILL -- "$1"
