"""The engine's configuration file, read the way the engine reads it (docs/config.md).

Environment variables win over the file, the file over built-in defaults.
"""

import json
import os
from typing import Any, Dict, Optional

from .errors import InvalidArgumentError


def config_path() -> str:
    """$SANDBOX_AGENT_CONFIG, else ~/.config/sandbox-agent/config.json ($XDG_CONFIG_HOME honoured)."""
    p = os.environ.get("SANDBOX_AGENT_CONFIG")
    if p:
        return p
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "sandbox-agent", "config.json")


def file_settings() -> Dict[str, Any]:
    """The configuration file's keys (none when it does not exist)."""
    path = config_path()
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise InvalidArgumentError("config file %s: %s" % (path, e), kind="invalid_argument") from None
    if not isinstance(data, dict):
        raise InvalidArgumentError("config file %s: not a JSON object" % path, kind="invalid_argument")
    return data


def setting(key: str, env: str) -> Optional[str]:
    """The value of a config key: its environment variable, else the file's, else None."""
    v = os.environ.get(env)
    if v:
        return v
    v = file_settings().get(key)
    return None if v is None else str(v)
