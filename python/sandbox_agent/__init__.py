"""sandbox-agent: run LLM coding-agent CLIs (opencode, codex, claude, pi, dsh) in disposable,
hardened containers, and bring their output home safely.

::

    from sandbox_agent import SandboxAgent, OpenCodeDriver

    driver = OpenCodeDriver(provider="zhipuai-coding-plan", api_key=API_KEY)
    with SandboxAgent(driver=driver, model="zhipuai-coding-plan/glm-5.3") as agent:
        print(agent.ask("write a quicksort in Python, save it to /tmp/qs.py"))
        code, out = agent.container.exec(["python3", "/tmp/qs.py"])
        agent.container.download("/tmp/qs.py", "./qs.py")
    # the container is gone

The package carries its engine (the ``sandbox-agent`` binary, in the platform
wheel), started privately on first use; the host needs only Docker (or
Podman, or a Kubernetes cluster). Standard library only. See docs/python.md.
"""

from . import audit, versions
from ._http import parse_sse
from .agent import Container, Event, ExecResult, Fork, SandboxAgent
from .drivers import BaseDriver, ClaudeDriver, CodexDriver, DshDriver, OpenCodeDriver, PiDriver
from .engine import Engine
from .errors import (AgentTimeoutError, BudgetExceededError, BusyError, CheckpointTooLargeError, ConflictError,
                     DriverError, EngineError, EngineUnavailableError, ForbiddenError, InvalidArgumentError,
                     LimitError, LostError, NotFoundError, OutputLimitError, SandboxAgentError, TooLargeError,
                     TurnInterruptedError, UnauthorizedError, UnsafeArchiveError, UnsupportedError)

__all__ = [
    "SandboxAgent", "Container", "Event", "ExecResult", "Fork", "Engine", "parse_sse", "audit", "versions",
    "BaseDriver", "OpenCodeDriver", "CodexDriver", "ClaudeDriver", "PiDriver", "DshDriver",
    "SandboxAgentError", "InvalidArgumentError", "UnauthorizedError", "ForbiddenError", "NotFoundError",
    "BusyError", "ConflictError", "TooLargeError", "LimitError", "BudgetExceededError", "DriverError",
    "AgentTimeoutError", "UnsupportedError", "EngineUnavailableError", "EngineError", "UnsafeArchiveError",
    "OutputLimitError", "LostError", "TurnInterruptedError", "CheckpointTooLargeError",
]
