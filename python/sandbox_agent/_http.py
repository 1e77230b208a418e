"""The engine's HTTP API (docs/api-http.md): requests, typed errors, server-sent events."""

import ipaddress
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from .errors import EngineError, SandboxAgentError, error_from

HTTP_TIMEOUT = 600.0  # seconds, for every request but turns and execs (which may run longer)


def parse_sse(lines: Iterable[bytes]) -> Iterator[Tuple[str, str]]:
    """Yield ``(event, data)`` for each server-sent-events message in ``lines``.

    ``lines`` are raw byte lines (an HTTP response iterates so). Comment lines
    (``: ping``) are skipped, multi-line data is joined with newlines, and an
    event without an ``event:`` field is "message". A message the stream cut
    off before its blank line is not dispatched (as the SSE spec says).
    """
    event, data = "", []  # type: str, List[str]
    for raw in lines:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                yield event or "message", "\n".join(data)
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)


def _loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Client:
    """A connection to one engine: its base URL and bearer token.

    A loopback engine is reached directly, whatever the proxy variables say
    (an HTTP proxy would not reach this machine's loopback).
    """

    def __init__(self, url: str, token: str):
        self.url = url.rstrip("/")
        self.token = token
        handlers = [urllib.request.ProxyHandler({})] if _loopback(self.url) else []
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self) -> str:  # never the token
        return "Client(%r)" % self.url

    def request(self, method: str, path: str, data: Optional[bytes] = None, ctype: Optional[str] = None,
                accept: str = "application/json", timeout: Optional[float] = HTTP_TIMEOUT) -> Any:
        """Send a request; answer the open response or raise the typed error."""
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        req.add_header("Accept", accept)
        if ctype:
            req.add_header("Content-Type", ctype)
        try:
            return self._opener.open(req, timeout=timeout)
        except urllib.error.HTTPError as e:
            raw = e.read(1 << 20)
            e.close()
            try:
                body = json.loads(raw)
                if not isinstance(body, dict):
                    raise ValueError
            except ValueError:
                body = {"error": raw.decode("utf-8", "replace").strip() or str(e.reason)}
            raise error_from(e.code, body) from None
        except urllib.error.URLError as e:
            raise EngineError("cannot reach the engine at %s: %s" % (self.url, e.reason), kind="connection") from None
        except OSError as e:  # a reset or timeout before the status line
            raise EngineError("engine at %s: %s" % (self.url, e), kind="connection") from None

    def json(self, method: str, path: str, body: Any = None, timeout: Optional[float] = HTTP_TIMEOUT) -> Any:
        data = None if body is None else json.dumps(body).encode()
        with self.request(method, path, data, "application/json" if data is not None else None,
                          timeout=timeout) as r:
            raw = r.read()
        return json.loads(raw) if raw.strip() else None

    def stream(self, method: str, path: str, body: Any, timeout: Optional[float] = None) -> Iterator[Tuple[str, Any]]:
        """Yield ``(event, decoded JSON data)`` of a server-sent-events answer."""
        with self.request(method, path, json.dumps(body).encode(), "application/json",
                          accept="text/event-stream", timeout=timeout) as r:
            for event, data in parse_sse(r):
                try:
                    yield event, json.loads(data)
                except ValueError:
                    raise SandboxAgentError("the engine sent an event that is not JSON: %.200r" % data,
                                            kind="internal") from None


def drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}
