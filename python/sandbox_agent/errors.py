"""The exceptions of sandbox_agent: one per kind of error the engine answers.

Every error is a :class:`SandboxAgentError`; callers branch on the subclass
(``except DriverError``) or on ``kind``, the API's error kind.
"""

from typing import Any, Dict, Optional

__all__ = [
    "SandboxAgentError", "InvalidArgumentError", "UnauthorizedError", "ForbiddenError", "NotFoundError",
    "BusyError", "ConflictError", "TooLargeError", "LimitError", "DriverError", "AgentTimeoutError",
    "UnsupportedError", "EngineUnavailableError", "EngineError", "UnsafeArchiveError", "BudgetExceededError",
    "OutputLimitError", "LostError", "TurnInterruptedError", "CheckpointTooLargeError", "error_from",
]


class SandboxAgentError(Exception):
    """An error the engine answered, or one met on the way to it.

    ``status`` is the HTTP status (None when there was no answer), ``kind``
    the API's error kind ("busy", "not_found", ...), ``message`` its
    message, ``body`` the whole JSON error and ``result`` the turn result
    when a turn failed (else None).
    """

    def __init__(self, message: str, status: Optional[int] = None, kind: Optional[str] = None,
                 body: Optional[Dict[str, Any]] = None):
        super().__init__("%s (%s%s)" % (message, kind or "error", ", HTTP %d" % status if status else ""))
        self.message, self.status, self.kind = message, status, kind
        self.body = body or {}
        self.result = self.body.get("turn")  # type: Optional[Dict[str, Any]]


class InvalidArgumentError(SandboxAgentError, ValueError):
    """400: the request is wrong (a bad option, path, size, ...)."""


class UnauthorizedError(SandboxAgentError):
    """401: missing or wrong token."""


class ForbiddenError(SandboxAgentError, PermissionError):
    """403: the token may not do this (a tenant asking for an admin's option)."""


class NotFoundError(SandboxAgentError):
    """404: unknown agent, session, checkpoint or path."""


class BusyError(SandboxAgentError):
    """409 (kind "busy"): a turn is already running on this agent."""


class ConflictError(SandboxAgentError):
    """409 (kind "conflict"): the agent's state does not allow this now."""


class TooLargeError(SandboxAgentError):
    """413: a body, file or output past its limit."""


class LimitError(SandboxAgentError):
    """429: too many agents or turns at once."""


class BudgetExceededError(SandboxAgentError):
    """402: the agent's or the tenant's budget (tokens, dollars) is spent."""


class OutputLimitError(SandboxAgentError):
    """The CLI's output ran past its limit; the turn was stopped."""


class LostError(SandboxAgentError):
    """The agent's sandbox is gone (the engine restarted and found it removed); only close() is left."""


class TurnInterruptedError(SandboxAgentError):
    """The turn was cut off (the engine shut down or the turn was aborted)."""


class DriverError(SandboxAgentError):
    """422: the agent CLI failed (a bad key, a crash); ``driver`` and ``exit_code`` say which."""

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.driver = self.body.get("driver")  # type: Optional[str]
        self.exit_code = self.body.get("exit_code")  # type: Optional[int]


class AgentTimeoutError(SandboxAgentError, TimeoutError):
    """504: the turn ran past its timeout (its process tree was killed)."""


class UnsupportedError(SandboxAgentError):
    """501: the driver or engine cannot do this."""


class EngineUnavailableError(SandboxAgentError):
    """503: the container engine (Docker, Podman, Kubernetes) is not reachable."""


class EngineError(SandboxAgentError):
    """The sandbox-agent engine could not be started or reached."""


class CheckpointTooLargeError(SandboxAgentError):
    """The sandbox is larger than a checkpoint may be; none was made."""


class UnsafeArchiveError(SandboxAgentError):
    """A file brought out of the sandbox was refused (an absolute path, ``..``, a link)."""


_KINDS = {
    "invalid_argument": InvalidArgumentError, "unauthorized": UnauthorizedError, "forbidden": ForbiddenError,
    "not_found": NotFoundError, "busy": BusyError, "conflict": ConflictError, "too_large": TooLargeError,
    "limit": LimitError, "budget_exceeded": BudgetExceededError,
    "output_limit": OutputLimitError, "lost": LostError, "interrupted": TurnInterruptedError,
    "checkpoint_too_large": CheckpointTooLargeError, "unsafe_archive": UnsafeArchiveError, "driver_error": DriverError, "timeout": AgentTimeoutError,
    "unsupported": UnsupportedError, "engine_unavailable": EngineUnavailableError,
}
_STATUS_KINDS = {400: "invalid_argument", 401: "unauthorized", 402: "budget_exceeded", 403: "forbidden", 404: "not_found", 409: "busy",
                 413: "too_large", 422: "driver_error", 429: "limit", 501: "unsupported",
                 503: "engine_unavailable", 504: "timeout", 500: "internal"}
_KIND_STATUS = dict({v: k for k, v in _STATUS_KINDS.items()}, interrupted=503, conflict=409, budget_exceeded=402,
                    checkpoint_too_large=422, output_limit=422)


def error_from(status: Optional[int], body: Dict[str, Any]) -> SandboxAgentError:
    """The typed error for an error body ``{"error": ..., "kind": ...}``."""
    kind = body.get("kind") or _STATUS_KINDS.get(status or 0, "internal")
    cls = _KINDS.get(kind, SandboxAgentError)
    return cls(str(body.get("error") or "HTTP %s" % status), status or _KIND_STATUS.get(kind), kind, body)
