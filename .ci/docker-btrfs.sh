#!/usr/bin/env bash
# A second Docker engine whose storage driver is btrfs with quota groups,
# the storage that enforces a container's disk limit (StorageOpt size,
# sandbox-agent's --disk) on this kernel (it has no XFS quotas). The engine
# has its own data root (a loop-mounted btrfs file), exec root, pid file,
# socket and containerd, and runs in a network namespace of its own: a
# dockerd with --bridge none on the host's deletes the first engine's
# docker0. It gets the test image from the first engine.
#
#   host=$(bash .ci/docker-btrfs.sh start)   # prints its DOCKER_HOST last
#   bash .ci/docker-btrfs.sh stop            # removes everything it made
#
#   BTRFS_STATE  its folder (default /var/lib/sandbox-agent-btrfs)
#   BTRFS_SIZE   the btrfs file's size (default 4G)
#   SANDBOX_AGENT_TEST_IMAGE  the image to give it (default debian:stable-slim)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=.ci/lib.sh
. .ci/lib.sh

state=${BTRFS_STATE:-/var/lib/sandbox-agent-btrfs}
size=${BTRFS_SIZE:-4G}
image=${SANDBOX_AGENT_TEST_IMAGE:-debian:stable-slim}
mnt=$state/mnt
sock=/run/sandbox-agent-btrfs.sock # short: a unix socket path has a limit
pidfile=$state/docker.pid

if [ "$(id -u)" != 0 ]; then
  echo "docker-btrfs.sh: needs root (a loop mount, a dockerd)" >&2
  exit 1
fi

stop() {
  if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    local pid
    pid=$(cat "$pidfile")
    kill "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    # Its process group (setsid): dockerd and the containerd it started.
    kill -0 "$pid" 2>/dev/null && kill -9 -- "-$pid" 2>/dev/null
  fi
  # What a killed engine leaves: its containerd and shims (their command
  # lines name the state folder) and mounts under the state folder (the
  # containers' subvolumes, network namespaces under the exec root).
  pkill -9 -f -- "$state/" 2>/dev/null || true
  if [ -d "$state" ]; then
    awk -v m="$state/" 'index($2, m) == 1 { print $2 }' /proc/self/mounts | sort -r | while read -r m; do umount -l "$m" || true; done
  fi
  if mountpoint -q "$mnt" 2>/dev/null; then umount "$mnt" || umount -l "$mnt"; fi
  rm -rf "$state" "$sock"
  # The first engine's bridge must have survived.
  if ip link show docker0 >/dev/null 2>&1 || ! docker network inspect bridge >/dev/null 2>&1; then
    log "btrfs engine stopped; docker0 intact"
  else
    echo "docker-btrfs.sh: the first engine's docker0 is gone" >&2
    return 1
  fi
}

start() {
  need_pkgs mkfs.btrfs:btrfs-progs unshare:util-linux ip:iproute2
  if [ -S "$sock" ] && [ "$(docker -H "unix://$sock" info --format '{{.Driver}}' 2>/dev/null)" = btrfs ] &&
    docker -H "unix://$sock" image inspect "$image" >/dev/null 2>&1; then
    log "btrfs engine already running"
    echo "unix://$sock"
    return 0
  fi
  stop >/dev/null 2>&1 || true
  # A start that fails half-way leaves nothing running or mounted.
  trap 'stop >/dev/null 2>&1 || true' ERR
  mkdir -p "$mnt"
  echo '{}' >"$state/daemon.json" # not the host's /etc/docker/daemon.json
  truncate -s "$size" "$state/disk.img"
  mkfs.btrfs -q "$state/disk.img"
  mount -o loop "$state/disk.img" "$mnt"
  btrfs quota enable "$mnt"
  setsid unshare --net dockerd --config-file "$state/daemon.json" \
    --containerd-namespace sandbox-agent-btrfs --containerd-plugins-namespace sandbox-agent-btrfs-plugins \
    --data-root "$mnt/docker" --exec-root "$state/exec" --pidfile "$pidfile" -H "unix://$sock" \
    --storage-driver btrfs --bridge none --iptables=false --ip-masq=false --log-level warn \
    >"$state/dockerd.log" 2>&1 </dev/null &
  for _ in $(seq 1 150); do docker -H "unix://$sock" version >/dev/null 2>&1 && break; sleep 0.2; done
  if ! docker -H "unix://$sock" version >/dev/null 2>&1; then
    echo "docker-btrfs.sh: the btrfs engine did not come up:" >&2
    tail -20 "$state/dockerd.log" >&2
    stop >/dev/null 2>&1 || true
    return 1
  fi
  [ "$(docker -H "unix://$sock" info --format '{{.Driver}}')" = btrfs ] || { echo "docker-btrfs.sh: not on btrfs" >&2; stop >/dev/null 2>&1 || true; return 1; }
  docker save "$image" | docker -H "unix://$sock" load -q >&2
  trap - ERR
  log "btrfs engine up ($(docker -H "unix://$sock" version --format '{{.Server.Version}}'), $size, with $image)"
  echo "unix://$sock"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
