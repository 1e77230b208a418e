#!/usr/bin/env bash
# Build the Python package's wheel: sandbox_agent (python/) with the static
# sandbox-agent binary for one Linux platform in sandbox_agent/_bin/ and
# images/catalog/versions.json as sandbox_agent/versions.json, tagged
# py3-none-manylinux_2_17_ARCH.manylinux2014_ARCH.musllinux_1_1_ARCH (the
# binary is CGO_ENABLED=0: it runs on glibc and musl).
#
#   bash .ci/build_wheel.sh [--arch amd64|arm64|all] [--binary FILE] [--out DIR]
#
#   --arch    the platform (default: the host's; all = amd64 and arm64)
#   --binary  the linux/ARCH sandbox-agent binary to carry (one --arch only);
#             without it: CGO_ENABLED=0 go build -trimpath -ldflags
#             "-s -w -X main.version=$VERSION" ./cmd/sandbox-agent, as
#             .ci/release.sh builds it
#   --out     where the wheels go (default dist/python; created)
#   VERSION   the release (v0.1.0 -> wheel version 0.1.0, python/setup.py);
#             unset: 0.0.0.dev0+gSHORTSHA and a binary saying "dev"
#   PYTHON    the interpreter with setuptools and wheel (default /usr/bin/python3)
#   SANDBOX_AGENT_PYTHON_SRC  the package's folder (default python/; for tests)
#
# It builds from a copy of python/ in a temporary folder (nothing is written
# to the source tree), with pip wheel --no-index --no-build-isolation (no
# download), checks each wheel (its tag and WHEEL file, the binary's exec
# mode in the zip and its bytes, versions.json identical to the catalog's,
# the metadata) and prints the wheels' paths last on stdout, one per line;
# the logs go to stderr. Exit 0 built, 1 failed, 2 usage.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; }
log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'build_wheel.sh: %s\n' "$*" >&2; exit 1; }

arch='' binary='' out="$root/dist/python"
while [ $# -gt 0 ]; do
    case "$1" in
        --arch|--binary|--out)
            [ $# -ge 2 ] || { echo "build_wheel.sh: $1 needs a value" >&2; usage; exit 2; }
            case "$1" in
                --arch) arch=$2;;
                --binary) binary=$2;;
                --out) out=$2;;
            esac
            shift 2;;
        -h|--help) usage; exit 0;;
        *) echo "build_wheel.sh: unknown argument $1" >&2; usage; exit 2;;
    esac
done
if [ -z "$arch" ]; then
    case "$(uname -m)" in
        x86_64|amd64) arch=amd64;;
        aarch64|arm64) arch=arm64;;
        *) die "no wheel for this host's $(uname -m): pass --arch amd64 or arm64";;
    esac
fi
case "$arch" in
    amd64|arm64) arches=("$arch");;
    all) arches=(amd64 arm64);;
    *) echo "build_wheel.sh: --arch $arch: want amd64, arm64 or all" >&2; exit 2;;
esac
if [ -n "$binary" ]; then
    [ "${#arches[@]}" = 1 ] || { echo "build_wheel.sh: --binary goes with one --arch, not all" >&2; exit 2; }
    [ -f "$binary" ] || die "--binary $binary: no such file"
    binary=$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")
fi

src=${SANDBOX_AGENT_PYTHON_SRC:-"$root/python"}
catalog="$root/images/catalog/versions.json"
for f in pyproject.toml setup.py sandbox_agent/__init__.py; do
    [ -f "$src/$f" ] || die "$src/$f is missing"
done
src=$(cd "$src" && pwd)
python=${PYTHON:-/usr/bin/python3}
[ -x "$python" ] || command -v "$python" >/dev/null || die "no $python (set PYTHON to a Python 3 with setuptools and wheel)"
has_tools() {
    "$python" -W ignore - <<'PY'
import setuptools, pip
try:
    import setuptools.command.bdist_wheel
except ImportError:
    import wheel.bdist_wheel
PY
}
if ! has_tools 2>/dev/null && [ "$python" = /usr/bin/python3 ]; then # a bare Debian machine, as .ci/setup does
    # shellcheck source=.ci/lib.sh
    . "$root/.ci/lib.sh"
    apt_install python3-setuptools python3-wheel python3-pip || true
