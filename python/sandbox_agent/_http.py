"""The engine's HTTP API (docs/api-http.md): requests, typed errors, server-sent events."""

import http.client
import ipaddress
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from .errors import EngineError, SandboxAgentError, TooLargeError, error_from

HTTP_TIMEOUT = 600.0  # seconds, for every request but turns and execs (which may run longer)
# An answer is hostile input when the engine is remote: bounded.
MAX_JSON = 64 << 20  # bytes of one JSON answer (a turn's result with its events)
MAX_LINE = 16 << 20  # bytes of one line of an event stream


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """The engine never redirects: one that does is not followed (the token would go along)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        fp.close()
        raise EngineError("the engine at %s answered a redirect (%d) to %s: not followed"
                          % (req.full_url, code, newurl), status=code, kind="redirect")


def read_limited(r: Any, limit: int, what: str) -> bytes:
    """All of a response's body, at most ``limit`` bytes (TooLargeError past it)."""
    # In pieces: a read of limit+1 bytes would allocate them all at once
    # on older Pythons, whatever the answer's size.
    parts, n = [], 0  # type: List[bytes], int
    while True:
        try:
            piece = r.read(min(1 << 20, limit + 1 - n))
        except (OSError, http.client.HTTPException) as e:
            raise EngineError("reading %s: %s" % (what, e), kind="connection") from None
        if not piece:
            return b"".join(parts)
        parts.append(piece)
        n += len(piece)
        if n > limit:
            raise TooLargeError("%s: more than %d bytes" % (what, limit), kind="too_large")


def _lines(r: Any) -> Iterator[bytes]:
    """The lines of an event stream, each at most MAX_LINE bytes; typed errors on a broken stream."""
    while True:
        try:
            line = r.readline(MAX_LINE + 1)
        except (OSError, http.client.HTTPException) as e:
            raise EngineError("the event stream broke: %s" % e, kind="connection") from None
        if not line:
            return
        if len(line) > MAX_LINE:
            raise TooLargeError("an event stream line of more than %d bytes" % MAX_LINE, kind="too_large")
        yield line


def parse_sse(lines: Iterable[bytes], max_data: int = 64 << 20) -> Iterator[Tuple[str, str]]:
    """Yield ``(event, data)`` for each server-sent-events message in ``lines``.

    ``lines`` are raw byte lines (an HTTP response iterates so). Comment lines
    (``: ping``) are skipped, multi-line data is joined with newlines, and an
    event without an ``event:`` field is "message". A message the stream cut
    off before its blank line is not dispatched (as the SSE spec says). A
    message of more than ``max_data`` bytes of data is a TooLargeError.
    """
    event, data, size = "", [], 0  # type: str, List[str], int
    for raw in lines:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                yield event or "message", "\n".join(data)
            event, data, size = "", [], 0
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            event = value
        elif field == "data":
            size += len(value) + 1
            if size > max_data:
                raise TooLargeError("an event of more than %d bytes" % max_data, kind="too_large")
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
        handlers = [_NoRedirect()]  # type: List[Any]
        if _loopback(self.url):
            handlers.append(urllib.request.ProxyHandler({}))
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self) -> str:  # never the token
        return "Client(%r)" % self.url

    def request(self, method: str, path: str, data: Any = None, ctype: Optional[str] = None,
                accept: str = "application/json", timeout: Optional[float] = HTTP_TIMEOUT,
                headers: Optional[Dict[str, str]] = None) -> Any:
        """Send a request (``data``: bytes, or a file with its Content-Length in ``headers``);
        answer the open response or raise the typed error."""
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        req.add_unredirected_header("Authorization", "Bearer " + self.token)
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
        except (OSError, http.client.HTTPException) as e:  # a reset or timeout before the status line
            raise EngineError("engine at %s: %s" % (self.url, e), kind="connection") from None

    def json(self, method: str, path: str, body: Any = None, timeout: Optional[float] = HTTP_TIMEOUT) -> Any:
        data = None if body is None else json.dumps(body).encode()
        with self.request(method, path, data, "application/json" if data is not None else None,
                          timeout=timeout) as r:
            raw = read_limited(r, MAX_JSON, "the answer to %s %s" % (method, path))
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise EngineError("the answer to %s %s is not JSON: %.200r" % (method, path, raw), kind="internal") from None

    def stream(self, method: str, path: str, body: Any, timeout: Optional[float] = None
               ) -> Iterator[Tuple[str, Any]]:
        """Yield ``(event, decoded JSON data)`` of a server-sent-events answer.

        ``timeout`` bounds a silence between two bytes (a turn's stream is
        silent while its CLI works: the turn's timeout and a margin).
        """
        with self.request(method, path, json.dumps(body).encode(), "application/json",
                          accept="text/event-stream", timeout=timeout) as r:
            for event, data in parse_sse(_lines(r), MAX_JSON):
                try:
                    yield event, json.loads(data)
                except ValueError:
                    raise SandboxAgentError("the engine sent an event that is not JSON: %.200r" % data,
                                            kind="internal") from None


def drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}
