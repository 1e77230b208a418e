#!/usr/bin/env bash
# Registers gVisor's runsc (Debian's package) with the Docker engine as the
# OCI runtime "runsc", so `--oci-runtime runsc` (config key oci_runtime)
# runs sandboxes under gVisor. Idempotent; needs root and a running dockerd
# started from /etc/docker/daemon.json (the engine reloads its runtimes on
# SIGHUP: running containers are not touched).
#
#   bash .ci/gvisor.sh
#
# runsc's arguments, and why (docs/security.md, "gVisor"):
#   --platform=ptrace  no KVM in these VMs (ptrace is the default; said for clarity)
#   --network=none     the sandbox's network is gVisor's own stack with no
#                      interface: egress none and model (the default) reach
#                      the host only through the relay's Unix sockets
#   --host-uds=open    lets the relay connect to those sockets, bind-mounted
#                      from the host (runsc refuses host sockets by default)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=.ci/lib.sh
. .ci/lib.sh

args='["--platform=ptrace","--network=none","--host-uds=open"]'
# What the engine lists for "runsc" when it is registered as this script does.
want() { printf '{"path":"%s","runtimeArgs":%s}' "$1" "$args"; }
current() { docker info --format '{{json (index .Runtimes "runsc")}}' 2>/dev/null || true; }

if runsc=$(command -v runsc) && [ "$(current)" = "$(want "$runsc")" ]; then
  log "runsc registered: $(current)"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "gvisor.sh: needs root to install runsc and register it in /etc/docker/daemon.json" >&2
  exit 1
fi
need_pkgs runsc:runsc python3:python3
runsc=$(command -v runsc)
log "gVisor: $("$runsc" --version | head -1)"

conf=/etc/docker/daemon.json
mkdir -p "$(dirname "$conf")"
# Merge into whatever the file holds: other keys are the operator's; a
# "runsc" entry of theirs that differs is replaced, and said so.
python3 - "$conf" "$(want "$runsc")" <<'PY'
import json, os, sys
conf, want = sys.argv[1], json.loads(sys.argv[2])
data = {}
if os.path.exists(conf) and os.path.getsize(conf) > 0:
    with open(conf) as f:
        data = json.load(f)
old = data.get("runtimes", {}).get("runsc")
if old != want:
    if old is not None:
        print("gvisor.sh: replacing the runsc runtime in %s: %s" % (conf, json.dumps(old)), file=sys.stderr)
    data.setdefault("runtimes", {})["runsc"] = want
    tmp = conf + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, conf)
PY

# dockerd reads its runtimes again on SIGHUP (running containers are not
# touched). Its pid: the pid file it writes, else the one dockerd here.
pid=$(cat /var/run/docker.pid 2>/dev/null || pidof -s dockerd || true)
if [ -z "$pid" ] || ! kill -HUP "$pid" 2>/dev/null; then
  echo "gvisor.sh: no dockerd to reload here (an engine in another namespace?): reload it to load $conf" >&2
  exit 1
fi
for _ in $(seq 1 20); do [ "$(current)" = "$(want "$runsc")" ] && break; sleep 0.5; done
[ "$(current)" = "$(want "$runsc")" ] || { echo "gvisor.sh: dockerd lists runsc as $(current) after a reload, want $(want "$runsc")" >&2; exit 1; }
log "runsc registered: $(current)"
