# shellcheck shell=sh
# With an argument ("-PGID"), first sends SIGKILL to that process group
# with the shell's builtin kill (POSIX sh's, dash's among them, signals a
# group after "--"), printing "kill N" with its status. Then prints this
# shell's pid ("self N": its exec's process group, never the bomb), the
# pids cgroup's process count ("current N", from the v2 or v1 file), the
# forks it has refused so far ("refused N") and every /proc/PID/stat
# line. Builtins only, no fork: it runs while a fork bomb holds every
# pid, where every exec takes seconds, so killing and looking again
# share one. Run by /bin/sh.
if [ "$#" -gt 0 ]; then
  kill -s KILL -- "$1" 2>/dev/null
  echo "kill $?"
fi
echo "self $$"
for f in /sys/fs/cgroup/pids.current /sys/fs/cgroup/pids/pids.current; do
  [ -r "$f" ] && read -r n < "$f" && echo "current $n"
done
for f in /sys/fs/cgroup/pids.events /sys/fs/cgroup/pids/pids.events; do
  [ -r "$f" ] && while read -r k v; do [ "$k" = max ] && echo "refused $v"; done < "$f"
done
for p in /proc/[0-9]*/stat; do read -r l < "$p" && echo "$l"; done 2>/dev/null
exit 0
