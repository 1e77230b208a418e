# shellcheck shell=bash
# Sends SIGKILL to the process group $1 ("-PGID") with bash's builtin
# kill, for images without procps kill (dash's builtin cannot signal a
# group). Run by bash.
kill -s KILL -- "$1"
