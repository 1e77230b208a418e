#!/usr/bin/env bash
# Release: the images first, then the package, then the Go release tag.
#
#   VERSION=v0.1.0 .ci/release.sh [--dry-run]     (or: .ci/release.sh [--dry-run] v0.1.0)
#
# The images go to SANDBOX_AGENT_IMAGE_NAME (config key image_name) when it
# is set, else to versions.json's repository (ghcr.io/sandbox-agent/
# sandbox-agent), with the credentials of the Docker config file (docker
# login). Steps, each one only when the previous one succeeded:
#
# 1. build   `sandbox-agent images build --force`: every image of
#            versions.json under that name, from this checkout's
#            Dockerfiles (the engine's layer cache makes an unchanged image
#            quick, and the same image).
# 2. push    `images push`: prints TAG<TAB>sha256:DIGEST per image. A tag
#            the registry already serves as another image is refused (tags
#            are immutable: bump image_date in versions.json).
# 3. verify  `images check --registry`: every local image's digest is the
#            one its registry serves.
# 4. record  the pushed digests go into images/catalog/digests.json
#            ({"<tag>": "sha256:…"}, compiled into the binary:
#            image_verify=strict checks images against it).
# 5. package static binaries for PLATFORMS into DIST with main.version set,
#            each twice: sandbox-agent-VERSION-OS-ARCH (Docker and Podman)
#            and sandbox-agent-kubernetes-VERSION-OS-ARCH (also Kubernetes:
#            build tag kubernetes, docs/kubernetes.md); the Python wheels into DIST/python (.ci/build_wheel.sh
#            --binary: each linux/amd64 and linux/arm64 kubernetes binary of
#            PLATFORMS in a wheel sandbox-agent, version VERSION in PEP 440 form),
#            refused unless the registry serves every image tag their
#            versions.json names (`images which` of each of `images names`,
#            checked with `images check --registry NAME...`); and
#            DIST/SHA256SUMS (binaries and wheels). The host's binary must
#            pass `SANDBOX_AGENT_IMAGE_VERIFY=strict images check` (it
#            carries the recorded digests).
# 6. tag     commit digests.json ("Release VERSION: image digests"),
#            `git tag -a VERSION`, and push the tag when a remote is
#            configured (RELEASE_REMOTE, else origin, else the only remote).
#            Then the wheels go to PyPI with `python3 -m twine upload` when
#            TWINE_PASSWORD is set (TWINE_USERNAME=__token__ and an API
#            token; TWINE_REPOSITORY_URL for another index); else the
#            command to run is printed and nothing is uploaded.
#
# --dry-run runs steps 1-5 (the images are really pushed) and skips 6 (no
# tag, no upload); digests.json is put back as it was (the binaries and
# wheels in DIST still carry the recorded digests). Without --dry-run the
# work tree must be clean, VERSION not tagged yet and PEP 440 (no local
# version in the wheels). A failure after step 4 puts digests.json back too.
#
#   DIST       output folder (default dist/; emptied first)
#   PLATFORMS  default "linux/amd64 linux/arm64 darwin/amd64 darwin/arm64"
#   PYTHON     builds (and uploads) the wheels (default /usr/bin/python3:
#              setuptools, wheel and pip; twine to upload)
#
# Exit codes: 0 released (or dry run done), 1 a step failed, 2 usage.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; }

dry_run=0
VERSION=${VERSION:-}
for arg in "$@"; do
    case "$arg" in
        --dry-run) dry_run=1;;
        -h|--help) usage; exit 0;;
        -*) echo "release.sh: unknown flag $arg" >&2; usage; exit 2;;
        *) VERSION=$arg;;
    esac
done
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
digests_path=images/catalog/digests.json # relative to $root, for git
digests="$root/$digests_path"

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'release.sh: %s\n' "$*" >&2; exit 1; }
t0=$(date +%s)
step_start=$t0
step_name=prepare
timings=()
step() { # step N NAME: end the previous step (its time is kept) and start this one
    local now
    now=$(date +%s)
    timings+=("$step_name $((now - step_start))s")
    log "[$1/6] $2"
    step_start=$now
    step_name=$3
}

cd "$root"
if [ "$dry_run" = 0 ]; then
    if [ -n "$(git status --porcelain)" ]; then # untracked files too: go:embed takes them
        die "the work tree has changes: commit or stash them first (or --dry-run)"
    fi
    ! git rev-parse -q --verify "refs/tags/$VERSION" >/dev/null || die "tag $VERSION exists already"
    if [ -n "${TWINE_PASSWORD:-}" ]; then # know before tagging that the upload can run
        "${PYTHON:-/usr/bin/python3}" -m twine --version >/dev/null 2>&1 ||
            die "TWINE_PASSWORD is set but ${PYTHON:-/usr/bin/python3} has no twine (apt-get install twine, or unset it)"
    fi
