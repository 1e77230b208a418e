"""A small client for the sandbox-agent HTTP API (``sandbox-agent serve``).

Only the Python standard library is used (3.9+)::

    from sandbox_agent import SandboxAgent

    with SandboxAgent("codex", fake_model_script={"responses": [{"text": "hi"}]}) as agent:
        print(agent.ask("say hi"))
        for event in agent.stream("again"):
            print(event["kind"], event["payload"].get("command", ""))
        print(agent.exec(["uname", "-a"])["stdout"])

The server is at ``url`` (default ``$SANDBOX_AGENT_URL`` or http://127.0.0.1:7860);
the token is ``token``, else ``$SANDBOX_AGENT_TOKEN``, else the contents of
``token_file`` (default ~/.config/sandbox-agent/serve-token).
"""

import base64
import io
import json
import os
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple

__all__ = [
    "SandboxAgent", "Fork", "SandboxAgentError", "BusyError", "NotFoundError", "AgentTimeoutError",
    "DriverError", "UnauthorizedError", "parse_sse",
]

DEFAULT_URL = "http://127.0.0.1:7860"
DEFAULT_TOKEN_FILE = "~/.config/sandbox-agent/serve-token"
HTTP_TIMEOUT = 600  # seconds, for every request but turns (which may run longer)


class SandboxAgentError(Exception):
    """An error the server answered (or a failed connection: status None).

    ``status`` is the HTTP status, ``kind`` the API's error kind ("busy",
    "not_found", ...), ``message`` its message, ``body`` the whole JSON error
    and ``result`` the turn result when a turn failed (else None).
    """

    def __init__(self, message: str, status: Optional[int] = None, kind: Optional[str] = None,
                 body: Optional[Dict[str, Any]] = None):
        super().__init__("%s (%s%s)" % (message, kind or "error", ", HTTP %d" % status if status else ""))
        self.message, self.status, self.kind = message, status, kind
        self.body = body or {}
        self.result = self.body.get("turn")  # type: Optional[Dict[str, Any]]


class BusyError(SandboxAgentError):
    """409: a turn is already running on this agent."""


class NotFoundError(SandboxAgentError):
    """404: unknown agent, session or path."""


class AgentTimeoutError(SandboxAgentError, TimeoutError):
    """504: the turn ran past its timeout (its process tree was killed)."""


class DriverError(SandboxAgentError):
    """422: the agent CLI reported a failure (see ``driver`` and ``exit_code``)."""

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.driver = self.body.get("driver")
        self.exit_code = self.body.get("exit_code")


class UnauthorizedError(SandboxAgentError):
    """401: missing or wrong token."""


_KINDS = {"busy": BusyError, "not_found": NotFoundError, "timeout": AgentTimeoutError,
          "driver_error": DriverError, "unauthorized": UnauthorizedError}
_STATUS_KINDS = {400: "invalid_argument", 401: "unauthorized", 404: "not_found", 409: "busy",
                 413: "too_large", 422: "driver_error", 429: "limit", 501: "unsupported",
                 503: "engine_unavailable", 504: "timeout", 500: "internal"}
_KIND_STATUS = dict({v: k for k, v in _STATUS_KINDS.items()}, interrupted=503)


def _error(status: Optional[int], body: Dict[str, Any]) -> SandboxAgentError:
    """The typed error for an error body ``{"error": ..., "kind": ...}``."""
    kind = body.get("kind") or _STATUS_KINDS.get(status or 0, "internal")
    cls = _KINDS.get(kind, SandboxAgentError)
    return cls(str(body.get("error") or "HTTP %s" % status), status or _KIND_STATUS.get(kind), kind, body)


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


class Fork(NamedTuple):
    """What ``SandboxAgent.fork_agents`` answers: the branches and their checkpoint.

    A tuple, so ``branches, checkpoint = agent.fork_agents(2)`` works too.
    """

    agents: List["SandboxAgent"]
    checkpoint: Dict[str, Any]


