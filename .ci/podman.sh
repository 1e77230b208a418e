#!/usr/bin/env bash
# Makes this machine ready to run the integration suite against Podman's
# Docker-compatible API: podman installed, containers.conf allowing
# containers to start here, the API service answering on a unix socket and
# the test image in podman's store. Idempotent and quick when everything is
# already there. Needs root (rootful podman, apt-get).
#
#   bash .ci/podman.sh [IMAGE...]
#   DOCKER_HOST=unix:///run/podman/podman.sock SANDBOX_AGENT_TEST_ENGINE=podman CI=true \
#       go test -race -tags integration -run Integration -count=1 . ./runtime/... ./cmd/...
#
# IMAGE...: more images to give podman from Docker's store (e.g. the agent
# CLI images, for the driver tests).
#   PODMAN_SOCKET   socket path (default /run/podman/podman.sock)
#   SANDBOX_AGENT_TEST_IMAGE  test image (default debian:stable-slim)
#   PODMAN_REGISTRY 127.0.0.1:PORT of a registry on the loopback (.ci/registry.sh)
#                   to pull the images from instead of copying them (see 4.)
#   PODMAN_REGISTRY_KEEP=1  leave that registry marked insecure for podman at exit
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '==> %s\n' "$*" >&2; }

sock=${PODMAN_SOCKET:-/run/podman/podman.sock}
image=${SANDBOX_AGENT_TEST_IMAGE:-debian:stable-slim}
conf=/etc/containers/containers.conf
svclog=/var/log/sandbox-agent-podman.log

if [ "$(id -u)" != 0 ]; then
  echo "podman.sh: needs root (rootful podman service on $sock)" >&2
  exit 1
fi

