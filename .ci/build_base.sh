#!/usr/bin/env bash
# Provide the Debian image images/catalog/docker/Dockerfile.base starts FROM
# (images/catalog/versions.json base.from, debian:stable-slim) on a machine
# without a reachable registry.
# Idempotent: nothing happens when the image is already there. Otherwise try
# `docker pull`; when that fails, debootstrap a minbase Debian (trixie) rootfs
# from the Debian mirror and `docker import` it under that name.
#
#   .ci/build_base.sh            # needs root (debootstrap) and the docker CLI
#   SUITE=trixie MIRROR=http://deb.debian.org/debian .ci/build_base.sh
#   BASE_FROM=NAME:TAG   import under another name; BASE_PULL=0 skips the pull
# On a bare Debian/Ubuntu machine it installs debootstrap itself (.ci/lib.sh).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=.ci/lib.sh
. "$root/.ci/lib.sh"
# base.from of versions.json, read without python or jq (a bare machine has neither).
from=$(sed -n 's/^[[:space:]]*"from":[[:space:]]*"\([^"]*\)".*/\1/p' "$root/images/catalog/versions.json" | head -n 1)
image=${BASE_FROM:-${from:-debian:stable-slim}}
suite=${SUITE:-trixie}
mirror=${MIRROR:-http://deb.debian.org/debian}

if docker image inspect "$image" >/dev/null 2>&1; then
    echo "==> $image is present: nothing to do" >&2
    exit 0
fi

if [ "${BASE_PULL:-1}" != 0 ]; then
    echo "==> $image is missing: trying docker pull" >&2
    if timeout 120 docker pull "$image" >&2; then
        exit 0
    fi
fi

echo "==> pull failed: debootstrap $suite from $mirror and docker import as $image" >&2
if [ "$(id -u)" != 0 ]; then
    echo "build_base.sh: debootstrap needs root" >&2
    exit 1
fi
need_pkgs debootstrap:debootstrap

rootfs=$(mktemp -d /tmp/sandbox-agent-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >&2
# Same trims as the official slim images: no apt lists/caches, no logs.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/log/*.log "$rootfs"/tmp/*
tar -C "$rootfs" --numeric-owner -c . | docker import -c 'CMD ["bash"]' - "$image" >&2
docker image inspect "$image" --format '==> imported {{.Id}} as '"$image" >&2
