"""The agent CLIs, one class each, and where their model is.

A driver names the CLI and, optionally, the model endpoint its agents
use: ``provider`` (opencode's provider id), ``api_key`` and ``base_url``.
The key stays on the host: the engine keeps it in memory and the sandbox
only ever sees a placeholder (the model proxy adds the key on the way
out). Without a key, the engine's own configuration decides (for
opencode ZHIPUAI_CODING_TOKEN; the others go through the gateway,
GATEWAY_URL / GATEWAY_KEY); ``SandboxAgent(fake_model_script=...)`` needs
none at all.

``default_image`` is the image its agents run in unless ``image=`` or
SANDBOX_AGENT_IMAGE_NAME says otherwise.
"""

from typing import Any, Dict, Optional

__all__ = ["BaseDriver", "OpenCodeDriver", "CodexDriver", "ClaudeDriver", "PiDriver", "DshDriver", "driver_for"]


class BaseDriver:
    """An agent CLI. Subclasses set ``name``; see the module's text."""

    name = ""  # type: str

    def __init__(self, *, api_key: Optional[str] = None, base_url: Optional[str] = None,
                 provider: Optional[str] = None, default_image: Optional[str] = None):
        if not self.name:
            raise TypeError("BaseDriver is abstract: use OpenCodeDriver, CodexDriver, ClaudeDriver, PiDriver "
                            "or DshDriver")
        self.api_key, self.base_url, self.provider = api_key, base_url, provider
        self.default_image = default_image

    def endpoint(self) -> Optional[Dict[str, Any]]:
        """The create request's ``endpoint`` (None: the engine's configured one)."""
        if not (self.api_key or self.base_url or self.provider):
            return None
        return {k: v for k, v in (("api_key", self.api_key), ("base_url", self.base_url),
                                  ("provider", self.provider)) if v}

    def __repr__(self) -> str:  # never the key
        parts = ["%s=%r" % (k, v) for k, v in (("provider", self.provider), ("base_url", self.base_url),
                                                ("default_image", self.default_image)) if v]
        if self.api_key:
            parts.append("api_key=<redacted>")
        return "%s(%s)" % (type(self).__name__, ", ".join(parts))


class OpenCodeDriver(BaseDriver):
    """opencode (``opencode run``, long-lived through its server). ``provider`` is its provider
    id, e.g. "zhipuai-coding-plan"; the model is "provider/model"."""

    name = "opencode"


class CodexDriver(BaseDriver):
    """OpenAI's codex (``codex exec``; OpenAI Responses API)."""

    name = "codex"


class ClaudeDriver(BaseDriver):
    """Anthropic's Claude Code (stream-json, long-lived; Anthropic Messages API)."""

    name = "claude"


class PiDriver(BaseDriver):
    """pi (pi-coding-agent; RPC mode, long-lived; OpenAI-compatible chat completions)."""

    name = "pi"


class DshDriver(BaseDriver):
    """DeepSeek's dsh (OpenAI-compatible chat completions)."""

    name = "dsh"


_BY_NAME = {c.name: c for c in (OpenCodeDriver, CodexDriver, ClaudeDriver, PiDriver, DshDriver)}


def driver_for(driver: Any) -> BaseDriver:
    """A driver object from a driver or a CLI name ("claude")."""
    if isinstance(driver, BaseDriver):
        return driver
    if isinstance(driver, str) and driver in _BY_NAME:
        return _BY_NAME[driver]()
    raise TypeError("driver: want a driver (OpenCodeDriver(...), ...) or one of %s, not %r"
                    % (", ".join(_BY_NAME), driver))