fi
has_tools || die "$python lacks setuptools (>= 61), wheel or pip: apt-get install python3-setuptools python3-wheel python3-pip, or set PYTHON"

cd "$root"
VERSION=${VERSION:-}
ldflags="-s -w"
if [ -n "$VERSION" ]; then
    case "$VERSION" in
        *[!A-Za-z0-9.+-]*) die "bad VERSION $VERSION";;
    esac
    ldflags="$ldflags -X main.version=$VERSION"
    pyversion=$VERSION # python/setup.py makes it PEP 440
else
    pyversion=0.0.0.dev0
    if sha=$(git rev-parse --short HEAD 2>/dev/null); then pyversion="$pyversion+g$sha"; fi
fi
# Reproducible zips: the entries' times are the last commit's.
if [ -z "${SOURCE_DATE_EPOCH:-}" ] && epoch=$(git log -1 --format=%ct 2>/dev/null); then
    export SOURCE_DATE_EPOCH=$epoch
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

t0=$(date +%s)
wheels=()
for a in "${arches[@]}"; do
    case "$a" in
        amd64) machine=x86_64;;
        arm64) machine=aarch64;;
    esac
    plat="manylinux_2_17_$machine.manylinux2014_$machine.musllinux_1_1_$machine"
    bin="$work/sandbox-agent-linux-$a"
    if [ -n "$binary" ]; then
        cp "$binary" "$bin"
    else
        command -v go >/dev/null || die "no go on PATH (or pass --binary FILE)"
        log "go build linux/$a ($ldflags)"
        CGO_ENABLED=0 GOOS=linux GOARCH=$a go build -trimpath -ldflags "$ldflags" -o "$bin" ./cmd/sandbox-agent ||
            die "go build for linux/$a failed"
    fi

    stage="$work/stage-$a"
    mkdir -p "$stage"
    # What the wheel is made of, not tests, caches or a virtualenv; the
    # project's LICENSE goes into the wheel's .dist-info (license_files).
    cp "$src/pyproject.toml" "$src/setup.py" "$root/LICENSE" "$stage/"
    cp -R "$src/sandbox_agent" "$stage/"
    rm -rf "$stage/sandbox_agent/_bin"
    find "$stage" \( -name __pycache__ -o -name '*.egg-info' \) -type d -prune -exec rm -rf {} +
    mkdir -p "$stage/sandbox_agent/_bin"
    install -m 0755 "$bin" "$stage/sandbox_agent/_bin/sandbox-agent"
    install -m 0644 "$catalog" "$stage/sandbox_agent/versions.json"
    [ -f "$stage/sandbox_agent/py.typed" ] || : >"$stage/sandbox_agent/py.typed"

    log "pip wheel linux/$a ($plat)"
    (cd "$stage" && VERSION=$pyversion SANDBOX_AGENT_WHEEL_ARCH=$machine PYTHONDONTWRITEBYTECODE=1 \
        PIP_CONFIG_FILE=/dev/null PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
        "$python" -m pip wheel --no-index --no-build-isolation --no-deps --no-cache-dir \
        -w "$work/wheels-$a" .) >&2 || die "pip wheel for linux/$a failed"
    built=("$work/wheels-$a"/*.whl)
    if [ "${#built[@]}" != 1 ] || [ ! -f "${built[0]}" ]; then
        die "pip wheel made ${#built[@]} files for linux/$a, want one"
    fi

    "$python" -W ignore - "${built[0]}" "$plat" "$bin" "$catalog" <<'PY' || die "the linux/$a wheel ${built[0]##*/} failed its checks"
import email.parser, hashlib, stat, sys, zipfile

