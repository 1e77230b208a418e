#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine, for the Kubernetes
# runtime and its tests: kube-apiserver, kube-controller-manager,
# kube-scheduler and kubelet v1.34.4 built from the Go module proxy, etcd
# and the CNI plugins from Debian, and a containerd of its own (not
# Docker's). It listens on the loopback and on a bridge of its own only.
#
#   bash .ci/k8s.sh start            # idempotent; prints the kubeconfig's path
#   bash .ci/k8s.sh import IMAGE...  # Docker's images (name:tag) into the cluster
#   bash .ci/k8s.sh env              # prints export KUBECONFIG=... (for eval)
#   bash .ci/k8s.sh status           # exit 0 when the cluster is up
#   bash .ci/k8s.sh netpol off|on    # stop enforcing NetworkPolicy, or enforce it again
#   bash .ci/k8s.sh kubectl ARGS...  # the cluster's own kubectl (and crictl ARGS...)
#   bash .ci/k8s.sh stop             # stops what start started, cleans the host
#
#   K8S_CACHE  the built binaries and the pause image, one folder per version,
#              kept by stop (default /var/cache/sandbox-agent-k8s)
#   K8S_STATE  certificates, kubeconfigs, etcd's data, containerd's root
#              (the images), logs and pids, removed by stop (default
#              /var/tmp/sandbox-agent-k8s: on disk, where /run and /tmp are
#              often tmpfs, too small for the agent images)
#
# The cluster, as the tests see it:
#   - API server https://127.0.0.1:6443, loopback only. $K8S_STATE/kubeconfig
#     holds the CA and an admin client certificate (group system:masters);
#     authorization Node,RBAC; admission: the defaults (ServiceAccount among
#     them) and NodeRestriction; privileged pods refused (the default).
#   - One node, sandbox-agent-k8s, ready and untainted; kubelet with
#     cgroupfs, cgroup v1 allowed, podPidsLimit 256 (stricter than the
#     library's default of 1024, which a sandbox accepts; it keeps the
#     contract suite's fork bombs short), on 10.244.77.1:10250, which pods can reach:
#     it answers only to the cluster CA's client certificates and to tokens
#     the API server accepts, as RBAC allows (anonymous gets 401).
#   - Pods on the bridge sak8s0, 10.244.77.0/24, host-local IPs, no NAT and
#     no default route: a pod reaches the other pods and the host's
#     10.244.77.1 (whatever listens there or on 0.0.0.0) and nothing else.
#     No kube-proxy (Service IPs lead nowhere; the API server is not
#     reachable from pods). IPv4 only: IPv6 is off on the bridge and
#     dropped between its ports. The bridge has a MAC of its own.
#   - NetworkPolicy enforced by kube-router's policy controller alone
#     (v2.10.0 from the module proxy, a host process with the admin
#     kubeconfig; iptables + ipset): pod to pod and pod to host, both
#     directions. --netpol-default-deny: a pod's traffic is refused until
#     its rules exist (the first second of a pod's life). Denied traffic is
#     rejected with ICMP, which a rule of ours drops, so it looks dropped:
#     a connection from an isolated pod gets no answer. kube-router lets
#     pods reach the host's NodePort range whatever the policy: it is set
#     to 1-2 (the narrowest it takes; root's ports, where nothing listens).
#     Rules of ours, removed by stop: FORWARD accepts sak8s0 to sak8s0
#     (Docker's FORWARD policy is DROP, and with br_netfilter bridged
#     traffic between two pods goes through FORWARD), ip6tables FORWARD
#     drops from sak8s0, mangle POSTROUTING drops ICMP port-unreachable to
#     sak8s0; kube-router's KUBE-ROUTER-*, KUBE-NWPLCY-*, KUBE-POD-FW-*
#     chains and KUBE-SRC-*/KUBE-DST-*/kube-router-local-pods ipsets.
#   - sandbox-agent's seccomp profile as a Localhost profile on the node
#     (kubernetes_seccomp_localhost).
#   - RuntimeClass gvisor (handler runsc): the pod in one gVisor sandbox
#     (runsc and containerd-shim-runsc-v1 built from the module proxy,
#     platform systrap, the pod's network through gVisor's own stack).
#   - Images: `import` copies them from Docker; pods also pull from a
#     plain-HTTP registry on 127.0.0.1:5055 or 127.0.0.1:5000
#     (.ci/registry.sh). No other registry is reachable here.
#
# Why 1.34: kubelet >= 1.35 refuses cgroup v1 (these machines) by default,
# and >= 1.36 drops containerd 1.x (Debian 12 has 1.6).
set -Eeuo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=.ci/lib.sh
. .ci/lib.sh

K8S_VERSION=1.34.4
STAGING_VERSION=0.34.4 # k8s.io/api, client-go, ... of that release
CRICTL_VERSION=1.34.0
PAUSE_IMAGE=localhost/sandbox-agent/pause:3.10.1
NODE=sandbox-agent-k8s
NET=sandbox-agent-k8s # the CNI network's name
BRIDGE=sak8s0
NODE_IP=10.244.77.1 # the bridge's address: kubelet listens there
POD_SUBNET=10.244.77.0/24
SERVICE_SUBNET=10.96.0.0/24
API_PORT=6443
ETCD_PORT=12379 # not 2379: Debian's etcd-server starts its own etcd there where systemd runs
REGISTRY_PORTS="5055 5000"
# NetworkPolicy: kube-router's policy controller (firewall only). The
# module proxy serves v2.10.0 but not the netlink pseudo-version it needs:
# v1.3.1 (v2.9.0's) serves the node-interface lookup the controller makes.
KUBE_ROUTER_VERSION=2.10.0
KUBE_ROUTER_NETLINK=v1.3.1
# The node's pod addresses without .0/.1 (the host's): --netpol-default-deny
# REJECTs what lies in them and is not a programmed pod.
POD_CIDRS_NO_HOST=10.244.77.2/31,10.244.77.4/30,10.244.77.8/29,10.244.77.16/28,10.244.77.32/27,10.244.77.64/26,10.244.77.128/25
# gVisor (RuntimeClass gvisor, handler runsc): runsc and its containerd
# shim from the module proxy's go branch. The newest version whose shim
# is built on containerd 1.6's libraries (later ones print a JSON
# address that Debian's containerd 1.6 cannot read) and that has the fix
# for kernels >= 6.11 (Debian's runsc 2022 cannot start a pod network here).
GVISOR_VERSION=v0.0.0-20260413194555-9680d69bf798

