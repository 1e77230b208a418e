"""SandboxAgent: one agent CLI in its own disposable, hardened container."""

import base64
import http.client
import json
import os
import shutil
import stat
import tarfile
import tempfile
import urllib.parse
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Union

from . import audit as _audit  # the parameter "audit" shadows the module
from ._config import setting
from ._http import HTTP_TIMEOUT, Client, drop_none, read_limited
from .drivers import BaseDriver, driver_for
from .engine import Engine, engine as private_engine
from .errors import (EngineError, InvalidArgumentError, NotFoundError, SandboxAgentError, TooLargeError, UnsafeArchiveError,
                     error_from)
from .versions import image_name

__all__ = ["SandboxAgent", "Container", "ExecResult", "Event", "Fork"]

PathLike = Union[str, "os.PathLike[str]"]


class Event(dict):
    """A normalized event (docs/events.md): ``kind``, ``payload``, ``seq``, ``time``, ``line``, ...

    A dict, with its keys also readable as attributes (``event.kind``).
    """

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class ExecResult(NamedTuple):
    """What ``Container.run`` answers."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    duration_ms: int


class Fork(NamedTuple):
    """What ``SandboxAgent.fork_agents`` answers: the branches and their checkpoint."""

    agents: List["SandboxAgent"]
    checkpoint: Dict[str, Any]


class Container:
    """The agent's sandbox: run commands in it, move files in and out.

    Everything that comes out is treated as hostile: archives are checked
    entry by entry (no absolute paths, no ``..``, no links or devices) and
    written under a temporary name beside the destination, renamed into
    place only when complete.
    """

    def __init__(self, agent: "SandboxAgent"):
        self._agent = agent

    @property
    def name(self) -> Optional[str]:
        """The container's name on the engine."""
        return self._agent.info.get("container")

    def exec(self, cmd: List[str], timeout: Optional[float] = None) -> "tuple[int, str]":
        """Run ``cmd`` (an argv list); answer ``(exit code, output)``: its stdout then its stderr."""
        r = self.run(cmd, timeout=timeout)
        return r.exit_code, r.stdout + r.stderr

    def run(self, cmd: List[str], *, timeout: Optional[float] = None, env: Optional[Dict[str, str]] = None,
            workdir: Optional[str] = None) -> ExecResult:
        """Run ``cmd`` with stdout and stderr apart, a timeout in seconds (its process tree is
        killed; ``timed_out`` says so; exit code 124), environment and working directory."""
        if isinstance(cmd, (str, bytes)):
            raise InvalidArgumentError("cmd: want an argv list such as ['sh', '-c', '...'], not a string",
                                       kind="invalid_argument")
        body = drop_none({"cmd": list(cmd), "timeout": timeout, "env": env, "workdir": workdir})
        # The engine answers at the end: wait the command's timeout and a margin.
        r = self._agent._client.json("POST", self._agent._path("exec"), body, timeout=_grace(timeout))
        return ExecResult(int(r.get("exit_code", -1)), r.get("stdout", ""), r.get("stderr", ""),
                          bool(r.get("timed_out")), bool(r.get("truncated")), int(r.get("duration_ms", 0)))

    def write_file(self, path: str, data: Union[bytes, str]) -> None:
        """Write ``data`` (bytes, or text as UTF-8) to the file ``path`` in the sandbox."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        self._agent._client.request("PUT", self._agent._path("files", path=path), bytes(data),
                                    "application/octet-stream").close()

    def read_file(self, path: str, max_bytes: int = 100 << 20) -> bytes:
        """The bytes of the file ``path`` in the sandbox (at most ``max_bytes``: TooLargeError past it)."""
        with self._agent._client.request("GET", self._agent._path("files", path=path),
                                         accept="application/x-tar") as r:
            try:
                with tarfile.open(fileobj=_Capped(r, max_bytes + _TAR_SLACK), mode="r|") as tf:
                    for m in tf:
                        if not m.isfile():
                            raise UnsafeArchiveError("%s is not a regular file" % path, kind="unsafe_archive")
                        if m.size > max_bytes:
                            raise TooLargeError("%s is %d bytes, more than %d" % (path, m.size, max_bytes),
                                                kind="too_large")
                        f = tf.extractfile(m)
                        assert f is not None
                        return f.read()
            except (tarfile.TarError, EOFError) as e:
                raise UnsafeArchiveError("%s: the engine's archive is broken: %s" % (path, e),
                                         kind="unsafe_archive") from None
        raise NotFoundError("%s: no file in the answer" % path, kind="not_found")

    def upload(self, local_path: PathLike, dest: str) -> None:
        """Copy a local file to the file ``dest``, or a directory's contents into the directory ``dest``.

        Symbolic links and special files of a directory are left out; hard
        links go as copies. The archive is built in a temporary file.
        """
        local_path = os.fspath(local_path)
        if not os.path.isdir(local_path):
            with open(local_path, "rb") as f:
                self.write_file(dest, f.read())
            return
        with tempfile.TemporaryFile() as buf:
            with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
                for top, dirs, files in os.walk(local_path):
                    dirs.sort()
                    rel = os.path.relpath(top, local_path)
                    for d in list(dirs):
                        p = os.path.join(top, d)
                        if os.path.islink(p):
                            dirs.remove(d)  # not followed, not sent
                            continue
                        ti = tarfile.TarInfo(os.path.normpath(os.path.join(rel, d)))
                        ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, int(os.lstat(p).st_mtime)
                        tf.addfile(ti)
                    for name in sorted(files):
                        p = os.path.join(top, name)
                        st = os.lstat(p)
                        if not stat.S_ISREG(st.st_mode):
                            continue
                        ti = tarfile.TarInfo(os.path.normpath(os.path.join(rel, name)))
                        ti.size, ti.mode, ti.mtime = st.st_size, st.st_mode & 0o777, int(st.st_mtime)
                        with open(p, "rb") as f:
                            tf.addfile(ti, f)
            size = buf.tell()
            buf.seek(0)
            req_path = self._agent._path("files", path=dest)
            self._agent._client.request("PUT", req_path, buf, "application/x-tar",  # type: ignore[arg-type]
                                        headers={"Content-Length": str(size)}).close()

    def download(self, src: str, dest: PathLike, *, max_bytes: Optional[int] = None,
                 max_entries: Optional[int] = None) -> str:
        """Bring the file or directory ``src`` home to ``dest``; answer the path written.

        A file lands at ``dest`` (inside it when ``dest`` is a directory);
        a directory becomes ``dest`` (replacing nothing: an existing ``dest``
        directory gets ``src``'s name inside it). Only regular files and
        directories are taken, with plain permissions (0644, 0755); ``skipped`` on the
        agent says how many entries the engine left out. ``max_bytes`` and
        ``max_entries`` bound what is written (default: the config keys
        ``max_download_bytes`` / ``max_download_entries``, else 1 GiB and
        100,000 entries, as the engine's): past them, TooLargeError and
        nothing is left.
        """
        dest = os.path.abspath(os.fspath(dest))
        parent = dest if os.path.isdir(dest) else os.path.dirname(dest)
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".sandbox-agent-download-", dir=parent)
        try:
            names = self._extract(src, tmp, _limit(max_bytes, "max_download_bytes", 1 << 30),
                                  _limit(max_entries, "max_download_entries", 100_000))
            tops = {n.split("/")[0] for n in names}
            if len(tops) != 1:
                raise UnsafeArchiveError("%s: expected one file or directory, got %d entries at the top"
                                         % (src, len(tops)), kind="unsafe_archive")
            top = os.path.join(tmp, tops.pop())
            target = os.path.join(dest, os.path.basename(top)) if os.path.isdir(dest) else dest
            if os.path.isdir(top) and os.path.lexists(target):
                raise InvalidArgumentError("%s exists: not replacing it with the directory %s" % (target, src),
                                           kind="invalid_argument")
            try:
                os.replace(top, target)
            except OSError as e:
                raise InvalidArgumentError("cannot put %s at %s: %s" % (src, target, e.strerror),
                                           kind="invalid_argument") from None
            return target
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _extract(self, src: str, into: str, max_bytes: int, max_entries: int) -> List[str]:
        # Written by hand, not by tarfile's extract: only directories (0755)
        # and new regular files (0644, O_EXCL, no links followed), whatever
        # the Python, and a remote engine is not trusted to have bounded
        # the archive (its headers included: the stream is capped).
        names = []  # type: List[str]
        total = 0
        with self._agent._client.request("GET", self._agent._path("files", path=src),
                                         accept="application/x-tar") as r:
            self._agent.last_skipped = int(r.headers.get("X-Sandbox-Agent-Skipped") or 0)
            try:
                with tarfile.open(fileobj=_Capped(r, max_bytes + _TAR_SLACK + 3072 * max_entries), mode="r|") as tf:
                    for m in tf:
                        parts = [x for x in m.name.replace("\\", "/").split("/") if x not in ("", ".")]
                        if m.name.startswith("/") or ".." in parts or not (m.isfile() or m.isdir()):
                            raise UnsafeArchiveError("unsafe archive entry %r" % m.name, kind="unsafe_archive")
                        if not parts:
                            continue  # "." itself
                        total += m.size if m.isfile() else 0
                        if len(names) >= max_entries or total > max_bytes:
                            raise TooLargeError("%s: more than %d entries or %d bytes" % (src, max_entries, max_bytes),
                                                kind="too_large")
                        target = os.path.join(into, *parts)
                        try:
                            if m.isdir():
                                os.makedirs(target, 0o755, exist_ok=True)
                            else:
                                os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
                                f = tf.extractfile(m)
                                assert f is not None
                                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                                with os.fdopen(fd, "wb") as out:
                                    shutil.copyfileobj(f, out, 1 << 20)
                        except OSError as e:
                            raise UnsafeArchiveError("archive entry %r: %s" % (m.name, e.strerror),
                                                     kind="unsafe_archive") from None
                        names.append("/".join(parts))
            except (tarfile.TarError, EOFError) as e:
                raise UnsafeArchiveError("%s: the engine's archive is broken: %s" % (src, e),
                                         kind="unsafe_archive") from None
        if not names:
            raise NotFoundError("%s: nothing to download" % src, kind="not_found")
        return names


# What a tar stream carries beyond its files' bytes: the end blocks, and per
# entry (3 KiB) a header, a PAX header for a long or non-ASCII name, padding.
_TAR_SLACK = 1 << 20


class _Capped:
    """A response read at most ``limit`` bytes: past it TooLargeError (a tar header
    of a hostile size included); a broken connection is an EngineError."""

    def __init__(self, r: Any, limit: int):
        self._r, self._left = r, limit

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self._left + 1
        try:
            data = self._r.read(min(n, self._left + 1))
        except (OSError, http.client.HTTPException) as e:
            raise EngineError("download: %s" % e, kind="connection") from None
        self._left -= len(data)
        if self._left < 0:
            raise TooLargeError("download: the archive is larger than its limit", kind="too_large")
        return data


class SandboxAgent:
    """One agent CLI in a disposable, hardened container; use it as a context manager::

        from sandbox_agent import SandboxAgent, OpenCodeDriver

        driver = OpenCodeDriver(provider="zhipuai-coding-plan", api_key=API_KEY)
        with SandboxAgent(driver=driver, model="zhipuai-coding-plan/glm-5.3") as agent:
            print(agent.ask("write a quicksort in Python, save it to /tmp/qs.py"))
            code, out = agent.container.exec(["python3", "/tmp/qs.py"])
            agent.container.download("/tmp/qs.py", "./qs.py")
        # the container is gone

    ``driver`` is a driver object (``ClaudeDriver()``, ...) or a CLI name.
    ``model`` is the CLI's model name; ``image`` an image of your own
    (pinned: a tag other than latest); ``audit=False`` writes no audit
    trail (see :mod:`sandbox_agent.audit`); ``timeout`` the default turn
    timeout in seconds; ``fake_model_script`` a fake-model script (a dict,
    or the path of a JSON file): the agent talks to a scripted model and
    needs no key. ``keepalive`` (seconds: the sandbox ends itself after
    that long unused), ``memory`` ("2g"), ``pids``, ``disk``, ``egress``
    ("model", "none", "allowlist", "open"), ``allow_hosts``, ``env``,
    ``oci_runtime`` ("runsc"), ``budget``, ``checkpoint``, ``repo`` are the
    engine's options (docs/api-http.md).

    The agent runs on this process's private engine, started on first use
    (:mod:`sandbox_agent.engine`), or on the engine at ``url`` with ``token``
    (else $SANDBOX_AGENT_URL / $SANDBOX_AGENT_TOKEN).
    """

    def __init__(self, driver: Any, model: Optional[str] = None, *, image: Optional[str] = None,
                 audit: bool = True, timeout: Optional[float] = None, fake_model_script: Any = None,
                 keepalive: Optional[float] = None, memory: Optional[str] = None, pids: Optional[int] = None,
                 disk: Optional[str] = None, egress: Optional[str] = None, allow_hosts: Optional[List[str]] = None,
                 env: Optional[Dict[str, str]] = None, oci_runtime: Optional[str] = None,
                 budget: Optional[Dict[str, Any]] = None, checkpoint: Optional[str] = None,
                 repo: Optional[Dict[str, Any]] = None, url: Optional[str] = None, token: Optional[str] = None,
                 engine: Optional[Engine] = None):
        self.driver = driver_for(driver)  # type: BaseDriver
        self.model, self.timeout, self.audit = model, timeout, audit
        self.engine = _engine_for(engine, url, token)
        self._client = self.engine.client  # type: Client
        self.last_result = None  # type: Optional[Dict[str, Any]]
        self.last_skipped = 0
        self.id = None  # type: Optional[str]
        self.info = {}  # type: Dict[str, Any]
        self.container = Container(self)
        if isinstance(fake_model_script, (str, os.PathLike)):
            with open(fake_model_script, encoding="utf-8") as f:
                fake_model_script = json.load(f)
        if image is None and self.driver.default_image and not image_name():
            image = self.driver.default_image
        body = {"driver": self.driver.name, "model": model, "image": image,
                "fake_model_script": fake_model_script, "egress": egress, "allow_hosts": allow_hosts, "env": env,
                "keepalive": keepalive, "memory": memory, "pids": pids, "disk": disk, "oci_runtime": oci_runtime,
                "budget": budget, "checkpoint": checkpoint}
        if fake_model_script is None:
            body["endpoint"] = self.driver.endpoint()
        if not audit:
            body["audit"] = False
        elif self.engine.private:
            body["audit_root"] = _audit.root()
        if repo is not None:
            repo = dict(repo)
            if repo.get("path") is not None and self.engine.private:
                repo["path"] = os.path.abspath(os.fspath(repo["path"]))
            if isinstance(repo.get("bundle"), (bytes, bytearray)):
                repo["bundle"] = base64.b64encode(repo["bundle"]).decode("ascii")
            body["repo"] = repo
        self.info = self._client.json("POST", "/v1/agents", drop_none(body), timeout=None)
        self.id = self.info["id"]

    @classmethod
    def attach(cls, agent_id: str, *, url: Optional[str] = None, token: Optional[str] = None,
               engine: Optional[Engine] = None, timeout: Optional[float] = None) -> "SandboxAgent":
        """An agent that already exists on the engine (nothing is created)."""
        self = cls.__new__(cls)
        self.engine = _engine_for(engine, url, token)
        self._client = self.engine.client
        self.timeout, self.id, self.info, self.model, self.audit = timeout, agent_id, {"id": agent_id}, None, True
        self.driver = None  # type: ignore[assignment]
        self.last_result, self.last_skipped = None, 0
        self.container = Container(self)
        return self

    def __repr__(self) -> str:
        return "SandboxAgent(%s, id=%r)" % (self.driver.name if self.driver else "?", self.id)

    def _path(self, *parts: str, **query: str) -> str:
        if self.id is None:
            raise SandboxAgentError("the agent is closed", kind="closed")
        p = "/v1/agents/" + "/".join(urllib.parse.quote(x, safe="") for x in (self.id,) + parts)
        return p + ("?" + urllib.parse.urlencode(query) if query else "")

    def _turn_body(self, prompt: str, timeout: Optional[float]) -> Dict[str, Any]:
        t = self.timeout if timeout is None else timeout
        return drop_none({"prompt": prompt, "timeout": t})

    # --- turns ---

    def turn(self, prompt: str, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Run one turn; answer its whole result (reply, events, session_id, usage, duration_ms, ...)."""
        body = self._turn_body(prompt, timeout)
        self.last_result = self._client.json("POST", self._path("turns"), body, timeout=_grace(body.get("timeout")))
        return self.last_result

    def ask(self, prompt: str, timeout: Optional[float] = None) -> str:
        """Run one turn, continuing the agent's session; answer the reply text."""
        return self.turn(prompt, timeout)["reply"]

    def stream(self, prompt: str, timeout: Optional[float] = None) -> Iterator[Event]:
        """Run one turn, yielding each normalized :class:`Event` as it happens.

        The turn's result is the generator's return value and ``last_result``;
        a failed turn raises its typed error (with ``.result``) at the end.
        Closing the generator early aborts the turn (the session is kept).
        """
        self.last_result = None
        body = self._turn_body(prompt, timeout)
        for event, data in self._client.stream("POST", self._path("turns"), body, timeout=_grace(body.get("timeout"))):
            if event == "event":
                yield Event(data)
            elif event == "result":
                self.last_result = data
                if data.get("error"):
                    raise error_from(None, {"error": data["error"], "kind": data.get("kind"), "turn": data,
                                            "driver": data.get("driver"), "exit_code": data.get("exit_code")})
                return data
        raise SandboxAgentError("the event stream ended without a result", kind="internal")

    # --- sessions ---

    @property
    def session_id(self) -> Optional[str]:
        """The session the next turn continues (None before the first turn or after ``new_session``)."""
        return self.get().get("session_id") or None

    def sessions(self) -> Dict[str, Any]:
        """``{"current": ID, "sessions": [{id, title, path, updated}, ...]}``."""
        return self._client.json("GET", self._path("sessions"))

    def use_session(self, session_id: str) -> None:
        """Make the next turn continue ``session_id`` ("" starts a new session)."""
        self._client.json("PUT", self._path("session"), {"session_id": session_id})

    def new_session(self) -> None:
        """Make the next turn start a new session."""
        self.use_session("")

    def fork(self, session_id: Optional[str] = None) -> str:
        """Fork a session (default: the current one) in this sandbox; answer the fork's id."""
        return self._client.json("POST", self._path("sessions", session_id or "current", "fork"))["session_id"]

    def dump_session(self, session_id: Optional[str] = None) -> Dict[str, Any]:
        """A session's files, to load into another agent of the same CLI (``load_session``)."""
        return self._client.json("GET", self._path("sessions", session_id or "current"))

    def load_session(self, dump: Dict[str, Any]) -> str:
        """Load a ``dump_session`` into this sandbox; answer its session id (continue it with ``use_session``)."""
        return self._client.json("POST", self._path("sessions"), dump)["session_id"]

    def delete_session(self, session_id: str) -> None:
        """Delete a session's files from the sandbox."""
        self._client.request("DELETE", self._path("sessions", session_id)).close()

    def install_rules(self, rules: str) -> None:
        """Standing instructions the CLI reads when a session starts (AGENTS.md, CLAUDE.md, ...)."""
        self._client.json("PUT", self._path("rules"), {"rules": rules})

    def install_skill(self, name: str, files: Dict[str, Union[str, bytes]]) -> None:
        """A skill (``files`` must hold "SKILL.md"), read when a session starts."""
        out = {}
        for p, v in files.items():
            out[p] = v.decode("utf-8") if isinstance(v, bytes) else v
        self._client.json("POST", self._path("skills"), {"name": name, "files": out})

    # --- the agent ---

    def get(self) -> Dict[str, Any]:
        """The agent as the engine has it (id, driver, session_id, status, turns, container, ...)."""
        self.info = self._client.json("GET", self._path())
        return self.info

    def changes(self, format: Optional[str] = None) -> Any:
        """Bring home what the agent did in its repository (an agent created with ``repo``):
        the sync (branch, commits, ...), or with ``format="bundle"`` a git bundle (bytes)."""
        if format is None or format == "json":
            return self._client.json("GET", self._path("changes"), timeout=None)
        with self._client.request("GET", self._path("changes", format=format), accept="application/x-git-bundle",
                                  timeout=None) as r:
            return read_limited(r, 1 << 30, "the bundle")

    def checkpoint(self, name: Optional[str] = None) -> Dict[str, Any]:
        """Keep the whole sandbox (files and session); start agents on it with ``checkpoint=id``."""
        return self._client.json("POST", self._path("checkpoints"), {"name": name} if name else {}, timeout=None)

    def fork_agents(self, count: int = 1) -> Fork:
        """Checkpoint this agent and start ``count`` agents on the checkpoint."""
        res = self._client.json("POST", self._path("fork"), {"count": count}, timeout=None)
        out = []
        for info in res["agents"]:
            branch = SandboxAgent.attach(info["id"], engine=self.engine, timeout=self.timeout)
            branch.info, branch.driver, branch.model = info, self.driver, self.model
            out.append(branch)
        return Fork(out, res["checkpoint"])

    def close(self) -> None:
        """Destroy the agent and its container (idempotent)."""
        if self.id is None:
            return
        try:
            self._client.request("DELETE", self._path(), timeout=HTTP_TIMEOUT).close()
        except NotFoundError:
            pass
        self.id = None

    def __enter__(self) -> "SandboxAgent":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _grace(timeout: Optional[float]) -> Optional[float]:
    """How long to wait for an answer that comes after ``timeout`` seconds of work (None: unbounded)."""
    return None if timeout is None else float(timeout) + 120.0


def _limit(given: Optional[int], key: str, default: int) -> int:
    n = given
    if n is None:
        raw = setting(key, "SANDBOX_AGENT_" + key.upper())
        try:
            n = int(raw) if raw else default
        except ValueError:
            raise InvalidArgumentError("%s %r: not an integer" % (key, raw), kind="invalid_argument") from None
    if n < 1:
        raise InvalidArgumentError("%s %d: want 1 or more" % (key, n), kind="invalid_argument")
    return n


def _engine_for(engine: Optional[Engine], url: Optional[str], token: Optional[str]) -> Engine:
    if engine is not None:
        return engine
    url = url or os.environ.get("SANDBOX_AGENT_URL")
    if url:
        token = token or os.environ.get("SANDBOX_AGENT_TOKEN") or ""
        if not token:
            raise InvalidArgumentError("a remote engine (%s) needs its token: token= or SANDBOX_AGENT_TOKEN" % url,
                                       kind="invalid_argument")
        return Engine.connect(url, token)
    return private_engine()