class SandboxAgent:
    """One agent (a sandboxed agent CLI) on a sandbox-agent server.

    The constructor creates the agent (POST /v1/agents); ``close()`` destroys
    its sandbox. ``timeout`` is the default turn timeout in seconds (None:
    the server's); ``keepalive`` is in seconds; ``memory`` like "2g";
    ``fake_model_script`` is the fake model's script as a dict (or the path
    of a JSON file holding it): the agent then needs no model key.
    ``checkpoint`` is the id of a checkpoint to start on (its files and
    session; the driver must be the checkpoint's). ``repo`` puts a git
    repository in the sandbox's working directory, a dict of the API's fields:
    ``{"path": DIR}`` (a repository on the server's host, under its
    ``serve_repo_root``) or ``{"bundle": BYTES}`` (a git bundle, as bytes or
    already base64), and optionally ``depth``, ``worktree``, ``branch``,
    ``author_name``, ``author_email``; ``changes()`` brings the agent's work home.
    """

    def __init__(self, driver: str = "codex", model: Optional[str] = None, *,
                 url: Optional[str] = None, token: Optional[str] = None, token_file: Optional[str] = None,
                 image: Optional[str] = None, fake_model_script: Any = None, egress: Optional[str] = None,
                 allow_hosts: Optional[List[str]] = None, env: Optional[Dict[str, str]] = None,
                 keepalive: Optional[float] = None, memory: Optional[str] = None, pids: Optional[int] = None,
                 timeout: Optional[float] = None, checkpoint: Optional[str] = None,
                 repo: Optional[Dict[str, Any]] = None):
        self._connect(url, token, token_file)
        self.timeout = timeout
        if isinstance(fake_model_script, (str, os.PathLike)):
            with open(fake_model_script, encoding="utf-8") as f:
                fake_model_script = json.load(f)
        body = {"driver": driver, "model": model, "image": image, "fake_model_script": fake_model_script,
                "egress": egress, "allow_hosts": allow_hosts, "env": env, "keepalive": keepalive,
                "memory": memory, "pids": pids, "checkpoint": checkpoint}
        if repo is not None:
            repo = dict(repo)
            if isinstance(repo.get("bundle"), (bytes, bytearray)):
                repo["bundle"] = base64.b64encode(repo["bundle"]).decode("ascii")
            body["repo"] = repo
        self.info = self._json("POST", "/v1/agents", {k: v for k, v in body.items() if v is not None})
        self.id = self.info["id"]  # type: Optional[str]

    @classmethod
    def attach(cls, agent_id: str, *, url: Optional[str] = None, token: Optional[str] = None,
               token_file: Optional[str] = None, timeout: Optional[float] = None) -> "SandboxAgent":
        """A client for an agent that already exists (nothing is created)."""
        self = cls.__new__(cls)
        self._connect(url, token, token_file)
        self.timeout, self.id, self.info = timeout, agent_id, {"id": agent_id}
        return self

    def _connect(self, url: Optional[str], token: Optional[str], token_file: Optional[str]) -> None:
        self.url = (url or os.environ.get("SANDBOX_AGENT_URL") or DEFAULT_URL).rstrip("/")
        token = token or os.environ.get("SANDBOX_AGENT_TOKEN")
        if not token:
            try:
                with open(os.path.expanduser(token_file or DEFAULT_TOKEN_FILE), encoding="utf-8") as f:
                    token = f.read().strip()
            except OSError:
                token = ""  # the server answers 401
        self.token = token
        self.last_result = None  # type: Optional[Dict[str, Any]]
        self.last_skipped = 0
        self.id = None

    # --- HTTP ---

    def _request(self, method: str, path: str, data: Optional[bytes] = None, ctype: Optional[str] = None,
                 accept: str = "application/json", timeout: Optional[float] = HTTP_TIMEOUT) -> Any:
        """Send a request; answer the open response or raise the typed error."""
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        req.add_header("Accept", accept)
        if ctype:
            req.add_header("Content-Type", ctype)
        try:
            return urllib.request.urlopen(req, timeout=timeout)
        except urllib.error.HTTPError as e:
            raw = e.read()
            e.close()
            try:
                body = json.loads(raw)
                if not isinstance(body, dict):
                    raise ValueError
            except ValueError:
                body = {"error": raw.decode("utf-8", "replace").strip() or e.reason}
            raise _error(e.code, body) from None
        except urllib.error.URLError as e:
            raise SandboxAgentError("cannot reach %s: %s" % (self.url, e.reason), kind="connection") from None

    def _json(self, method: str, path: str, body: Any = None, timeout: Optional[float] = HTTP_TIMEOUT) -> Any:
        data = None if body is None else json.dumps(body).encode()
        with self._request(method, path, data, "application/json" if data else None, timeout=timeout) as r:
            raw = r.read()
        return json.loads(raw) if raw.strip() else None

    def _path(self, *parts: str, **query: str) -> str:
        p = "/v1/agents/" + "/".join(urllib.parse.quote(x, safe="") for x in (self.id or "",) + parts)
        return p + ("?" + urllib.parse.urlencode(query) if query else "")

    def _turn_body(self, prompt: str, timeout: Optional[float]) -> bytes:
        t = self.timeout if timeout is None else timeout
        return json.dumps({"prompt": prompt, **({"timeout": t} if t is not None else {})}).encode()

    # --- turns ---

    def turn(self, prompt: str, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Run one turn; answer the full turn result (reply, events, session_id, ...)."""
        with self._request("POST", self._path("turns"), self._turn_body(prompt, timeout),
                           "application/json", timeout=None) as r:
            self.last_result = json.loads(r.read())
        return self.last_result

    def ask(self, prompt: str, timeout: Optional[float] = None) -> str:
        """Run one turn; answer its reply."""
        return self.turn(prompt, timeout)["reply"]

    def stream(self, prompt: str, timeout: Optional[float] = None) -> Iterator[Dict[str, Any]]:
        """Run one turn, yielding each event (a dict) as it happens.

        The turn result is the generator's return value and ``last_result``;
        a failed turn raises its typed error (with ``.result``) at the end.
        Closing the generator early aborts the turn (the session is kept).
        """
        self.last_result = None
        with self._request("POST", self._path("turns"), self._turn_body(prompt, timeout),
                           "application/json", accept="text/event-stream", timeout=None) as r:
            for event, data in parse_sse(r):
                if event == "event":
                    yield json.loads(data)
                elif event == "result":
                    result = self.last_result = json.loads(data)
                    if result.get("error"):
                        raise _error(None, {"error": result["error"], "kind": result.get("kind"), "turn": result})
                    return result
        raise SandboxAgentError("the event stream ended without a result", kind="internal")

    # --- the sandbox ---

    def exec(self, cmd: List[str], timeout: Optional[float] = None, env: Optional[Dict[str, str]] = None,
             workdir: Optional[str] = None) -> Dict[str, Any]:
        """Run ``cmd`` (argv) in the sandbox: {exit_code, stdout, stderr, timed_out, ...}."""
        body = {"cmd": list(cmd), "timeout": timeout, "env": env, "workdir": workdir}
        return self._json("POST", self._path("exec"), {k: v for k, v in body.items() if v is not None}, timeout=None)

    def download(self, path: str, dest_dir: str) -> List[str]:
        """Bring ``path`` (file or directory) into ``dest_dir``; answer the names extracted.

        Only relative regular files and directories are accepted (anything
        else raises), and tarfile's "data" filter applies when this Python has it.
        ``last_skipped`` is how many entries the server dropped.
        """
        os.makedirs(dest_dir, exist_ok=True)
        names = []
        with self._request("GET", self._path("files", path=path), accept="application/x-tar") as r:
            self.last_skipped = int(r.headers.get("X-Sandbox-Agent-Skipped") or 0)
            with tarfile.open(fileobj=r, mode="r|") as tf:
                for m in tf:
                    parts = m.name.replace("\\", "/").split("/")
                    if m.name.startswith("/") or ".." in parts or not (m.isfile() or m.isdir()):
                        raise SandboxAgentError("unsafe archive entry %r" % m.name, kind="invalid_archive")
                    if hasattr(tarfile, "data_filter"):
                        tf.extract(m, dest_dir, filter="data")
                    else:
                        m.mode &= 0o777
                        tf.extract(m, dest_dir)
                    names.append(m.name)
        return names

    def upload(self, local_path: str, dest: str) -> None:
        """Copy a local file to the file ``dest``, or a directory's contents under the directory ``dest``.

        Symbolic links and special files in a directory are left out.
        """
        if not os.path.isdir(local_path):
            with open(local_path, "rb") as f:
                data = f.read()
            self._request("PUT", self._path("files", path=dest), data, "application/octet-stream").close()
            return
        buf = io.BytesIO()
        keep = lambda ti: ti if (ti.isfile() or ti.isdir()) else None  # noqa: E731
        with tarfile.open(fileobj=buf, mode="w") as tf:
            for name in sorted(os.listdir(local_path)):
                tf.add(os.path.join(local_path, name), arcname=name, filter=keep)
        self._request("PUT", self._path("files", path=dest), buf.getvalue(), "application/x-tar").close()

    # --- sessions and the agent ---

    def get(self) -> Dict[str, Any]:
        """The agent object (id, driver, session_id, status, turns, ...)."""
        self.info = self._json("GET", self._path())
        return self.info

    def sessions(self) -> Dict[str, Any]:
        """{"current": ID, "sessions": [{id, title, path, updated}, ...]}."""
        return self._json("GET", self._path("sessions"))

    def fork(self, session_id: Optional[str] = None) -> str:
        """Fork a session (default: the current one); answer the fork's id."""
        sid = session_id or self.get().get("session_id")
        if not sid:
            raise SandboxAgentError("no session to fork yet", kind="invalid_argument")
        return self._json("POST", self._path("sessions", sid, "fork"))["session_id"]

    # --- the repository ---

    def changes(self, format: Optional[str] = None) -> Any:
        """Bring home what the agent did in its repository (an agent created with ``repo``).

        Its commits since the last call and, as one last commit, what it left
        uncommitted, become the branch ``sandbox-agent/<name>`` (or ``repo["branch"]``)
        of the repository. Answers the sync (branch, tip, base, commits, uncommitted,
        rewritten, unchanged, ...); with ``format="bundle"`` the branch since the
        repository went in as a git bundle (bytes: ``git fetch FILE BRANCH``).
        409 (kind "conflict") for an agent without a repository.
        """
        if format is None or format == "json":
            return self._json("GET", self._path("changes"), timeout=None)
        with self._request("GET", self._path("changes", format=format), accept="application/x-git-bundle",
                           timeout=None) as r:
            return r.read()

    # --- checkpoints ---

    def checkpoint(self, name: Optional[str] = None) -> Dict[str, Any]:
        """Keep the whole sandbox (files and session); answer the checkpoint (id, size, ...).

        Start agents on it with ``SandboxAgent(driver, checkpoint=id)``; it stays until
        ``delete_checkpoint``.
        """
        return self._json("POST", self._path("checkpoints"), {"name": name} if name else {})

    def fork_agents(self, count: int = 1) -> Fork:
        """Checkpoint this agent and start ``count`` agents on the checkpoint.

        Answers a ``Fork``: ``agents``, a client of each branch (close them as any
        agent), and ``checkpoint``, the checkpoint they started on (a dict as
        ``checkpoint()`` answers), which stays until ``delete_checkpoint`` (refused
        with 409 while a branch runs on its image).
        """
        res = self._json("POST", self._path("fork"), {"count": count})
        out = []
        for info in res["agents"]:
            branch = SandboxAgent.attach(info["id"], url=self.url, token=self.token, timeout=self.timeout)
            branch.info = info
            out.append(branch)
        return Fork(out, res["checkpoint"])

    def _checkpoint_path(self, checkpoint_id: str) -> str:
        return "/v1/checkpoints/" + urllib.parse.quote(checkpoint_id, safe="")

    def list_checkpoints(self) -> List[Dict[str, Any]]:
        """The checkpoints of the token's tenant (the admin's token: every tenant's), oldest first.

        Needs no agent: ``SandboxAgent.attach("", ...)`` is a client for this and the two below.
        """
        return self._json("GET", "/v1/checkpoints")["checkpoints"]

    def get_checkpoint(self, checkpoint_id: str) -> Dict[str, Any]:
        """One checkpoint (NotFoundError when unknown or another tenant's)."""
        return self._json("GET", self._checkpoint_path(checkpoint_id))

    def delete_checkpoint(self, checkpoint_id: str) -> None:
        """Remove a checkpoint: its image or archive, and its record.

        409 (kind "conflict") while an agent runs on its image: delete the agents first.
        """
        self._request("DELETE", self._checkpoint_path(checkpoint_id)).close()

    def use_session(self, session_id: str) -> None:
        """Make the next turn continue ``session_id`` ("" starts a new session)."""
        self._request("PUT", self._path("session"), json.dumps({"session_id": session_id}).encode(),
                      "application/json").close()

    def close(self) -> None:
        """Destroy the agent and its sandbox (idempotent)."""
        if self.id is None:
            return
        try:
            self._request("DELETE", self._path()).close()
        except NotFoundError:
            pass
        self.id = None

    def __enter__(self) -> "SandboxAgent":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