cache=${K8S_CACHE:-/var/cache/sandbox-agent-k8s}
state=${K8S_STATE:-/var/tmp/sandbox-agent-k8s}
for d in "$cache" "$state"; do
  case $d in /?*) ;; *) echo "k8s.sh: K8S_CACHE and K8S_STATE must be absolute paths ($d)" >&2; exit 2 ;; esac
done
cache=${cache%/} state=${state%/}
vcache=$cache/v$K8S_VERSION
bin=$vcache/bin
sock=$state/containerd/containerd.sock
kubeconfig=$state/kubeconfig
pki=$state/pki
krbin=$cache/kube-router-v$KUBE_ROUTER_VERSION # its own cache: a new version rebuilds only it
gvbin=$cache/gvisor-$GVISOR_VERSION                # likewise
# What kubelet sets on the host whatever its root dir (kubelet's
# setupKernelTunables); stop puts back the values found before.
kubelet_sysctls="vm.overcommit_memory=1 vm.panic_on_oom=0 kernel.panic=10 kernel.panic_on_oops=1 kernel.keys.root_maxkeys=1000000 kernel.keys.root_maxbytes=25000000"
# What bridge_up sets on the host (br_netfilter's); stop puts them back.
bridge_sysctls="net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables"
# Host paths kubelet and libcni may write whatever their configuration.
host_paths="/var/lib/kubelet /var/log/containers /var/log/pods /var/lib/cni"

die() { log "k8s.sh: $*"; exit 1; }
trap 'log "k8s.sh: failed at line $LINENO: $BASH_COMMAND"' ERR

# quiet CMD...: run CMD, show its output only when it fails.
quiet() {
  local out
  out=$("$@" 2>&1) || { printf '%s\n' "$out" >&2; die "failed: $*"; }
}

t_phase=$(date +%s%N)
t_total=$t_phase
timing() { # timing PHASE [SINCE]: seconds since the previous phase (or SINCE, date +%s%N), on stderr
  local now ms
  now=$(date +%s%N)
  ms=$(((now - ${2:-$t_phase}) / 1000000))
  printf 'TIMING %-15s %4d.%ds\n' "$1" $((ms / 1000)) $((ms % 1000 / 100)) >&2
  t_phase=$now
}

kctl() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
ctr_() { ctr --address "$sock" --namespace k8s.io "$@"; }
crictl_() { "$bin/crictl" --config "$state/crictl.yaml" "$@"; }
fwd_rule=(-i "$BRIDGE" -o "$BRIDGE" -m comment --comment "$NET" -j ACCEPT)
# kube-router REJECTs with ICMP port-unreachable; policy-denied traffic should look dropped
icmp_rule=(-o "$BRIDGE" -p icmp --icmp-type port-unreachable -m comment --comment "$NET" -j DROP)
# IPv6 on the bridge would go around the IPv4-only policy (fe80:: between pods)
v6_rule=(-i "$BRIDGE" -m comment --comment "$NET" -j DROP)

# --- processes: each in a session of its own, "PID EXE" in $state/pid/NAME.

spawn() { # spawn NAME EXE ARGS...: start it in the background, logging to $state/log/NAME.log
  local name=$1 exe
  exe=$(readlink -f "$2")
  shift 2
  # It must hold none of our descriptors: not the caller's stdout (a
  # $(k8s.sh start) would wait for the daemons' end), not the lock. sh
  # writes its own pid before it becomes EXE: right even where setsid forks.
  (
    for fd in "/proc/$BASHPID"/fd/*; do
      fd=${fd##*/}
      if [ "$fd" -gt 2 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    # shellcheck disable=SC2016 # sh expands them
    cd / && exec setsid sh -c 'echo "$$ $1" >"$0"; shift; exec "$@"' \
      "$state/pid/$name" "$exe" "$exe" "$@" </dev/null >>"$state/log/$name.log" 2>&1
  ) &
  for _ in $(seq 50); do [ -s "$state/pid/$name" ] && return 0; sleep 0.1; done
  die "$name did not start"
}

alive() { # alive PID: running, not a zombie
  [ -r "/proc/$1/stat" ] && [ "$(sed 's/.*) //; s/ .*//' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

pid_of() { # pid_of NAME: the pid of the live process spawn started as NAME
  local f=$state/pid/$1 pid exe now
  [ -s "$f" ] || return 1
  read -r pid exe <"$f" || return 1
  alive "$pid" || return 1
  now=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  # a recycled pid runs something else
  [ "${now% (deleted)}" = "$exe" ] || return 1
  echo "$pid"
}

halt_pid() { # halt_pid PID: TERM, then KILL after 15 s
  kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 150); do alive "$1" || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
  for _ in $(seq 50); do alive "$1" || return 0; sleep 0.1; done
}

halt() { # halt NAME: stop the process spawn started as NAME
  local pid
  if pid=$(pid_of "$1"); then halt_pid "$pid"; fi
  rm -f "$state/pid/$1"
}

die_log() { # die_log NAME MESSAGE: fail with the last lines of NAME's log
  log "k8s.sh: $2; the last lines of $state/log/$1.log:"
  tail -n "${K8S_LOG_LINES:-40}" "$state/log/$1.log" >&2 2>/dev/null || true
  log "k8s.sh: (bash .ci/k8s.sh stop cleans up)"
  exit 1
}

wait_until() { # wait_until NAME SECONDS WHAT CMD...: poll CMD; fail with NAME's log if NAME exits or time runs out
  local name=$1 secs=$2 what=$3 deadline
  deadline=$(($(date +%s) + secs))
  shift 3
  until "$@" >/dev/null 2>&1; do
    pid_of "$name" >/dev/null || die_log "$name" "$name exited while waiting for $what"
    [ "$(date +%s)" -lt "$deadline" ] || die_log "$name" "no $what after ${secs}s"
    sleep 0.2
  done
}

# Processes started (directly or by our containerd) from our paths: our
# binaries, or containerd, its shims, etcd and runc with our state on their
# command line. The command line alone would also match a user's `tail` of
# one of our logs.
our_procs() {
  local p exe cmdline
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    exe=$(readlink "/proc/$p/exe" 2>/dev/null) || continue
    exe=${exe% (deleted)}
    case $exe in
      "$bin"/*) ;;
      "$krbin"/*) ;;
      "$gvbin"/*) ;; # the runsc shims, sandboxes, gofers
      */containerd | */containerd-shim* | */etcd | */runc)
        cmdline=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) || continue
        [[ $cmdline == *"$state/"* ]] || continue
        ;;
      *) continue ;;
    esac
    echo "$p"
  done
}

