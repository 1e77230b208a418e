"""The engine: the ``sandbox-agent`` binary this package carries, run as a private ``serve``.

The first agent of a Python process starts it (``engine()``); every agent
of the process shares it. It listens on a free port of the loopback with
a random token only this process knows, keeps its state in memory, and
stops when the process exits: at interpreter exit (``atexit``) and, when
the process dies without running it (SIGKILL, a crash), because its stdin
is a pipe from this process and the engine stops at the pipe's end
(``serve --stop-on-stdin-eof``). Stopping removes its sandboxes; a sandbox
the engine could not remove ends itself after its keepalive.

``Engine.connect(url, token)`` is an engine someone else runs (a remote
``sandbox-agent serve``).

The binary is ``SANDBOX_AGENT_BIN`` when set, else the one in this package
(``_bin/sandbox-agent``, in the platform wheel).
"""

import atexit
import collections
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from typing import Deque, Dict, List, Optional

from . import audit
from ._http import Client
from .errors import EngineError

__all__ = ["Engine", "engine", "binary_path", "START_TIMEOUT"]

START_TIMEOUT = 60.0  # seconds: the first start may wait for the container engine
_HERE = os.path.dirname(os.path.abspath(__file__))


def binary_path() -> str:
    """The engine binary: $SANDBOX_AGENT_BIN, else the package's own."""
    p = os.environ.get("SANDBOX_AGENT_BIN") or os.path.join(_HERE, "_bin", "sandbox-agent")
    if not os.path.isfile(p):
        raise EngineError("no engine binary at %s: install the platform wheel of sandbox-agent (pip install "
                          "sandbox-agent), set SANDBOX_AGENT_BIN, or give SandboxAgent a url= of a running "
                          "sandbox-agent serve" % p, kind="engine_missing")
    if not os.access(p, os.X_OK):
        raise EngineError("engine binary %s is not executable" % p, kind="engine_missing")
    return p