fi

work=$(mktemp -d)
cp "$digests" "$work/digests.json.orig"
restore_digests=1
cleanup() {
    if [ "$restore_digests" = 1 ] && ! cmp -s "$work/digests.json.orig" "$digests"; then
        cp "$work/digests.json.orig" "$digests"
        log "digests.json put back as it was"
    fi
    rm -rf "$work"
}
trap cleanup EXIT

host_bin="$work/sandbox-agent"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$host_bin" ./cmd/sandbox-agent || die "go build failed"
mapfile -t names < <("$host_bin" images names)
[ "${#names[@]}" -gt 1 ] || die "images names printed nothing"
log "releasing $VERSION: images $("$host_bin" images which base | sed 's/:[^:]*$//'):{${names[*]}}$([ "$dry_run" = 1 ] && echo ' (dry run: no git tag)')"

step 1 "build the images (layer cache)" build
"$host_bin" images build --force >&2 || die "the image build failed"

step 2 "push the images" push
rc=0
"$host_bin" images push >"$work/pushed.tsv" || rc=$?
cat "$work/pushed.tsv" >&2
[ "$rc" = 0 ] || die "the push failed (exit $rc); a tag refused as another image needs a new image_date in versions.json"

step 3 "verify: each local image's digest is its registry's" verify
rc=0
"$host_bin" images check --registry >&2 || rc=$?
case "$rc" in
    0) ;;
    3) die "a digest differs between the engine and the registry (see above): another push raced this one?";;
    *) die "images check --registry failed (exit $rc)";;
esac

step 4 "record the digests in digests.json" record
[ "$(wc -l <"$work/pushed.tsv")" = "${#names[@]}" ] || die "pushed $(wc -l <"$work/pushed.tsv") images, want ${#names[@]}"
{
    printf '{\n'
    sep=''
    while IFS=$'\t' read -r ref digest; do
        tag=${ref##*:}
        [[ $tag =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]*$ && $digest =~ ^sha256:[0-9a-f]{64}$ ]] || die "bad push output line: $ref $digest"
        printf '%s  "%s": "%s"' "$sep" "$tag" "$digest"
        sep=$',\n'
    done <"$work/pushed.tsv"
    printf '\n}\n'
} >"$work/digests.json"
cp "$work/digests.json" "$digests"
cat "$digests" >&2

step 5 "build $VERSION for $platforms into $dist" package
rm -rf "$dist"
mkdir -p "$dist"
for p in $platforms; do
    os=${p%/*} arch=${p#*/}
    out="$dist/sandbox-agent-$VERSION-$os-$arch"
    CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$out" ./cmd/sandbox-agent ||
        die "go build for $p failed"
    echo "    $out" >&2
    # The same with the Kubernetes runtime (client-go: a larger binary
    # that starts slower, docs/kubernetes.md).
    out="$dist/sandbox-agent-kubernetes-$VERSION-$os-$arch"
    CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -tags kubernetes -trimpath -ldflags "$ldflags" -o "$out" ./cmd/sandbox-agent ||
        die "go build -tags kubernetes for $p failed"
    echo "    $out" >&2
done
export VERSION # build_wheel.sh's: the wheel's version
: >"$work/wheels.txt"
for p in $platforms; do
    case "$p" in linux/amd64|linux/arm64) ;; *) continue;; esac
    # The wheels carry the build with every runtime: Python's own start
    # dwarfs the binary's.
    bash .ci/build_wheel.sh --arch "${p#linux/}" --binary "$dist/sandbox-agent-kubernetes-$VERSION-linux-${p#linux/}" \
        --out "$work/wheels" >>"$work/wheels.txt" || die "the linux/${p#linux/} wheel failed (see above)"
done
mapfile -t wheels <"$work/wheels.txt"
if [ "${#wheels[@]}" = 0 ]; then
    log "no linux/amd64 or linux/arm64 in PLATFORMS: no Python wheel"