# --- build: kubernetes' own module tree, as its Makefile builds it.

kgo() { GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" go "$@"; }

build() {
  local stamp="kubernetes v$K8S_VERSION, crictl v$CRICTL_VERSION" b ok=1
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl crictl; do
    [ -x "$bin/$b" ] || ok=
  done
  if [ -n "$ok" ] && [ "$(cat "$bin/.built" 2>/dev/null)" = "$stamp" ]; then
    return 0
  fi
  command -v go >/dev/null 2>&1 || die "go not found: Go >= 1.24 builds kubernetes (PATH=$PATH)"
  local src=$vcache/src out=$vcache/bin.new modcache m required=() missing=() specs=()
  log "building kubernetes v$K8S_VERSION into $bin (once per version; some minutes)"
  rm -rf "$src" "$out"
  mkdir -p "$vcache" "$out"
  modcache=$(go env GOMODCACHE)
  # The k8s.io/kubernetes module holds neither its staging modules (each is
  # a module of its own, published as v0.X.Y) nor its vendor tree; its
  # go.mod replaces the staging modules by ./staging/src/k8s.io/NAME, so
  # the tree is put back together from the proxy's copies.
  (cd / && kgo mod download "k8s.io/kubernetes@v$K8S_VERSION")
  cp -r "$modcache/k8s.io/kubernetes@v$K8S_VERSION" "$src"
  chmod -R u+w "$src"
  while read -r m; do
    # Only those it requires: sample-cli-plugin and sample-controller are
    # replaced but unused (and the proxy does not serve them).
    if grep -q "^[[:space:]]k8s.io/$m v0.0.0\$" "$src/go.mod"; then
      required+=("$m")
    else
      missing+=("$m")
    fi
  done < <(sed -n 's|^[[:space:]]k8s\.io/\([^ ]*\) => \./staging/src/k8s\.io/.*|\1|p' "$src/go.mod")
  [ ${#required[@]} -gt 20 ] || die "k8s.io/kubernetes@v$K8S_VERSION: only ${#required[@]} staging modules in its go.mod"
  for m in "${required[@]}"; do specs+=("k8s.io/$m@v$STAGING_VERSION"); done
  (cd / && kgo mod download "${specs[@]}")
  mkdir -p "$src/staging/src/k8s.io"
  for m in "${required[@]}"; do
    [ -d "$modcache/k8s.io/$m@v$STAGING_VERSION" ] || die "the module proxy did not give k8s.io/$m@v$STAGING_VERSION"
    cp -r "$modcache/k8s.io/$m@v$STAGING_VERSION" "$src/staging/src/k8s.io/$m"
  done
  chmod -R u+w "$src/staging"
  log "sources: k8s.io/kubernetes@v$K8S_VERSION and ${#required[@]} staging modules @v$STAGING_VERSION (not needed: ${missing[*]:-none})"
  timing sources

  # The version the binaries report, as hack/lib/version.sh stamps it.
  local ldflags="-s -w" pkg kv minor=${K8S_VERSION#*.}
  minor=${minor%%.*}
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    for kv in gitVersion=v$K8S_VERSION gitMajor=${K8S_VERSION%%.*} gitMinor=$minor gitTreeState=clean \
      buildDate="$(date -u +%Y-%m-%dT%H:%M:%SZ)"; do
      ldflags+=" -X $pkg.$kv"
    done
  done
  (cd "$src" && kgo build -trimpath -ldflags "$ldflags" -o "$out/" \
    ./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kube-scheduler ./cmd/kubelet)
  timing build_servers
  # Not needed by the cluster: for the tests' and CI's diagnostics, the
  # same version as the server (the machine's kubectl may be far older).
  (cd "$src" && kgo build -trimpath -ldflags "$ldflags" -o "$out/" ./cmd/kubectl)
  timing build_kubectl
  # crictl: the CRI's own view (import checks the image arrived there).
  (cd / && GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOBIN=$out \
    go install -trimpath -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=v$CRICTL_VERSION" \
    "sigs.k8s.io/cri-tools/cmd/crictl@v$CRICTL_VERSION")
  timing build_crictl
  echo "$stamp" >"$out/.built"
  rm -rf "$bin"
  mv "$out" "$bin"
  rm -rf "$src" # the binaries are the cache; the tree is 240 MB
}

build_kube_router() {
  local stamp="kube-router v$KUBE_ROUTER_VERSION, netlink $KUBE_ROUTER_NETLINK"
  [ -x "$krbin/kube-router" ] && [ "$(cat "$krbin/.built" 2>/dev/null)" = "$stamp" ] && return 0
  command -v go >/dev/null 2>&1 || die "go not found: Go builds kube-router (PATH=$PATH)"
  local m=github.com/cloudnativelabs/kube-router/v2 modcache src=$cache/kube-router-src tmp=$krbin.new
  log "building kube-router v$KUBE_ROUTER_VERSION into $krbin (once per version)"
  modcache=$(go env GOMODCACHE)
  (cd / && kgo mod download "$m@v$KUBE_ROUTER_VERSION")
  rm -rf "$src" "$tmp"
  cp -r "$modcache/$m@v$KUBE_ROUTER_VERSION" "$src"
  chmod -R u+w "$src"
  (cd "$src" && kgo mod edit -replace "github.com/vishvananda/netlink=github.com/vishvananda/netlink@$KUBE_ROUTER_NETLINK" &&
    kgo build -trimpath -ldflags "-s -w -X $m/pkg/version.Version=v$KUBE_ROUTER_VERSION" -o "$tmp/kube-router" ./cmd/kube-router)
  echo "$stamp" >"$tmp/.built"
  rm -rf "$src" "$krbin"
  mv "$tmp" "$krbin"
  timing build_kube_router
}

build_gvisor() {
  local stamp="gvisor $GVISOR_VERSION, shim without the OOM-score call" # change it with the patch
  [ -x "$gvbin/runsc" ] && [ -x "$gvbin/containerd-shim-runsc-v1" ] && [ "$(cat "$gvbin/.built" 2>/dev/null)" = "$stamp" ] && return 0
  command -v go >/dev/null 2>&1 || die "go not found: Go builds gVisor (PATH=$PATH)"
  local m=gvisor.dev/gvisor src=$cache/gvisor-src tmp=$gvbin.new f
  log "building gVisor $GVISOR_VERSION (runsc, containerd-shim-runsc-v1) into $gvbin (once per version)"
  (cd / && kgo mod download "$m@$GVISOR_VERSION")
  rm -rf "$src" "$tmp"
  cp -r "$(go env GOMODCACHE)/$m@$GVISOR_VERSION" "$src"
  chmod -R u+w "$src"
  # The shim lowers its own oom_score_adj to -999 and gives up when it
  # cannot (root here lacks CAP_SYS_RESOURCE); it must say nothing either:
  # containerd 1.6 dials whatever `start` prints as the shim's address.
  f=$src/pkg/shim/v1/service.go
  grep -q 'return "", fmt.Errorf("failed to set OOM Score on shim: %w", err)' "$f" || die "gVisor $GVISOR_VERSION: the shim's OOM-score call moved ($f)"
  sed -i 's|return "", fmt.Errorf("failed to set OOM Score on shim: %w", err)|_ = err // needs CAP_SYS_RESOURCE|' "$f"
  mkdir -p "$tmp"
  (cd "$src" && kgo build -trimpath -ldflags "-s -w -X gvisor.dev/gvisor/runsc/version.version=$GVISOR_VERSION" -o "$tmp/runsc" ./runsc &&
    kgo build -trimpath -ldflags "-s -w" -o "$tmp/containerd-shim-runsc-v1" ./shim)
  echo "$stamp" >"$tmp/.built"
  rm -rf "$src" "$gvbin"
  mv "$tmp" "$gvbin"
  timing build_gvisor
}

# sandbox-agent's seccomp profile as a Localhost profile (the kubelet's
# <root>/seccomp), where kubernetes_seccomp_localhost pods look for it.
install_seccomp() {
  command -v go >/dev/null 2>&1 || die "go not found: the seccomp profile is installed by go run ./cmd/sandbox-agent (PATH=$PATH)"
  quiet go run ./cmd/sandbox-agent seccomp install --kubelet-root "$state/kubelet/root"
}

docker_up() { # Docker's engine answers (.ci/setup starts it); waits a while for one that is starting
  command -v docker >/dev/null 2>&1 || die "no docker CLI (bash .ci/setup installs Docker)"
  for _ in $(seq 60); do docker version >/dev/null 2>&1 && return 0; sleep 1; done
  die "no Docker engine answers (bash .ci/setup starts one)"
}

# The pod sandbox ("pause") image: the upstream one is on a registry this
# machine cannot reach. A static Go program with what pause.c does: hold
# the pod's namespaces, reap zombies as PID 1 of a shared PID namespace,
# exit on SIGINT/SIGTERM. Kept as a docker-save archive in the cache; the
# image goes through Docker only while it is made. Its source is here, not
# a .go file beside this script: .ci/run shellchecks every file in .ci/.
pause_image() {
  local tar=$vcache/pause.tar tmp
  [ -s "$tar" ] && return 0
  docker_up
  mkdir -p "$vcache"
  tmp=$(mktemp -d "$vcache/pause.XXXXXX")
  cat >"$tmp/pause.go" <<'EOF'
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 16)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
EOF
  mkdir "$tmp/rootfs"
  # A lone file outside any module: it needs the standard library only.
  (cd "$tmp" && GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false \
    go build -trimpath -ldflags '-s -w' -o rootfs/pause pause.go)
  tar -C "$tmp/rootfs" --owner=0 --group=0 --numeric-owner -cf - pause |
    docker import --change 'ENTRYPOINT ["/pause"]' --change 'USER 65535:65535' - "$PAUSE_IMAGE" >/dev/null
  docker save "$PAUSE_IMAGE" >"$tmp/pause.tar"
  docker rmi "$PAUSE_IMAGE" >/dev/null
  mv "$tmp/pause.tar" "$tar"
  rm -rf "$tmp"
}

# --- certificates and configuration.

leaf() { # leaf NAME SUBJECT EXTENDED-KEY-USAGE [SUBJECT-ALT-NAMES]: key and certificate signed by the CA
  local ext="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=$3"
  [ -z "${4:-}" ] || ext+=$'\n'"subjectAltName=$4"
  quiet openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$pki/$1.key" -out "$pki/$1.csr"
  quiet openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 365 -extfile <(printf '%s\n' "$ext") -out "$pki/$1.crt"
  rm -f "$pki/$1.csr"
}

write_kubeconfig() { # write_kubeconfig FILE USER CERT: client certificate CERT, everything embedded
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $NODE
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$pki/$3.crt")
    client-key-data: $(base64 -w0 "$pki/$3.key")
contexts:
- name: $NODE
  context:
    cluster: $NODE
    user: $2
current-context: $NODE
EOF
  chmod 600 "$1"
}

certs_configs() {
  mkdir -p "$state"/{pid,log,apiserver,cni/net.d,cni/ipam,runc,runsc,pod-logs,kubelet/root}
  mkdir -p "$state"/containerd/{root,state,opt}
  mkdir -p "$pki" "$state/etcd"
  chmod 700 "$pki" "$state/etcd"
  quiet openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=$NODE-ca" -keyout "$pki/ca.key" -out "$pki/ca.crt"
  leaf apiserver /CN=kube-apiserver serverAuth \
    "IP:127.0.0.1,IP:${SERVICE_SUBNET%.0/*}.1,IP:$NODE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  leaf apiserver-kubelet-client /O=system:masters/CN=kube-apiserver-kubelet-client clientAuth
  leaf kubelet "/CN=$NODE" serverAuth "IP:$NODE_IP,DNS:$NODE"
  leaf node "/O=system:nodes/CN=system:node:$NODE" clientAuth
  leaf admin /O=system:masters/CN=sandbox-agent-admin clientAuth
  leaf controller-manager /CN=system:kube-controller-manager clientAuth
  leaf scheduler /CN=system:kube-scheduler clientAuth
  # Request-header authentication (authenticating proxies) is unused, but
  # the controller manager and the scheduler retry for ever, logging an
  # error each time, while its CA bundle is missing: a CA whose key is
  # thrown away, so nobody can use it.
  quiet openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=$NODE-front-proxy-ca" \
    -keyout "$pki/front-proxy-ca.key" -out "$pki/front-proxy-ca.crt"
  rm -f "$pki/front-proxy-ca.key"
  quiet openssl genrsa -out "$pki/sa.key" 2048
  quiet openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub"
  write_kubeconfig "$kubeconfig" admin admin
  write_kubeconfig "$state/node.kubeconfig" "system:node:$NODE" node
  write_kubeconfig "$state/controller-manager.kubeconfig" system:kube-controller-manager controller-manager
  write_kubeconfig "$state/scheduler.kubeconfig" system:kube-scheduler scheduler

  # containerd: every path of its own under $state (the defaults are
  # /var/lib/containerd, /run/containerd, /opt/containerd and runc's
  # /run/containerd/runc), Docker's containerd untouched.
  # restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE, so runc
  # cannot give a sandbox the -998 kubelet asks (it fails with "can't get
  # final child's PID from pipe: EOF"); this raises any score below
  # containerd's own to that, which needs no privilege.
  cat >"$state/containerd/config.toml" <<EOF
version = 2
root = "$state/containerd/root"
state = "$state/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$state/containerd/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_IMAGE"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$state/runc"
      # gVisor: containerd finds containerd-shim-runsc-v1 on its PATH
      # (1.6.20 ignores runtime_path); the pause container and the pod's
      # containers share one gVisor sandbox (runsc reads the CRI's annotations).
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
        runtime_type = "io.containerd.runsc.v1"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
          TypeUrl = "io.containerd.runsc.v1.options"
          ConfigPath = "$state/runsc.toml"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$state/cni/net.d"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "$state/containerd/certs.d"
EOF
  # The loopback registries, plain HTTP (containerd wants HTTPS elsewhere).
  local port
  for port in $REGISTRY_PORTS; do
    mkdir -p "$state/containerd/certs.d/127.0.0.1:$port"
    cat >"$state/containerd/certs.d/127.0.0.1:$port/hosts.toml" <<EOF
server = "http://127.0.0.1:$port"
[host."http://127.0.0.1:$port"]
  capabilities = ["pull", "resolve"]
EOF
  done

  # The shim's options: our runsc (else it runs whatever is on PATH), its
  # state under ours; systrap (no KVM here; ptrace's stub threads count
  # against podPidsLimit); the pod's network through gVisor's own stack.
  cat >"$state/runsc.toml" <<EOF
binary_name = "$gvbin/runsc"
root = "$state/runsc"
[runsc_config]
  platform = "systrap"
  network = "sandbox"
EOF

  printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 10\n' "$sock" "$sock" >"$state/crictl.yaml"

  # The pods' network: our bridge, no gateway, no masquerading, no route
  # beyond the subnet: traffic stays between the pods and the host.
  cat >"$state/cni/net.d/10-$NET.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$NET",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$state/cni/ipam",
        "ranges": [[{"subnet": "$POD_SUBNET", "rangeStart": "${NODE_IP%.*}.2"}]]
      }
    },
    {"type": "loopback"}
  ]
}
EOF

  # kubelet: no iptables chains of its own (makeIPTablesUtilChains), no
  # image garbage collection (imported images have no registry to come
  # back from), evictions only when the disk is really full.
  cat >"$state/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $pki/kubelet.crt
tlsPrivateKeyFile: $pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$sock
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupsPerQOS: true
enforceNodeAllocatable: []
podPidsLimit: 256
makeIPTablesUtilChains: false
failSwapOn: false
podLogsDir: $state/pod-logs
registerNode: true
resolvConf: /etc/resolv.conf
clusterDomain: cluster.local
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
localStorageCapacityIsolation: true
shutdownGracePeriod: 0s
EOF
}

