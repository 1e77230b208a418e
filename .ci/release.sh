#!/usr/bin/env bash
# Release: images first, then the package.
#
#   VERSION=v0.1.0 .ci/release.sh        (or: .ci/release.sh v0.1.0)
#
# 1. Refuses (exit 1) unless every image versions.json names (base + each
#    CLI, {repo}:{cli}-{version}-{date}) is in its registry, checked through
#    the engine (`sandbox-agent images check --registry`, DistributionInspect).
#    Push them first: .ci/build_docker.sh --push.
# 2. Builds static binaries for linux/amd64, linux/arm64, darwin/amd64,
#    darwin/arm64 with main.version set, into dist/ (DIST to override), and
#    writes dist/SHA256SUMS.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VERSION=${1:-${VERSION:-}}
if [ -z "$VERSION" ]; then
    echo "release.sh: set VERSION (e.g. VERSION=v0.1.0 .ci/release.sh)" >&2
    exit 2
fi
case "$VERSION" in
    *[!A-Za-z0-9.+-]*) echo "release.sh: bad VERSION $VERSION" >&2; exit 2;;
esac
dist=${DIST:-"$root/dist"}
platforms=${PLATFORMS:-"linux/amd64 linux/arm64 darwin/amd64 darwin/arm64"}
ldflags="-s -w -X main.version=$VERSION"

cd "$root"
host_bin=$(mktemp -d)/sandbox-agent
trap 'rm -rf "$(dirname "$host_bin")"' EXIT
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$host_bin" ./cmd/sandbox-agent

echo "==> images first: checking the registry has every image of versions.json" >&2
if ! "$host_bin" images check --registry; then
    echo "release.sh: refusing to release $VERSION: the registry lacks image(s) above (or could not be asked)." >&2
    echo "release.sh: push them first with .ci/build_docker.sh --push" >&2
    exit 1
fi

echo "==> building $VERSION for $platforms into $dist" >&2
rm -rf "$dist"
mkdir -p "$dist"
for p in $platforms; do
    os=${p%/*} arch=${p#*/}
    out="$dist/sandbox-agent-$VERSION-$os-$arch"
    CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$out" ./cmd/sandbox-agent
    echo "    $out" >&2
done
(cd "$dist" && sha256sum sandbox-agent-* > SHA256SUMS)
cat "$dist/SHA256SUMS"
