# shellcheck shell=sh
# The container's main process, run by keepalive-launch.sh under bash or,
# without bash, under sh: it exits (and the container removes itself)
# once no command the host started has run for $1 seconds, checking
# every $2 seconds, or once it has run for $3 seconds (0: no limit), busy
# or not.
#
# A command the host started is the root of an exec: it enters the
# container's pid namespace from outside, so its parent is outside too
# and its PPid reads 0. What it forks has a parent inside, and an orphan
# is reparented to pid 1 (init, or this shell): a leftover such as
# "setsid nohup sleep 1000 &" never counts. pid 1 (also PPid 0) is init
# or this shell. Zombies (an exec root not yet reaped) are not running.
# The relays to the host's proxies (forward.pl, tunnel.pl, named
# sa-forward) are exec roots that run as long as the sandbox does: they
# are not activity. Each check looks at what is alive then, not against a
# baseline taken at start: that would miss a command started before it.
#
# Under bash it waits with read -t on a pipe that never delivers, so it
# forks nothing after start: a fork bomb that exhausts the pids limit must
# not kill the watchdog (and with it the container) with a failed fork.
# The one fork, the process substitution that makes the pipe, is reaped
# at once: bash does not reap it by itself until a later command, and a
# zombie child would count against the pids limit. Other shells fork
# sleep, and wait for it.
ka=$1; iv=$2; life=${3:-0}
busy() {
  for p in /proc/[0-9]*; do
    case ${p#/proc/} in 1|"$$") continue ;; esac
    # /proc/PID/status has Name, State and PPid lines: builtin reads, no
    # fork. A process gone meanwhile leaves ppid empty. Read to the end,
    # never break out: bash's read buffers a file and seeks back what it
    # did not use, a seek that fails once the process is reaped; the
    # unused lines then stay in its buffer and the next read, of
    # /proc/uptime, returned "TracerPid:" (under a fork bomb this ended
    # the watchdog, and with it the sandbox).
    name='' state='' ppid=''
    while read -r k v; do
      case $k in
        Name:) name=$v ;;
        State:) state=$v ;;
        PPid:) ppid=$v ;;
      esac
    done 2>/dev/null < "$p/status"
    [ "$ppid" = 0 ] || continue
    # A zombie is done; a stopped root (SIGSTOP from a tool of its own
    # user) runs nothing until the host resumes it, which a dead host won't.
    case $state in Z*|T*|t*) continue ;; esac
    [ "$name" = sa-forward ] || return 0
  done
  return 1
}
# shellcheck disable=SC3028 # BASH_VERSION is how this tells bash from sh
if [ -n "$BASH_VERSION" ]; then
  # Opened read-write, fd 3 holds both ends: reads never see EOF.
  eval 'exec 3<> <(:)'
  wait "$!"
  # shellcheck disable=SC3045 # bash only (guarded above)
  nap() { read -rt "$1" -u 3; }
else
  nap() { sleep "$1"; }
fi
# clock sets now to the whole seconds of uptime. A value that is not a
# number (it never should be) keeps the last one: the watchdog must not
# die of an arithmetic error.
clock() {
  read -r up _ < /proc/uptime
  case ${up%.*} in ''|*[!0-9]*) return ;; esac
  now=${up%.*}
}
now=0; clock; start=$now; last=$start
while :; do
  # The lifetime ends on time, not at the next check (up to 5 s later).
  t=$iv
  if [ "$life" -gt 0 ] && [ $((start + life - now)) -lt "$t" ]; then
    t=$((start + life - now))
  fi
  if [ "$t" -lt 1 ]; then t=1; fi
  nap "$t"
  clock
  if [ "$life" -gt 0 ] && [ $((now - start)) -ge "$life" ]; then
    echo "sandbox-agent: max lifetime of $life s reached" >&2
    exit 0
  fi
  if busy; then last=$now; fi
  if [ $((now - last)) -ge "$ka" ]; then exit 0; fi
done