ports_free() {
  local port who
  for port in $API_PORT $ETCD_PORT $((ETCD_PORT + 1)) 10248 10250 10257 10259 20244; do
    who=$(ss -Hltnp "sport = :$port" 2>/dev/null) || true
    [ -z "$who" ] || die "port $port is taken: $who"
  done
}

bridge_up() {
  local other
  other=$(ip -o -4 addr show | awk -v br="$BRIDGE" -v net="${NODE_IP%.*}." '$2 != br && index($4, net) == 1 {print $2}')
  [ -z "$other" ] || die "$POD_SUBNET is already on $other"
  # A MAC of its own: a bridge without one takes its lowest port's, and
  # changes it as pods come and go (the pods' ARP entries for the host go stale).
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" address 02:42:0a:f4:4d:01 type bridge
  # IPv6 off on the bridge (where the host has IPv6 at all); bridged
  # traffic through iptables (br_netfilter: kube-router filters pod to
  # pod there). The host's values are noted once and put back by stop.
  [ -d /proc/sys/net/bridge ] || modprobe br_netfilter 2>/dev/null || die "br_netfilter: no /proc/sys/net/bridge (modprobe br_netfilter failed)"
  local k
  if [ ! -e "$state/bridge-sysctl.before" ]; then
    for k in $bridge_sysctls; do echo "$k $(cat "/proc/sys/${k//.//}")"; done >"$state/bridge-sysctl.before"
  fi
  for k in $bridge_sysctls; do sysctl -qw "$k=1"; done
  if [ -e "/proc/sys/net/ipv6/conf/$BRIDGE/disable_ipv6" ]; then sysctl -qw "net.ipv6.conf.$BRIDGE.disable_ipv6=1"; fi
  ip addr replace "$NODE_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  if command -v iptables >/dev/null 2>&1; then
    iptables -C FORWARD "${fwd_rule[@]}" 2>/dev/null || iptables -I FORWARD 1 "${fwd_rule[@]}"
    iptables -t mangle -C POSTROUTING "${icmp_rule[@]}" 2>/dev/null || iptables -t mangle -A POSTROUTING "${icmp_rule[@]}"
    if [ -d /proc/sys/net/ipv6 ]; then
      ip6tables -C FORWARD "${v6_rule[@]}" 2>/dev/null || ip6tables -I FORWARD 1 "${v6_rule[@]}"
    fi
  fi
}

# What kubelet changes on the host, noted before it starts (once per
# state: a restart must not take kubelet's values for the host's).
note_host() {
  local kv p
  if [ ! -e "$state/sysctl.before" ]; then
    for kv in $kubelet_sysctls; do
      p=/proc/sys/${kv%%=*}
      echo "${kv%%=*} $(cat "${p//.//}")"
    done >"$state/sysctl.before"
  fi
  if [ ! -e "$state/host-paths.created" ]; then
    for p in $host_paths; do [ -e "$p" ] || echo "$p"; done >"$state/host-paths.created"
  fi
}

# --- the cluster.

cluster_up() { # the whole cluster (kube-router unless netpol is off)
  [ -e "$state/netpol.off" ] || pid_of kube-router >/dev/null || return 1
  core_up
}
core_up() { # the cluster without its policy engine
  local n
  for n in containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet; do
    pid_of "$n" >/dev/null || return 1
  done
  kctl get --raw /readyz >/dev/null 2>&1 && node_ready
}

kube_router_ready() {
  iptables -S FORWARD 1 | grep -q -- '-j KUBE-ROUTER-FORWARD' && iptables -S KUBE-NWPLCY-TAIL >/dev/null 2>&1 &&
    curl -fsS http://127.0.0.1:20244/healthz >/dev/null
}
# NetworkPolicy: kube-router's policy controller alone, a host process like kubelet.
start_kube_router() {
  quiet kctl annotate --overwrite node "$NODE" "kube-router.io/pod-cidrs=$POD_CIDRS_NO_HOST"
  spawn kube-router "$krbin/kube-router" --kubeconfig="$kubeconfig" \
    --run-firewall=true --run-router=false --run-service-proxy=false --run-loadbalancer=false \
    --hostname-override="$NODE" --service-cluster-ip-range="$SERVICE_SUBNET" \
    --service-node-port-range=1-2 --enable-ipv6=false --netpol-default-deny \
    --health-addr=127.0.0.1 --health-port=20244 --iptables-sync-period=1m
  wait_until kube-router 60 "kube-router's policy chains" kube_router_ready
}
kube_router_clean() { # its chains and ipsets
  local t c n
  command -v iptables >/dev/null 2>&1 || return 0
  for c in INPUT FORWARD OUTPUT; do
    while n=$(iptables -L "$c" -n --line-numbers 2>/dev/null | awk '$2 ~ /^KUBE-ROUTER-/ {print $1; exit}') && [ -n "$n" ]; do
      iptables -D "$c" "$n" || break
    done
  done
  # Best effort, each step: verify_clean reports what is left.
  for t in $(iptables -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-(ROUTER-|NWPLCY-|POD-FW-)/ {print $2}'); do iptables -F "$t" || true; done
  for t in $(iptables -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-(ROUTER-|NWPLCY-|POD-FW-)/ {print $2}'); do iptables -X "$t" || true; done
  if command -v ipset >/dev/null 2>&1; then
    for n in $(ipset list -n 2>/dev/null | grep -E '^(inet6:)?(KUBE-(SRC|DST)-|kube-router-local-pods)'); do ipset destroy "$n" || true; done
  fi
}
# netpol off|on: stop enforcing NetworkPolicy (kube-router and its rules
# gone, the cluster otherwise as it was), or enforce it again: the tests of
# a cluster whose network plugin ignores policies.
do_netpol() {
  core_up || die "the cluster is not running (bash .ci/k8s.sh start)"
  case ${1:-} in
    off)
      touch "$state/netpol.off"
      halt kube-router
      kube_router_clean
      log "NetworkPolicy no longer enforced (k8s.sh netpol on)"
      ;;
    on)
      pid_of kube-router >/dev/null || start_kube_router
      rm -f "$state/netpol.off"
      log "NetworkPolicy enforced"
      ;;
    *) die "usage: k8s.sh netpol off|on" ;;
  esac
}
node_ready() { [ "$(kctl get node "$NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
node_untainted() { kctl get node "$NODE" >/dev/null && [ -z "$(kctl get node "$NODE" -o 'jsonpath={.spec.taints}')" ]; }
default_sa() { kctl -n default get serviceaccount default && kctl -n default get configmap kube-root-ca.crt; }

do_start() {
  exec 3>&1 1>&2 # stdout is for the kubeconfig's path only
  if cluster_up; then
    if [ -e "$state/netpol.off" ]; then
      log "NetworkPolicy was switched off (k8s.sh netpol off): enforcing it again"
      start_kube_router
      rm -f "$state/netpol.off"
    fi
    install_seccomp # this checkout's profile
    log "the cluster is running ($state)"
    echo "$kubeconfig" >&3
    return 0
  fi
  if [ -e "$state" ]; then
    log "a stopped or half-started cluster in $state: cleaning it up first"
    do_stop
  fi
  [ ${#sock} -lt 100 ] || die "K8S_STATE is too long for a unix socket path ($sock)"

  # No socat (containerd's CRI forwards ports itself) and no conntrack
  # (kube-proxy's): nothing here runs them.
  need_pkgs etcd:etcd-server /usr/lib/cni/bridge:containernetworking-plugins \
    containerd:containerd ctr:containerd runc:runc ipset:ipset iptables:iptables openssl:openssl curl:curl ip:iproute2 ss:iproute2 setsid:util-linux flock:util-linux
  timing packages

  build
  build_kube_router
  build_gvisor
  pause_image
  timing pause_image

  ports_free
  certs_configs
  install_seccomp
  bridge_up
  timing certs_configs

  PATH="$gvbin:$PATH" spawn containerd "$(command -v containerd)" --config "$state/containerd/config.toml"
  wait_until containerd 30 "containerd's socket" ctr_ version
  quiet ctr_ images import "$vcache/pause.tar"
  timing containerd

  spawn etcd "$(command -v etcd)" --name "$NODE" --data-dir "$state/etcd" --logger zap --log-outputs stderr \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "$NODE=http://127.0.0.1:$((ETCD_PORT + 1))"
  wait_until etcd 30 "etcd's health" curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
  # --endpoint-reconciler-type=none: the kubernetes Service would advertise
  # an address pods cannot reach anyway (no kube-proxy).
  spawn kube-apiserver "$bin/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --secure-port="$API_PORT" --advertise-address="$NODE_IP" \
    --endpoint-reconciler-type=none --cert-dir="$state/apiserver" \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" --requestheader-client-ca-file="$pki/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$pki/ca.crt" --kubelet-preferred-address-types=InternalIP \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --service-cluster-ip-range="$SERVICE_SUBNET" --profiling=false
  wait_until kube-apiserver 120 "the API server's /readyz" kctl get --raw /readyz
  printf 'apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: gvisor\nhandler: runsc\n' | quiet kctl apply -f -
  timing etcd_apiserver

  # The controller manager: the garbage collector (ownerReferences), the
  # service accounts and their tokens, the root CA config map, the node
  # lifecycle (it lifts the not-ready taint).
  spawn kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig="$state/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$state/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$state/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=10257 --leader-elect=false \
    --use-service-account-credentials=true --service-account-private-key-file="$pki/sa.key" \
    --root-ca-file="$pki/ca.crt" --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key"
  spawn kube-scheduler "$bin/kube-scheduler" \
    --kubeconfig="$state/scheduler.kubeconfig" \
    --authentication-kubeconfig="$state/scheduler.kubeconfig" \
    --authorization-kubeconfig="$state/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false
  note_host
  spawn kubelet "$bin/kubelet" --config="$state/kubelet/config.yaml" --kubeconfig="$state/node.kubeconfig" \
    --root-dir="$state/kubelet/root" --hostname-override="$NODE" --node-ip="$NODE_IP"
  wait_until kubelet 120 "node $NODE Ready" node_ready
  timing kubelet
  start_kube_router
  timing kube_router
  wait_until kube-controller-manager 60 "node $NODE without taints" node_untainted
  wait_until kube-controller-manager 60 "the default ServiceAccount" default_sa
  pid_of kube-scheduler >/dev/null || die_log kube-scheduler "kube-scheduler exited"
  timing node_ready
  timing total "$t_total"
  log "cluster up: kubectl --kubeconfig $kubeconfig (API https://127.0.0.1:$API_PORT, node $NODE)"
  echo "$kubeconfig" >&3
}

do_import() {
  [ $# -gt 0 ] || die "usage: k8s.sh import IMAGE..."
  pid_of containerd >/dev/null || die "the cluster is not running (bash .ci/k8s.sh start)"
  docker_up
  local img t0
  t0=$(date +%s%N)
  for img in "$@"; do
    docker image inspect "$img" >/dev/null 2>&1 || die "Docker has no image $img"
  done
  # One archive: layers shared by the images travel once. The tags are
  # kept (debian:stable-slim arrives as docker.io/library/debian:stable-slim).
  docker save "$@" | ctr_ images import - >/dev/null
  for img in "$@"; do
    wait_until containerd 10 "$img in the CRI's images" crictl_ inspecti "$img"
  done
  timing import "$t0"
  log "imported into the cluster: $*"
}

# Stops what start started (saved pids), then removes what it and kubelet
# left on the host. Safe to run when nothing runs.
do_stop() {
  local pid n f ids=() m
  # kubelet first: it would restart what the rest stops.
  halt kubelet
  halt kube-router
  # Every container and sandbox ends with a task delete: the shims then
  # exit and remove their sockets (/run/containerd/s/*).
  if pid_of containerd >/dev/null; then
    for n in $(ctr_ tasks ls -q 2>/dev/null); do
      ctr_ tasks delete --force "$n" >/dev/null 2>&1 || true
    done
  fi
  for n in kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do
    halt "$n"
  done
  # Anything of ours still there (a shim whose containerd died, pids lost).
  for pid in $(our_procs); do halt_pid "$pid"; done
  # Pods' processes still in kubelet's cgroups.
  for f in /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods; do
    [ -d "$f" ] || continue
    while read -r pid; do
      kill -KILL "$pid" 2>/dev/null || true
    done < <(find "$f" -name cgroup.procs -exec cat {} + 2>/dev/null)
  done
  # Mounts under $state (rootfs overlays, netns, shm, volumes), deepest first.
  for _ in 1 2 3; do
    mapfile -t m < <(awk -v s="$state/" 'index($5, s) == 1 {print $5}' /proc/self/mountinfo | sort -r)
    [ ${#m[@]} -gt 0 ] || break
    for f in "${m[@]}"; do umount "$f" 2>/dev/null || umount -l "$f" 2>/dev/null || true; done
  done
  # kubelet's cgroups, in every hierarchy (cgroup v1: one per controller).
  for f in /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods; do
    if [ -d "$f" ]; then find "$f" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
  done
  # The network: veths die with their pods' netns; the bridge is ours.
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    for n in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}'); do
      ip link del "${n%@*}" 2>/dev/null || true
    done
    ip link del "$BRIDGE"
  fi
  if command -v iptables >/dev/null 2>&1; then
    while iptables -D FORWARD "${fwd_rule[@]}" 2>/dev/null; do :; done
    kube_router_clean
    while iptables -t mangle -D POSTROUTING "${icmp_rule[@]}" 2>/dev/null; do :; done
    while ip6tables -D FORWARD "${v6_rule[@]}" 2>/dev/null; do :; done
  fi
  # libcni's cache (/var/lib/cni/results, not configurable): our
  # network's entries, and the loopback's of our sandboxes.
  if [ -d "$state/containerd/root/io.containerd.grpc.v1.cri/sandboxes" ]; then
    mapfile -t ids < <(ls "$state/containerd/root/io.containerd.grpc.v1.cri/sandboxes")
  fi
  rm -f /var/lib/cni/results/"$NET"-*
  for n in "${ids[@]}"; do
    rm -f /var/lib/cni/results/cni-loopback-"$n"-*
  done
  # Containers' ids too: the runsc shim of a pod's container leaves its
  # socket behind even after a clean stop.
  if [ -d "$state/containerd/root/io.containerd.grpc.v1.cri/containers" ]; then
    mapfile -t -O "${#ids[@]}" ids < <(ls "$state/containerd/root/io.containerd.grpc.v1.cri/containers")
  fi
  for n in "${ids[@]}"; do
    # a killed shim's socket: sha256 of containerd's address/namespace/id
    f=/run/containerd/s/$(printf '%s' "$sock/k8s.io/$n" | sha256sum | cut -d' ' -f1)
    rm -f "$f"
  done
  # The host paths kubelet writes whatever its root dir: log links to our
  # pods, device-plugins; removed whole when they were not there before.
  if [ -d /var/log/containers ]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$state/*" -delete
  fi
  if [ -f "$state/host-paths.created" ]; then
    while read -r f; do
      case $f in
        /var/lib/kubelet) rm -rf /var/lib/kubelet ;;
        *) if [ -d "$f" ]; then find "$f" -depth -type d -empty -delete; fi ;;
      esac
    done <"$state/host-paths.created"
    # there before: only what our kubelet put there
    if ! grep -qx /var/lib/kubelet "$state/host-paths.created"; then
      rm -f /var/lib/kubelet/device-plugins/kubelet.sock
    fi
  fi
  # kubelet's kernel settings: back to the host's, unless someone changed them since.
  local k before want now
  if [ -f "$state/bridge-sysctl.before" ]; then
    while read -r k before; do
      f=/proc/sys/${k//.//}
      if [ -e "$f" ] && [ "$(cat "$f")" = 1 ] && [ "$before" != 1 ]; then echo "$before" >"$f"; fi
    done <"$state/bridge-sysctl.before"
  fi
  if [ -f "$state/sysctl.before" ]; then
    while read -r k before; do
      for want in $kubelet_sysctls; do
        [ "${want%%=*}" = "$k" ] || continue
        f=/proc/sys/${k//.//}
        now=$(cat "$f")
        if [ "$now" = "${want#*=}" ] && [ "$now" != "$before" ]; then echo "$before" >"$f"; fi
      done
    done <"$state/sysctl.before"
  fi
  rm -rf "$state"
  verify_clean
}

verify_clean() {
  local left=() p
  for p in $(our_procs); do left+=("process $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"); done
  while read -r p; do left+=("mount $p"); done < <(awk -v s="$state/" 'index($5, s) == 1 {print $5}' /proc/self/mountinfo)
  for p in /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods; do [ -d "$p" ] && left+=("cgroup $p"); done
  ip link show "$BRIDGE" >/dev/null 2>&1 && left+=("bridge $BRIDGE")
  for p in iptables-save ip6tables-save iptables-legacy-save ip6tables-legacy-save; do
    command -v "$p" >/dev/null 2>&1 || continue
    "$p" 2>/dev/null | grep -q -- '-j KUBE-\|^:KUBE-' && left+=("$p: KUBE-* chains")
    "$p" 2>/dev/null | grep -q -- "--comment $NET " && left+=("$p: the FORWARD rule for $BRIDGE")
  done
  compgen -G "/var/lib/cni/results/$NET-*" >/dev/null && left+=("/var/lib/cni/results/$NET-*")
  command -v ipset >/dev/null 2>&1 && ipset list -n 2>/dev/null | grep -qE '^(inet6:)?(KUBE-(SRC|DST)-|kube-router-)' && left+=("kube-router's ipsets")
  [ -e /var/lib/kubelet/device-plugins/kubelet.sock ] && left+=("/var/lib/kubelet/device-plugins/kubelet.sock")
  compgen -G "/var/log/containers/*" >/dev/null && [ -n "$(find /var/log/containers -maxdepth 1 -type l -lname "$state/*")" ] &&
    left+=("links in /var/log/containers")
  if [ ${#left[@]} -gt 0 ]; then
    log "k8s.sh stop: left on the host:"
    printf '  %s\n' "${left[@]}" >&2
    return 1
  fi
  log "stopped; nothing left: no process, mount, kubepods cgroup, bridge $BRIDGE, iptables rule or KUBE-* chain, kubelet host path"
}

lock() { # one start/stop at a time
  mkdir -p "$cache"
  exec 9>"$cache/lock"
  flock -w 900 9 || die "another k8s.sh start/stop holds $cache/lock"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  start) lock; do_start ;;
  stop)
    lock
    t0=$(date +%s%N)
    do_stop
    timing stop "$t0"
    ;;
  import) do_import "$@" ;;
  env)
    [ -s "$kubeconfig" ] || die "no cluster in $state (bash .ci/k8s.sh start)"
    printf 'export KUBECONFIG=%q\n' "$kubeconfig"
    ;;
  status)
    if cluster_up; then echo "running: KUBECONFIG=$kubeconfig"; else echo "not running"; exit 1; fi
    ;;
  kubectl) exec "$bin/kubectl" --kubeconfig "$kubeconfig" "$@" ;;
  crictl) crictl_ "$@" ;;
  netpol) lock; do_netpol "$@" ;;
  *)
    echo "usage: $0 start|stop|import IMAGE...|env|status|netpol off|on|kubectl ARGS...|crictl ARGS..." >&2
    exit 2
    ;;
esac
