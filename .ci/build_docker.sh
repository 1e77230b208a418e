#!/usr/bin/env bash
# Build (and with --push, push) the sandbox-agent images from the Dockerfiles
# and versions.json compiled into the binary: base first, then the CLIs.
#
#   .ci/build_docker.sh [--push] [--force] [--no-cache] [--ca-cert FILE] [NAME...]
#
# NAME is a CLI (opencode, codex, claude, pi, dsh) or "base"; none = all.
# An existing tag is refused unless --force. The CA bundle defaults to
# $SSL_CERT_FILE (TLS-intercepting proxies); it is trusted only while
# building. Needs Go and a Docker engine (DOCKER_HOST honoured); the base
# starts FROM debian:stable-slim, see .ci/build_base.sh to provide it offline.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${SANDBOX_AGENT_BIN:-"$root/.ci/out/sandbox-agent"}
mkdir -p "$(dirname "$bin")"

echo "==> go build -o $bin ./cmd/sandbox-agent" >&2
(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$bin" ./cmd/sandbox-agent)

start=$(date +%s)
"$bin" images build "$@"
echo "==> images build finished in $(( $(date +%s) - start ))s" >&2
