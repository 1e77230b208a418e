# shellcheck shell=sh
# Run by /bin/sh as the sandbox's user when a new host adopts the sandbox,
# in one exec (execs are what an adoption costs): prints the cgroup
# counters with Counters ($5: "oom N", "pids N"), then every listening TCP
# socket's port and uid, on any address, IPv4 or IPv6 ("listen PORT UID",
# PORT in hex, from /proc/net/tcp and tcp6): the host trusts the relay the
# dead host left only when root alone listens on its ports. Last it kills
# what the dead host left running of its turns with ExecKill ($1; its
# arguments: $2 the tag's value, $3 the grace, $4 the tag's variable),
# whose status is the exec's. Both scripts are evaluated by this shell
# (Counters in a subshell, for its exit): no other program starts but
# the kill script's own.
kill_script=$1 tag=$2 grace=$3 var=$4 counters=$5
(eval "$counters")
# sl local rem st tx:rx tr:when retrnsmt uid ...; local is ADDR:PORT.
for f in /proc/net/tcp /proc/net/tcp6; do
  [ -r "$f" ] || continue
  while read -r _ local _ st _ _ _ uid _; do
    [ "$st" = 0A ] && echo "listen ${local##*:} $uid"
  done < "$f"
done
set -- "$tag" "$grace" "$var"
eval "$kill_script"
