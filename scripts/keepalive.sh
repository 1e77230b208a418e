# shellcheck shell=sh
# The container's main process, run by keepalive-launch.sh under bash or,
# without bash, under sh: it exits (and the container removes itself)
# once no other process has run for $1 seconds, checking every $2
# seconds. Any process but init (pid 1) and this shell is a running
# command: counting against a baseline taken at start would miss a
# command that started before the shell did.
#
# Under bash it waits with read -t on a pipe that never delivers, so it
# forks nothing after start: a fork bomb that exhausts the pids limit must
# not kill the watchdog (and with it the container) with a failed fork.
# The one fork, the process substitution that makes the pipe, is reaped
# at once: bash does not reap it by itself until a later command, and a
# zombie child would count against the pids limit and as activity. Other
# shells fork sleep, and wait for it.
#
# The relays to the host's proxies (forward.pl, named sa-forward) run as
# long as the sandbox does: they are not activity.
ka=$1; iv=$2
busy() {
  for p in /proc/[0-9]*; do
    case ${p#/proc/} in 1|"$$") continue ;; esac
    comm=
    read -r comm < "$p/comm" 2>/dev/null
    [ "$comm" = sa-forward ] || return 0
  done
  return 1
}
# shellcheck disable=SC3028 # BASH_VERSION is how this tells bash from sh
if [ -n "$BASH_VERSION" ]; then
  # Opened read-write, fd 3 holds both ends: reads never see EOF.
  eval 'exec 3<> <(:)'
  wait "$!"
  # shellcheck disable=SC3045 # bash only (guarded above)
  nap() { read -rt "$iv" -u 3; }
else
  nap() { sleep "$iv"; }
fi
read -r up _ < /proc/uptime; last=${up%.*}
while :; do
  nap
  read -r up _ < /proc/uptime; now=${up%.*}
  if busy; then last=$now; fi
  if [ $((now - last)) -ge "$ka" ]; then exit 0; fi
done
