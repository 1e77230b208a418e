# shellcheck shell=sh
# Terminates every process of one timed-out exec: every process carrying
# SANDBOX_AGENT_EXEC_ID=$1 (or $3=$1: another tag, such as the one of
# every agent turn) in its environment (the variable is inherited by all
# descendants, even those that left the process group). SIGTERM, up
# to $2 hundredths of a second of grace, then SIGKILL until none is left
# (a forking tree may need a few rounds); exits 1 if some survive 100
# rounds, 2 if it cannot list them (no pid left to fork). One grep scans
# all of /proc per round: forks are slow in containers. /proc/uptime has
# two decimals, so "12.34" read as 1234 counts hundredths. Run by /bin/sh
# as the exec's user.
tag="${3:-SANDBOX_AGENT_EXEC_ID}=$1"; grace=$2
# pids prints the tagged pids, each followed by a space. grep -l lists
# /proc/PID/environ paths, which hold no blanks: split on whitespace.
pids() {
  l=$(grep -lzxF -e "$tag" /proc/[0-9]*/environ 2>/dev/null)
  for f in $l; do
    f=${f#/proc/}; printf '%s ' "${f%/environ}"
  done
}
# list sets p to the tagged pids, a space-separated list (split on
# purpose below). A fork that fails inside $(pids), with the tree at the
# pids limit, leaves the listing empty: that is not "none left" but exit
# 2, so the caller frees pids and asks again.
list() {
  p=$(pids) || { echo "cannot list the processes (no pid to fork?)" >&2; exit 2; }
}
# gone succeeds when none is left: two empty listings 50 ms apart, since
# one misses a child forked while /proc was read by a parent that exited.
gone() {
  [ -z "$p" ] || return 1
  sleep 0.05
  list
  [ -z "$p" ]
}
list; gone && exit 0
# shellcheck disable=SC2086
kill -TERM $p 2>/dev/null
read -r up _ < /proc/uptime; t0=${up%.*}${up#*.}
while :; do
  sleep 0.1
  list; gone && exit 0
  read -r up _ < /proc/uptime; now=${up%.*}${up#*.}
  [ $((now - t0)) -ge "$grace" ] && break
done
n=0
while [ "$n" -lt 100 ]; do
  # shellcheck disable=SC2086
  kill -KILL $p 2>/dev/null
  sleep 0.05
  list; gone && exit 0
  n=$((n+1))
done
exit 1
