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

if [ "$(id -u)" != 0 ]; then
  echo "gvisor.sh: needs root (apt-get, /etc/docker/daemon.json)" >&2
  exit 1
fi
need_pkgs runsc:runsc
runsc=$(command -v runsc)
log "gVisor: $("$runsc" --version | head -1)"

conf=/etc/docker/daemon.json
mkdir -p "$(dirname "$conf")"
# Merge into whatever the file holds: other keys are the operator's.
python3 - "$conf" "$runsc" <<'PY'
import json, os, sys
conf, runsc = sys.argv[1], sys.argv[2]
try:
    with open(conf) as f:
        data = json.load(f)
except FileNotFoundError:
    data = {}
want = {"path": runsc, "runtimeArgs": ["--platform=ptrace", "--network=none", "--host-uds=open"]}
if data.get("runtimes", {}).get("runsc") != want:
    data.setdefault("runtimes", {})["runsc"] = want
    tmp = conf + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, conf)
    print("changed")
PY

# Reload (or find) it: dockerd reads the runtimes again on SIGHUP.
registered() { docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; }
if ! registered || [ "$(docker info --format '{{json (index .Runtimes "runsc")}}')" != "$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["runtimes"]["runsc"]; print(json.dumps(r, separators=(",", ":")))' "$conf")" ]; then
  pid=$(pidof dockerd) || { echo "gvisor.sh: no dockerd running" >&2; exit 1; }
  kill -HUP "$pid"
  for _ in $(seq 1 20); do registered && break; sleep 0.5; done
fi
registered || { echo "gvisor.sh: dockerd does not list runsc after a reload" >&2; exit 1; }
log "runsc registered: $(docker info --format '{{json (index .Runtimes "runsc")}}')"