else
    # A wheel whose images the registry lacks would install an engine that
    # cannot start a sandbox: every tag its versions.json names must be there.
    for w in "${wheels[@]}"; do
        "${PYTHON:-/usr/bin/python3}" -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read("sandbox_agent/versions.json"))' "$w" |
            cmp -s - images/catalog/versions.json || die "${w##*/}: its versions.json is not images/catalog/versions.json"
    done
    tags=()
    for n in "${names[@]}"; do
        t=$("$host_bin" images which "$n") || die "images which $n failed"
        tags+=("$t")
    done
    rc=0
    "$host_bin" images check --registry "${names[@]}" >"$work/wheel-images.tsv" 2>"$work/wheel-images.err" || rc=$?
    missing=()
    for t in "${tags[@]}"; do # TAG<TAB>local|not-local,registry|not-in-registry<TAB>verdict
        awk -F'\t' -v t="$t" '$1 == t && $2 ~ /,registry$/ { ok = 1 } END { exit !ok }' "$work/wheel-images.tsv" ||
            missing+=("$t")
    done
    if [ "${#missing[@]}" -gt 0 ] || [ "$rc" != 0 ]; then
        cat "$work/wheel-images.tsv" "$work/wheel-images.err" >&2
        [ "${#missing[@]}" = 0 ] || die "refusing the wheels: the registry does not serve ${missing[*]}"
        die "refusing the wheels: images check --registry failed (exit $rc)"
    fi
    if [ "$dry_run" = 0 ]; then
        for w in "${wheels[@]}"; do
            case "${w##*/}" in
                sandbox_agent-*+*) die "${w##*/}: VERSION $VERSION is no PEP 440 release (a local version): PyPI refuses it";;
            esac
        done
    fi
    mkdir -p "$dist/python"
    mv "${wheels[@]}" "$dist/python/"
    log "the registry serves the wheels' ${#tags[@]} images; in $dist/python:"
    printf '    %s\n' "${wheels[@]##*/}" >&2
fi
(
    cd "$dist"
    if [ -d python ]; then sha256sum sandbox-agent-* python/*.whl; else sha256sum sandbox-agent-*; fi >SHA256SUMS
)
cat "$dist/SHA256SUMS"
released="$dist/sandbox-agent-$VERSION-$(go env GOOS)-$(go env GOARCH)"
if [ ! -x "$released" ]; then # the host's platform is not among PLATFORMS
    released="$work/sandbox-agent-released"
    CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$released" ./cmd/sandbox-agent || die "go build failed"
fi
SANDBOX_AGENT_IMAGE_VERIFY=strict "$released" images check >&2 ||
    die "the release binary does not verify the pushed images against its recorded digests"

step 6 "tag $VERSION" tag
remote=${RELEASE_REMOTE:-}
if [ -z "$remote" ]; then
    mapfile -t remotes < <(git remote)
    if printf '%s\n' "${remotes[@]}" | grep -qx origin; then
        remote=origin
    elif [ "${#remotes[@]}" = 1 ]; then
        remote=${remotes[0]}
    fi
fi
upload=("${PYTHON:-/usr/bin/python3}" -m twine upload --non-interactive "$dist"/python/*.whl)
if [ "$dry_run" = 1 ]; then
    log "dry run: not committing digests.json, not tagging $VERSION${remote:+, not pushing it to $remote}$([ "${#wheels[@]}" = 0 ] || echo ', not uploading the wheels')"
else
    git add -- "$digests_path"
    if ! git diff --cached --quiet; then
        git commit -q -m "Release $VERSION: image digests" -- "$digests_path"
    fi
    restore_digests=0
    git tag -a "$VERSION" -m "sandbox-agent $VERSION"
    log "tagged $VERSION at $(git rev-parse --short HEAD)"
    if [ -n "$remote" ]; then
        git push "$remote" "refs/tags/$VERSION"
        log "pushed tag $VERSION to $remote (push the branch too: the digests commit is only reachable from the tag)"
    else
        log "no git remote configured: push the tag yourself (git push REMOTE $VERSION)"
    fi
    if [ "${#wheels[@]}" = 0 ]; then
        :
    elif [ -n "${TWINE_PASSWORD:-}" ]; then
        log "uploading the wheels: ${upload[*]}"
        "${upload[@]}" >&2 || die "twine upload failed ($VERSION is tagged already): run it again: ${upload[*]}"
    else
        log "TWINE_PASSWORD is not set: the wheels are not uploaded; to publish them run" \
            "TWINE_USERNAME=__token__ TWINE_PASSWORD=<PyPI API token> ${upload[*]}"
    fi
fi
timings+=("$step_name $(($(date +%s) - step_start))s")
summary=$(printf '%s, ' "${timings[@]}")
log "release $VERSION done in $(($(date +%s) - t0))s (${summary%, })"
