"""Build settings pyproject.toml cannot express: the version and the wheel's tag.

The wheel carries sandbox_agent/_bin/sandbox-agent, a static (CGO_ENABLED=0)
Linux binary, so it is a platform wheel, not a pure one: its tag is
py3-none-manylinux_2_17_ARCH.manylinux2014_ARCH.musllinux_1_1_ARCH, ARCH
(x86_64 or aarch64) read from the binary's ELF header (a static binary runs
on glibc and musl alike). Without the binary (a development install) the
wheel is pure and says so on stderr. .ci/build_wheel.sh builds the real one.

The version comes from $VERSION, the release's (v0.1.0 -> 0.1.0; a semver
pre-release such as v0.2.0-rc.1 -> 0.2.0rc1; anything else after X.Y.Z
becomes a local version, v0.0.0-ci -> 0.0.0+ci, which PyPI refuses), and
defaults to 0.0.0.dev0.
"""

import os
import re
import sys

from setuptools import Distribution, setup

try:  # setuptools >= 70.1 has its own; before, the wheel package's
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
BINARY = os.path.join(HERE, "sandbox_agent", "_bin", "sandbox-agent")
ELF_MACHINES = {62: "x86_64", 183: "aarch64"}  # EM_X86_64, EM_AARCH64


def pep440(raw):
    """The PEP 440 form of a release version such as v0.1.0."""
    v = raw.strip()
    if v[:1] in ("v", "V"):
        v = v[1:]
    m = re.fullmatch(r"(\d+(?:\.\d+)*)-(alpha|beta|rc|a|b|c)\.?(\d+)", v, re.IGNORECASE)
    if m:
        pre = {"alpha": "a", "beta": "b", "c": "rc"}.get(m.group(2).lower(), m.group(2).lower())
        v = "%s%s%s" % (m.group(1), pre, m.group(3))
    canon = _normalize(v)
    if canon is not None:
        return canon
    m = re.fullmatch(r"(\d+(?:\.\d+)*)[-+]([A-Za-z0-9][A-Za-z0-9.+_-]*)", v)
    if m:
        local = re.sub(r"[^a-z0-9]+", ".", m.group(2).lower()).strip(".")
        canon = _normalize("%s+%s" % (m.group(1), local))
        if canon is not None:
            sys.stderr.write("setup.py: VERSION %s is not PEP 440: the wheel is %s, a local version PyPI refuses\n" % (raw, canon))
            return canon
    raise SystemExit("setup.py: VERSION %r has no PEP 440 form (want vX.Y.Z, vX.Y.Z-rc.N, X.Y.Z.devN, ...)" % raw)


def _normalize(v):
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:
        try:
            from setuptools.extern.packaging.version import InvalidVersion, Version
        except ImportError:
            Version = None
    if Version is None:  # the canonical public form, plus a local part
        ok = re.fullmatch(
            r"(\d+!)?\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?(\+[a-z0-9]+(\.[a-z0-9]+)*)?", v
        )
        return v if ok else None
    try:
        return str(Version(v))
    except InvalidVersion:
        return None


def elf_arch(path):
    """x86_64 or aarch64 for a 64-bit ELF binary; an error for anything else."""
    with open(path, "rb") as f:
        head = f.read(20)
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[4] != 2:
        raise SystemExit("setup.py: %s is not a 64-bit ELF binary (a Linux build of cmd/sandbox-agent)" % path)
    machine = int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")
    if machine not in ELF_MACHINES:
        raise SystemExit("setup.py: %s is for ELF machine %d, not x86_64 or aarch64" % (path, machine))
    return ELF_MACHINES[machine]


class BinaryDistribution(Distribution):
    """Not pure when it carries the binary: the files go to platlib, the
    wheel's root (else into sandbox_agent-X.data/purelib/)."""

    def has_ext_modules(self):
        return os.path.isfile(BINARY)


class PlatformWheel(bdist_wheel):
    """A wheel tagged for the binary's platform, for any Python 3."""

    def finalize_options(self):
        super().finalize_options()
        self.has_binary = os.path.isfile(BINARY)
        if self.has_binary:
            self.root_is_pure = False
        else:
            sys.stderr.write("setup.py: no %s: a pure wheel without the engine (build with .ci/build_wheel.sh)\n" % BINARY)

    def get_tag(self):
        if not self.has_binary:
            return super().get_tag()
        arch = elf_arch(BINARY)
        want = os.environ.get("SANDBOX_AGENT_WHEEL_ARCH", "")
        if want and want != arch:
            raise SystemExit("setup.py: %s is an %s binary, SANDBOX_AGENT_WHEEL_ARCH says %s" % (BINARY, arch, want))
        plat = "manylinux_2_17_{0}.manylinux2014_{0}.musllinux_1_1_{0}".format(arch)
        return "py3", "none", plat


if not os.path.isfile(os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_agent", "versions.json")):
    # Without it the package cannot name an image: build with the script,
    # which copies in the catalog's.
    raise SystemExit("setup.py: sandbox_agent/versions.json is missing: build the wheel with .ci/build_wheel.sh")

setup(
    version=pep440(os.environ.get("VERSION") or "0.0.0.dev0"),
    distclass=BinaryDistribution,
    cmdclass={"bdist_wheel": PlatformWheel},
)