whl, plat, binary, catalog = sys.argv[1:]
bad = []
name = whl.rsplit("/", 1)[-1]
if not (name.startswith("sandbox_agent-") and name.endswith("-py3-none-%s.whl" % plat)):
    bad.append("file name %s: want sandbox_agent-VERSION-py3-none-%s.whl" % (name, plat))
version = name[len("sandbox_agent-"):].split("-py3-", 1)[0]
dist = "sandbox_agent-%s.dist-info" % version


def sha(data):
    return hashlib.sha256(data).hexdigest()


with zipfile.ZipFile(whl) as z:
    names = set(z.namelist())
    bad += ["%s missing" % n for n in ("sandbox_agent/__init__.py", "sandbox_agent/py.typed",
            "sandbox_agent/versions.json", "sandbox_agent/_bin/sandbox-agent",
            dist + "/WHEEL", dist + "/METADATA", dist + "/RECORD") if n not in names]
    if not bad:
        wheel = email.parser.Parser().parsestr(z.read(dist + "/WHEEL").decode())
        if wheel["Root-Is-Purelib"] != "false":
            bad.append("WHEEL Root-Is-Purelib: %s, want false" % wheel["Root-Is-Purelib"])
        tags = sorted(wheel.get_all("Tag") or [])
        want = sorted("py3-none-" + p for p in plat.split("."))
        if tags != want:
            bad.append("WHEEL Tag: %s, want %s" % (tags, want))
        meta = email.parser.Parser().parsestr(z.read(dist + "/METADATA").decode())
        if meta["Name"] != "sandbox-agent" or meta["Version"] != version:
            bad.append("METADATA Name %s Version %s" % (meta["Name"], meta["Version"]))
        if meta["Requires-Python"] != ">=3.9" or meta.get_all("Requires-Dist"):
            bad.append("METADATA Requires-Python %s Requires-Dist %s" % (meta["Requires-Python"], meta.get_all("Requires-Dist")))
        info = z.getinfo("sandbox_agent/_bin/sandbox-agent")
        mode = info.external_attr >> 16
        if not stat.S_ISREG(mode) or mode & 0o755 != 0o755:
            bad.append("sandbox_agent/_bin/sandbox-agent has mode %o in the zip, want a 0755 file" % mode)
        data = z.read(info)
        if sha(data) != sha(open(binary, "rb").read()):
            bad.append("sandbox_agent/_bin/sandbox-agent is not the binary built")
        if z.read("sandbox_agent/versions.json") != open(catalog, "rb").read():
            bad.append("sandbox_agent/versions.json differs from images/catalog/versions.json")
        if "sandbox_agent/_bin/sandbox-agent," not in z.read(dist + "/RECORD").decode():
            bad.append("RECORD does not list sandbox_agent/_bin/sandbox-agent")
        # A static binary: no program interpreter (PT_INTERP), so musl works.
        phoff = int.from_bytes(data[32:40], "little")
        phentsize = int.from_bytes(data[54:56], "little")
        phnum = int.from_bytes(data[56:58], "little")
        for i in range(phnum):
            off = phoff + i * phentsize
            if int.from_bytes(data[off:off + 4], "little") == 3:
                bad.append("sandbox_agent/_bin/sandbox-agent is dynamically linked (PT_INTERP): build it with CGO_ENABLED=0")
for b in bad:
    print("build_wheel.sh: %s: %s" % (name, b), file=sys.stderr)
sys.exit(1 if bad else 0)
PY
    dest="$out/${built[0]##*/}"
    # Copied beside its place, then renamed: never a half-written wheel there.
    cp "${built[0]}" "$dest.part"
    mv -f "$dest.part" "$dest"
    log "built $dest ($(du -h "$dest" | cut -f1))"
    wheels+=("$dest")
done
log "${#wheels[@]} wheel(s) in $(($(date +%s) - t0))s"
printf '%s\n' "${wheels[@]}"
