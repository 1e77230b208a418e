"""Where the engine writes the audit trail of each session, and for how long.

::

    from sandbox_agent import audit
    audit.AUDIT_ROOT = "/data/sandbox-audit"
    audit.RETENTION_DAYS = 30        # default 7; 0 = never prune

Set them before the first agent starts: the private engine is started
with them (the agent's audit root also goes with each agent it creates).
A day's folder ``AUDIT_ROOT/<YYYYMMDD>/<session_id>/`` holds
``events.jsonl`` (the normalized events), ``session.jsonl`` (the CLI's raw
output, byte for byte) and ``status.json`` (every turn's result).
``SandboxAgent(driver=..., audit=False)`` writes nothing.

Defaults: SANDBOX_AGENT_AUDIT_ROOT / SANDBOX_AGENT_AUDIT_RETENTION_DAYS,
else the config file's ``audit_root`` / ``audit_retention_days``, else
``$TMPDIR/sandbox-agent-<uid>`` (``/tmp`` without TMPDIR) and 7.
"""

import os

from ._config import setting
from .errors import InvalidArgumentError

__all__ = ["AUDIT_ROOT", "RETENTION_DAYS"]


def _root() -> str:
    return setting("audit_root", "SANDBOX_AGENT_AUDIT_ROOT") or os.path.join(
        os.environ.get("TMPDIR") or "/tmp", "sandbox-agent-%d" % os.getuid())


def _days() -> int:
    raw = setting("audit_retention_days", "SANDBOX_AGENT_AUDIT_RETENTION_DAYS")
    if raw is None:
        return 7
    try:
        n = int(raw)
    except ValueError:
        raise InvalidArgumentError("audit_retention_days %r: not an integer" % raw, kind="invalid_argument") from None
    if n < 0:
        raise InvalidArgumentError("audit_retention_days %d: want 0 or more" % n, kind="invalid_argument")
    return n


AUDIT_ROOT = _root()  # type: str
RETENTION_DAYS = _days()  # type: int


def root() -> str:
    """AUDIT_ROOT as an absolute path."""
    return os.path.abspath(os.path.expanduser(AUDIT_ROOT))