# 1. podman itself, and catatonit: sandboxes run with Init, and podman looks
# for its init at /usr/libexec/podman/catatonit (Debian's podman only
# recommends "catatonit | tini | dumb-init", and docker.io's tini satisfies
# that without being where podman looks).
need=()
command -v podman >/dev/null 2>&1 || need+=(podman)
[ -x /usr/libexec/podman/catatonit ] || grep -Eq '^[[:space:]]*init_path[[:space:]]*=' "$conf" 2>/dev/null || need+=(catatonit)
if [ ${#need[@]} -gt 0 ]; then
  log "installing Debian's ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q "${need[@]}" >/dev/null
fi
log "podman $(podman version --format '{{.Client.Version}}' 2>/dev/null || echo '?')"

# 2. default_ulimits = [] in the [containers] table: podman's default
# nofile ulimit is refused inside these (already containerised) machines,
# so no container starts without it. Edit in place: a second [containers]
# table would make the file invalid TOML.
mkdir -p "$(dirname "$conf")"
touch "$conf"
if ! grep -Eq '^[[:space:]]*default_ulimits[[:space:]]*=[[:space:]]*\[[[:space:]]*\]' "$conf"; then
  log "setting default_ulimits = [] in $conf"
  tmp=$(mktemp)
  awk '
    /^[[:space:]]*\[/ { in_c = ($0 ~ /^[[:space:]]*\[containers\][[:space:]]*$/) }
    in_c && /^[[:space:]]*default_ulimits[[:space:]]*=/ {
      # drop an existing (possibly multi-line) setting
      skip = ($0 !~ /\]/); next
    }
    skip { if ($0 ~ /\]/) skip = 0; next }
    { print }
    /^[[:space:]]*\[containers\][[:space:]]*$/ { print "default_ulimits = []"; done = 1 }
    END { if (!done) { print ""; print "[containers]"; print "default_ulimits = []" } }
  ' "$conf" >"$tmp"
  cat "$tmp" >"$conf"
  rm -f "$tmp"
fi

# The registry to pull from (4.), marked insecure before the API service
# starts: the service reads registries.conf once, so a running one that
# has not seen the mark yet is restarted below.
if ! command -v curl >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q curl >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q curl >/dev/null; }
fi
conf_new=
registry=${PODMAN_REGISTRY:-}
insecure_conf=
if [ -n "$registry" ]; then
  case "$registry" in
    127.0.0.1:[0-9]*) ;;
    *) log "PODMAN_REGISTRY=$registry: want 127.0.0.1:PORT (a registry on the loopback)"; exit 1;;
  esac
  curl -fsS -o /dev/null "http://$registry/v2/" || { log "no registry answers on http://$registry (bash .ci/registry.sh start)"; exit 1; }
  insecure_conf=/etc/containers/registries.conf.d/50-sandbox-agent-${registry##*:}.conf
  mkdir -p "$(dirname "$insecure_conf")"
  [ -f "$insecure_conf" ] || conf_new=1
  printf '# written by sandbox-agent .ci/podman.sh while it runs\n[[registry]]\nlocation = "%s"\ninsecure = true\n' "$registry" >"$insecure_conf"
  [ "${PODMAN_REGISTRY_KEEP:-}" = 1 ] || trap 'rm -f "$insecure_conf"' EXIT
fi

# 3. the API service.
api_up() {
  curl -fsS --max-time 3 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1
}
# A service that answers but cannot start containers (e.g. its working
# directory was deleted: conmon then fails every start) is restarted.
svc_works() {
  podman --url "unix://$sock" run --rm "$image" true >/dev/null 2>&1
}
if api_up && { [ -n "$conf_new" ] || { podman image exists "$image" && ! svc_works; }; }; then
  log "podman service must restart (it cannot start containers, or has not read the registry's insecure mark)"
  pkill -f "podman system service --time=0 unix://$sock" || true
  for _ in $(seq 1 20); do api_up || break; sleep 0.5; done
fi
if ! api_up; then
  log "starting podman system service on unix://$sock (log: $svclog)"
  mkdir -p "$(dirname "$sock")"
  rm -f "$sock"
  # From /: the service's working directory is inherited by every conmon,
  # and it must outlive the checkout that started it.
  (cd / && exec setsid nohup podman system service --time=0 "unix://$sock" </dev/null >"$svclog" 2>&1) &
  for _ in $(seq 1 60); do api_up && break; sleep 0.5; done
  api_up || { log "podman service did not come up:"; tail -20 "$svclog" >&2; exit 1; }
fi
log "podman API on unix://$sock: $(curl -fsS --unix-socket "$sock" http://d/version | tr -d '\n' | sed -E 's/.*"ApiVersion":"([^"]*)".*/compat API \1/')"

# 4. the images. With PODMAN_REGISTRY (as .ci/run does) podman pulls them
# from that registry on the loopback, which the Docker engine pushed them
# to: an image named under the registry (the agent images .ci/run's release
# step pushed, 127.0.0.1:PORT/sandbox-agent:...) is pulled as it is; any
# other (debian:stable-slim) is pushed there by Docker first, pulled, and
# named back in podman. Podman then has the image Docker has (same image
# ID, checked) and a repo digest for it, as a user's pull gives. Podman
# refuses plain HTTP unless the registry is marked insecure: a drop-in in
# registries.conf.d says so while this script runs and is removed at exit
# (PODMAN_REGISTRY_KEEP=1 leaves it for tests that pull afterwards; the
# caller removes /etc/containers/registries.conf.d/50-sandbox-agent-PORT.conf).
# Without PODMAN_REGISTRY the images are copied (docker save | podman load).
# Measured for the pi image (575 MB) into an empty podman store on the
# 2-core CI machine, three runs each, alternating: pull 6, 13, 24 s; copy
# 12, 19, 20 s (the spread is the shared machine). In CI the release step
# has pushed the agent images already, so pulling is the faster path;
# pushing first costs another 10 s, so the copy stays for a run without a
# registry. The test image, when Docker lacks it too, is built offline: by
# .ci/build_base.sh into Docker when a Docker engine answers, else by
# debootstrap straight into podman.

# from_registry IMG: give podman IMG by a pull from $registry.
from_registry() {
  local img=$1 remote path t0
  if [[ $img == "$registry"/* ]]; then
    remote=$img
  else
    path=$img # the name without its registry: debian:stable-slim, sandbox-agent/sandbox-agent:TAG
    case "${img%%/*}" in *.*|*:*|localhost) [[ $img == */* ]] && path=${img#*/};; esac
    remote=$registry/$path
    docker tag "$img" "$remote"
  fi
  local repo=${remote#"$registry"/} tag
  tag=${repo##*:} repo=${repo%:*}
  if ! curl -fs -o /dev/null -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
      "http://$registry/v2/$repo/manifests/$tag"; then
    log "pushing $img to $remote (Docker)"
    docker push "$remote" >&2
  fi
  if [ "$remote" != "$img" ]; then
    docker rmi "$remote" >/dev/null # our own tag only; the image keeps $img
  fi
  t0=$(date +%s)
  log "pulling $remote into podman's store"
  podman pull -q "$remote" >/dev/null
  log "pulled $remote in $(($(date +%s) - t0))s"
  if [ "$remote" != "$img" ]; then
    podman tag "$remote" "$img"
    podman untag "$remote" "$remote"
  fi
  local want got
  want=$(docker image inspect --format '{{.Id}}' "$img")
  got=$(podman image inspect --format '{{.Id}}' "$img")
  [ "${want#sha256:}" = "${got#sha256:}" ] || { log "podman's $img is $got, Docker's is $want"; exit 1; }
}

# With a registry every image is pulled again (quick when podman has its
# layers), so podman's copy is always the registry's, which is Docker's.
docker_up() { docker version >/dev/null 2>&1; }
for img in "$image" "$@"; do
  if podman image exists "$img"; then
    if [ -z "$registry" ] || ! docker_up || ! docker image inspect "$img" >/dev/null 2>&1; then
      log "$img is in podman's store"
      continue
    fi
  fi
  if docker_up; then
    if ! docker image inspect "$img" >/dev/null 2>&1; then
      [ "$img" = "$image" ] || { log "$img is neither in podman's nor in Docker's store"; exit 1; }
      log "$img is not in Docker either: building it there with .ci/build_base.sh"
      BASE_FROM=$img bash .ci/build_base.sh
    fi
    if [ -n "$registry" ]; then
      from_registry "$img"
    else
      log "loading $img from Docker into podman's store"
      docker save "$img" | podman load >&2
    fi
  else
    [ "$img" = "$image" ] || { log "$img is not in podman's store and no Docker engine answers"; exit 1; }
    command -v debootstrap >/dev/null 2>&1 || { apt-get update -q >/dev/null; apt-get install -y -q debootstrap >/dev/null; }
    rootfs=$(mktemp -d /tmp/sandbox-agent-rootfs.XXXXXX)
    log "no Docker engine: debootstrap ${SUITE:-trixie} and podman import as $img"
    debootstrap --variant=minbase "${SUITE:-trixie}" "$rootfs" "${MIRROR:-http://deb.debian.org/debian}" >&2
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/tmp/*
    tar -C "$rootfs" --numeric-owner -c . | podman import -c 'CMD ["bash"]' - "$img" >&2
    rm -rf "$rootfs"
  fi
  # podman stores a short name as localhost/NAME; the compat API still
  # resolves the short name the tests use.
  podman image exists "$img" || { log "podman did not get $img"; exit 1; }
done

# 5. smoke: a container starts with the hardening the sandboxes use.
if ! out=$(podman run --rm --init --network none --cap-drop ALL --security-opt no-new-privileges \
    --pids-limit 64 "$image" echo podman-ok 2>&1) || [ "$out" != podman-ok ]; then
  log "podman cannot run a container: $out"
  exit 1
fi
log "podman ready: DOCKER_HOST=unix://$sock"
