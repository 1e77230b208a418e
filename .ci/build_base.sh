#!/usr/bin/env bash
# Provide the Debian image docker/Dockerfile.base starts FROM (versions.json
# base.from, debian:stable-slim) on a machine without a reachable registry.
# Idempotent: nothing happens when the image is already there. Otherwise try
# `docker pull`; when that fails, debootstrap a minbase Debian (trixie) rootfs
# from the Debian mirror and `docker import` it under that name.
#
#   .ci/build_base.sh            # needs root (debootstrap) and the docker CLI
#   SUITE=trixie MIRROR=http://deb.debian.org/debian .ci/build_base.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
image=${BASE_FROM:-$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["base"]["from"])' "$root/versions.json" 2>/dev/null || echo debian:stable-slim)}
suite=${SUITE:-trixie}
mirror=${MIRROR:-http://deb.debian.org/debian}

if docker image inspect "$image" >/dev/null 2>&1; then
    echo "==> $image is present: nothing to do" >&2
    exit 0
fi

echo "==> $image is missing: trying docker pull" >&2
if timeout 120 docker pull "$image" >&2; then
    exit 0
fi

echo "==> pull failed: debootstrap $suite from $mirror and docker import as $image" >&2
if ! command -v debootstrap >/dev/null; then
    echo "build_base.sh: debootstrap is not installed (apt-get install -y debootstrap)" >&2
    exit 1
fi
if [ "$(id -u)" != 0 ]; then
    echo "build_base.sh: debootstrap needs root" >&2
    exit 1
fi

rootfs=$(mktemp -d /tmp/sandbox-agent-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >&2
# Same trims as the official slim images: no apt lists/caches, no logs.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/log/*.log "$rootfs"/tmp/*
tar -C "$rootfs" --numeric-owner -c . | docker import -c 'CMD ["bash"]' - "$image" >&2
docker image inspect "$image" --format '==> imported {{.Id}} as '"$image" >&2
