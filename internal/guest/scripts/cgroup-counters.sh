# shellcheck shell=sh
# Prints the sandbox's cgroup counters, "oom N" (OOM kills) and "pids N"
# (forks the pids limit refused), from the cgroup v2 or v1 files. Builtins
# only, no fork: it must work while a fork bomb holds every pid. Run by
# /bin/sh.
for f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do
  [ -r "$f" ] && while read -r k v; do [ "$k" = oom_kill ] && echo "oom $v"; done < "$f"
done
for f in /sys/fs/cgroup/pids.events /sys/fs/cgroup/pids/pids.events; do
  [ -r "$f" ] && while read -r k v; do [ "$k" = max ] && echo "pids $v"; done < "$f"
done
exit 0
