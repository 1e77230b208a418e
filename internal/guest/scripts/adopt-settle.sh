# shellcheck shell=sh
# Run by /bin/sh as the sandbox's user when a new host adopts the sandbox,
# in one exec (execs are what an adoption costs): prints the cgroup
# counters with Counters ($5: "oom N", "pids N"), then every TCP listener
# on 127.0.0.1 with its uid ("listen PORT UID", PORT in hex, from
# /proc/net/tcp), so the host sees whether the dead host's relay still
# serves its ports, and last kills what the dead host left running of its
# turns with ExecKill ($1; its arguments: $2 the tag's value, $3 the
# grace, $4 the tag's variable), whose status is the exec's. Both scripts
# are evaluated in this shell: no other shell is started.
kill_script=$1 tag=$2 grace=$3 var=$4 counters=$5
(eval "$counters")
# /proc/net/tcp: sl local rem st tx:rx tr:when retrnsmt uid ...
while read -r _ local _ st _ _ _ uid _; do
  [ "$st" = 0A ] || continue
  case $local in
    0100007F:*) echo "listen ${local#0100007F:} $uid" ;;
  esac
done < /proc/net/tcp
set -- "$tag" "$grace" "$var"
eval "$kill_script"
