#!/usr/bin/env bash
# A real image registry on the loopback for tests and the release flow:
# Debian's docker-registry (the CNCF distribution registry 2.8), plain HTTP
# on 127.0.0.1 only (engines treat loopback registries as insecure by
# default), storage in a folder of its own.
#
#   bash .ci/registry.sh start   # prints 127.0.0.1:PORT; idempotent
#   bash .ci/registry.sh stop    # stops it and deletes its storage
#   REGISTRY_PORT=5000 (default)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=.ci/lib.sh
. .ci/lib.sh

port=${REGISTRY_PORT:-5000}
state=${REGISTRY_STATE:-/tmp/sandbox-agent-registry-$port}
addr="127.0.0.1:$port"

up() { curl -fsS -o /dev/null "http://$addr/v2/" 2>/dev/null; }

case "${1:-}" in
  start)
    need_pkgs docker-registry:docker-registry curl:curl
    if up; then echo "$addr"; exit 0; fi
    mkdir -p "$state/data"
    cat > "$state/config.yml" <<YAML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $state/data
  delete:
    enabled: true
http:
  addr: $addr
YAML
    nohup docker-registry serve "$state/config.yml" > "$state/registry.log" 2>&1 &
    echo $! > "$state/pid"
    for _ in $(seq 1 50); do up && break; sleep 0.2; done
    up || { log "registry did not come up:"; tail -20 "$state/registry.log" >&2; exit 1; }
    log "registry on http://$addr (storage $state/data)"
    echo "$addr"
    ;;
  stop)
    if [ -f "$state/pid" ]; then
      pid=$(cat "$state/pid")
      kill "$pid" 2>/dev/null || true
      # Gone before its storage is: a start right after must not find it.
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -rf "$state"
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
