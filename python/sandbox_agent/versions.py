"""Which image each agent CLI runs in, derived from versions.json alone.

A tag is ``{repo}:{cli}-{cli version}-{image_date}``, never ``latest``.
The repository is SANDBOX_AGENT_IMAGE_NAME (config key ``image_name``: a
private registry's mirror) when set, else versions.json's. The engine
resolves an agent's image in this order: an explicit ``image=`` > the
image name > the driver's ``default_image`` > the built-in default::

    python -c "from sandbox_agent import versions; print(versions.CLAUDE_IMAGE)"

The constants are computed when the module is imported; :func:`image`
computes afresh.
"""

import json
import os
import re
from typing import Any, Dict, Optional

from ._config import setting
from .errors import InvalidArgumentError

__all__ = ["VERSIONS", "REPO", "IMAGE_DATE", "CLIS", "image", "image_name", "resolve", "BASE_IMAGE",
           "OPENCODE_IMAGE", "CODEX_IMAGE", "CLAUDE_IMAGE", "PI_IMAGE", "DSH_IMAGE"]

_HERE = os.path.dirname(os.path.abspath(__file__))
# The wheel carries versions.json beside this module; a checkout has it in
# images/catalog/ (the engine compiles the same file in).
_CANDIDATES = [os.path.join(_HERE, "versions.json"),
               os.path.join(_HERE, "..", "..", "images", "catalog", "versions.json")]
# A repository without tag or digest (images/catalog CheckRepo).
_REPO_RE = re.compile(r"^([a-zA-Z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$")


def _load() -> Dict[str, Any]:
    for p in _CANDIDATES:
        if os.path.exists(p):
            with open(p, encoding="utf-8") as f:
                return json.load(f)
    raise ImportError("sandbox_agent: versions.json is missing (looked in %s)" % ", ".join(_CANDIDATES))


VERSIONS = _load()  # type: Dict[str, Any]
REPO = VERSIONS["repo"]  # type: str
IMAGE_DATE = VERSIONS["image_date"]  # type: str
CLIS = tuple(VERSIONS["clis"])  # type: tuple


def image_name() -> Optional[str]:
    """SANDBOX_AGENT_IMAGE_NAME (or the config file's image_name), checked; None when unset."""
    name = setting("image_name", "SANDBOX_AGENT_IMAGE_NAME")
    if name and not _REPO_RE.match(name):
        raise InvalidArgumentError("image name %r is not a repository (expected e.g. registry.example.com/team/"
                                   "sandbox-agent, without tag or digest)" % name, kind="invalid_argument")
    return name or None


def image(cli: str, repo: Optional[str] = None) -> str:
    """The tag of a CLI's image ("base" for the base image) under ``repo``
    (default: the image name when set, else versions.json's repository)."""
    repo = repo or image_name() or REPO
    if cli == "base":
        return "%s:base-%s" % (repo, IMAGE_DATE)
    spec = VERSIONS["clis"].get(cli)
    if spec is None:
        raise InvalidArgumentError("unknown CLI %r (known: %s)" % (cli, ", ".join(CLIS)), kind="invalid_argument")
    return "%s:%s-%s-%s" % (repo, cli, spec["version"], IMAGE_DATE)


def resolve(cli: str, explicit: Optional[str] = None, driver_default: Optional[str] = None) -> str:
    """The image an agent of ``cli`` runs in: explicit > image name > driver default > built-in."""
    if explicit:
        return explicit
    if image_name() and cli in VERSIONS["clis"]:
        return image(cli)
    if driver_default:
        return driver_default
    return image(cli, REPO)


BASE_IMAGE = image("base")
OPENCODE_IMAGE = image("opencode")
CODEX_IMAGE = image("codex")
CLAUDE_IMAGE = image("claude")
PI_IMAGE = image("pi")
DSH_IMAGE = image("dsh")