class Engine:
    """A sandbox-agent engine: its client (``url``, token) and, when private, its process."""

    def __init__(self, client: Client, process: Optional["subprocess.Popen[bytes]"] = None,
                 workdir: Optional[str] = None, started_in: float = 0.0, private: bool = False):
        self.client = client
        self.process = process
        self.workdir = workdir
        self.started_in = started_in  # seconds the start took (0: not started here)
        # A private engine is ours: an agent may name its audit root and turn
        # its audit off (the admin's options).
        self.private = private
        self._pid = os.getpid()
        self._log = collections.deque(maxlen=200)  # type: Deque[str]
        self._lock = threading.Lock()
        self._reader = None  # type: Optional[threading.Thread]

    @property
    def url(self) -> str:
        return self.client.url

    def __repr__(self) -> str:
        return "Engine(%r%s)" % (self.url, ", pid %d" % self.process.pid if self.process else "")

    @classmethod
    def connect(cls, url: str, token: str) -> "Engine":
        """An engine that runs elsewhere (``sandbox-agent serve``), with its token."""
        return cls(Client(url, token))

    @classmethod
    def start(cls, binary: Optional[str] = None, *, env: Optional[Dict[str, str]] = None,
              timeout: float = START_TIMEOUT, args: Optional[List[str]] = None) -> "Engine":
        """Start a private engine and wait until it serves.

        ``env`` is added to this process's environment for it (the audit
        settings are added from :mod:`sandbox_agent.audit`); ``args`` are
        more ``serve`` flags.
        """
        t0 = time.monotonic()
        binary = binary or binary_path()
        workdir = tempfile.mkdtemp(prefix="sandbox-agent-engine-")  # 0700
        token_file = os.path.join(workdir, "token")
        ready_file = os.path.join(workdir, "ready")
        token = secrets.token_hex(32)
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        full_env = dict(os.environ)
        full_env.update({"SANDBOX_AGENT_AUDIT_ROOT": audit.root(),
                         "SANDBOX_AGENT_AUDIT_RETENTION_DAYS": str(int(audit.RETENTION_DAYS))})
        # The private engine is this user's: a repository path may be any
        # of theirs (a shared serve confines each tenant to its folder).
        full_env.setdefault("SANDBOX_AGENT_SERVE_REPO_ROOT", "/")
        full_env.update(env or {})
        # Its own instance name: engines of other processes on this machine
        # must never take its sandboxes for theirs.
        instance = "python-%d-%s" % (os.getpid(), secrets.token_hex(4))
        cmd = [binary, "serve", "--listen", "127.0.0.1:0", "--state", ":memory:", "--token-file", token_file,
               "--ready-file", ready_file, "--instance", instance, "--stop-on-stdin-eof"] + list(args or [])
        try:
            # Its own session: a Ctrl-C in the terminal interrupts Python,
            # which then closes its agents through the engine, still running.
            # Unbuffered (bufsize=0): plain file objects, no buffer lock a
            # blocked reader holds, so a forked child or close() can always
            # close them.
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, bufsize=0,
                                    stderr=subprocess.PIPE, env=full_env, cwd="/", start_new_session=True)
        except OSError as e:
            shutil.rmtree(workdir, ignore_errors=True)
            raise EngineError("start the engine %s: %s" % (binary, e), kind="engine_start") from None
        self = cls(Client("http://127.0.0.1:0", token), proc, workdir, private=True)
        self._reader = threading.Thread(target=self._read_log, name="sandbox-agent-engine-log", daemon=True)
        self._reader.start()
        deadline = t0 + timeout
        delay = 0.001
        try:
            while True:
                try:
                    with open(ready_file, encoding="utf-8") as f:
                        addr = f.read().strip()
                    if addr:
                        break
                except FileNotFoundError:
                    pass
                if proc.poll() is not None:
                    self._reader.join(2)  # its last lines
                    raise EngineError("the engine exited with status %s before serving:\n%s"
                                      % (proc.returncode, self.log_tail()), kind="engine_start")
                if time.monotonic() > deadline:
                    raise EngineError("the engine did not serve within %.0f s:\n%s" % (timeout, self.log_tail()),
                                      kind="engine_start")
                time.sleep(delay)
                delay = min(delay * 2, 0.02)
        except BaseException:
            # A failure, or a Ctrl-C while waiting: nothing may stay behind.
            self.close(timeout=5)
            raise
        self.client = Client("http://" + addr, token)
        # The engine has read its token: nothing of it stays on disk, even
        # if this process is killed.
        self._cleanup()
        self.started_in = time.monotonic() - t0
        return self

    def _read_log(self) -> None:
        # The engine's stderr, its last lines kept for error messages:
        # bounded memory however long the engine runs.
        assert self.process is not None and self.process.stderr is not None
        fd = self.process.stderr.fileno()
        part = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # closed under us
                return
            if not chunk:
                if part:
                    self._log.append(part.decode("utf-8", "replace"))
                return
            lines = (part + chunk).split(b"\n")
            part = lines.pop()[-2000:]
            for raw in lines:
                self._log.append(raw[:2000].decode("utf-8", "replace"))

    def log_tail(self) -> str:
        """The engine's last lines of log."""
        return "\n".join(self._log)

    def running(self) -> bool:
        return self.process is None or self.process.poll() is None

    def close(self, timeout: float = 180.0) -> None:
        """Stop a private engine (its sandboxes are removed); nothing for a remote one.

        Idempotent. Only the process that started the engine stops it (a
        forked child starts its own). ``timeout`` leaves the engine time to
        remove its sandboxes (its own grace periods are 30 s for requests
        and 2 minutes for the removals) before it is killed.
        """
        with self._lock:
            proc = self.process
            if proc is None or os.getpid() != self._pid:
                return
            if proc.poll() is None:
                try:
                    assert proc.stdin is not None
                    proc.stdin.close()  # --stop-on-stdin-eof: a graceful stop
                except OSError:
                    pass
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stderr is not None:
                if self._reader is not None:
                    self._reader.join(2)
                # A reader still blocked (a child of the engine holds the
                # pipe) keeps it: closing an fd under a read is a race.
                if self._reader is None or not self._reader.is_alive():
                    proc.stderr.close()
            self._cleanup()

    def _cleanup(self) -> None:
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


_engine = None  # type: Optional[Engine]
_engine_lock = threading.Lock()


def engine() -> Engine:
    """The private engine of this process, started on first use."""
    global _engine
    with _engine_lock:
        e = _engine
        if e is not None and e._pid == os.getpid() and e.running():
            return e
        if e is not None and e._pid == os.getpid():
            # It died: say so rather than start another behind the agents'
            # backs (their sandboxes went with it).
            _engine = None
            raise EngineError("the engine stopped (exit status %s); its agents are gone:\n%s"
                              % (e.process.returncode if e.process else None, e.log_tail()), kind="engine_stopped")
        _engine = Engine.start()
        atexit.register(_engine.close)
        return _engine


def _after_fork_in_child() -> None:
    # The child must not hold the parent's engine alive: its stdin's end
    # is the parent's engine's life line. The child starts its own engine
    # on first use; a lock held by another thread at the fork is gone.
    global _engine_lock
    _engine_lock = threading.Lock()
    e = _engine
    if e is not None and e.process is not None:
        for f in (e.process.stdin, e.process.stderr):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _reset_for_tests() -> None:
    global _engine
    with _engine_lock:
        if _engine is not None:
            _engine.close()
        _engine = None
