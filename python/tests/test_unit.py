"""Unit tests: the package against a fake engine (a local HTTP server answering canned API responses)."""

import http.server
import io
import json
import os
import stat
import sys
import tarfile
import textwrap
import threading
import time

import pytest

import sandbox_agent as sa
from sandbox_agent import audit, engine as engine_mod, versions
from sandbox_agent.errors import error_from

TOKEN = "t" * 32


def tar_of(*entries):
    """A tar stream of (name, kind, data) entries; kind is "file", "dir", "symlink" or "fifo"."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, kind, data in entries:
            ti = tarfile.TarInfo(name)
            if kind == "file":
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
                continue
            ti.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "fifo": tarfile.FIFOTYPE}[kind]
            if kind == "symlink":
                ti.linkname = data
            tf.addfile(ti)
    return buf.getvalue()


class FakeEngine(http.server.ThreadingHTTPServer):
    """Answers the routes the package uses; records every request."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests = []
        self.files = {}  # path -> tar bytes answered by GET files
        self.turn_error = None
        self.agents = {}
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server_address[1]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _send(self, status, body=b"", ctype="application/json", headers=()):
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _handle(self, method):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        srv = self.server
        srv.requests.append((method, self.path, dict(self.headers), raw))
        if self.headers.get("Authorization") != "Bearer " + TOKEN:
            return self._send(401, {"error": "bad token", "kind": "unauthorized"})
        path, _, query = self.path.partition("?")
        if method == "POST" and path == "/v1/agents":
            body = json.loads(raw)
            if body.get("memory") == "1k":
                return self._send(400, {"error": "memory '1k': want at least 6m", "kind": "invalid_argument"})
            srv.agents["a1"] = body
            return self._send(201, {"id": "a1", "driver": body["driver"], "container": "sandbox-agent-a1"})
        if path == "/v1/agents/a1/redirect":
            return self._send(302, b"", headers=[("Location", "http://127.0.0.2:%d/v1/agents/a1" % srv.server_address[1])])
        if path == "/v1/agents/a1/notjson":
            return self._send(200, b"<html>", "text/html")
        if path == "/v1/agents/a1/big":
            return self._send(200, b'"' + b"x" * 4096 + b'"')
        if method == "POST" and path == "/v1/agents/a1/turns":
            body = json.loads(raw)
            result = {"turn": 1, "reply": "hi " + body["prompt"], "session_id": "s1", "duration_ms": 5}
            if srv.turn_error:
                result.update(srv.turn_error)
            if "text/event-stream" in self.headers.get("Accept", ""):
                out = (b": ping\n\nevent: event\ndata: " + json.dumps({"kind": "tool_call", "payload": {"command": "ls"}}).encode()
                       + b"\n\nevent: result\ndata: " + json.dumps(result).encode() + b"\n\n")
                return self._send(200, out, "text/event-stream")
            if srv.turn_error:
                return self._send(422, {"error": srv.turn_error["error"], "kind": "driver_error", "driver": "claude",
                                        "exit_code": 1, "turn": result})
            return self._send(200, result)
        if method == "POST" and path == "/v1/agents/a1/exec":
            body = json.loads(raw)
            return self._send(200, {"exit_code": 3, "stdout": "out:" + " ".join(body["cmd"]), "stderr": "err",
                                    "timed_out": False, "duration_ms": 1})
        if method == "GET" and path == "/v1/agents/a1/files":
            src = query.split("path=", 1)[1]
            from urllib.parse import unquote
            data = srv.files.get(unquote(src))
            if data is None:
                return self._send(404, {"error": "no such file", "kind": "not_found"})
            return self._send(200, data, "application/x-tar", [("X-Sandbox-Agent-Skipped", "2")])
        if method == "PUT" and path == "/v1/agents/a1/files":
            return self._send(204)
        if method == "DELETE" and path == "/v1/agents/a1":
            if "a1" not in srv.agents:
                return self._send(404, {"error": "no agent", "kind": "not_found"})
            del srv.agents["a1"]
            return self._send(204)
        if method == "GET" and path == "/v1/agents/a1":
            return self._send(200, {"id": "a1", "session_id": "s1"})
        if method in ("PUT", "POST") and path in ("/v1/agents/a1/session", "/v1/agents/a1/rules", "/v1/agents/a1/skills"):
            return self._send(204)
        if method == "POST" and path == "/v1/agents/a1/sessions/current/fork":
            return self._send(201, {"session_id": "s2"})
        return self._send(404, {"error": "no route %s %s" % (method, path), "kind": "not_found"})

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_PUT(self):
        self._handle("PUT")

    def do_DELETE(self):
        self._handle("DELETE")


@pytest.fixture
def fake():
    srv = FakeEngine()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def agent(fake):
    eng = sa.Engine.connect(fake.url, TOKEN)
    a = sa.SandboxAgent(driver=sa.ClaudeDriver(), engine=eng)
    yield a
    a.close()


def test_parse_sse():
    raw = (b": ping\n\n"
           b"event: event\ndata: {\"kind\": \"text\"}\n\n"
           b"event: event\r\ndata:{\"a\":\r\ndata: 1}\r\n\r\n"
           b"data: plain\n\n\n\n"
           b"event: result\ndata: {\"reply\": \"DONE\"}\n\n"
           b"event: result\ndata: cut off")
    assert list(sa.parse_sse(io.BytesIO(raw))) == [
        ("event", '{"kind": "text"}'), ("event", '{"a":\n1}'), ("message", "plain"), ("result", '{"reply": "DONE"}')]


@pytest.mark.parametrize("status,kind,cls", [
    (400, "invalid_argument", sa.InvalidArgumentError), (401, "unauthorized", sa.UnauthorizedError),
    (403, "forbidden", sa.ForbiddenError), (404, "not_found", sa.NotFoundError), (409, "busy", sa.BusyError),
    (409, "conflict", sa.ConflictError), (413, "too_large", sa.TooLargeError), (429, "limit", sa.LimitError),
    (402, "budget_exceeded", sa.BudgetExceededError), (422, "driver_error", sa.DriverError),
    (504, "timeout", sa.AgentTimeoutError), (501, "unsupported", sa.UnsupportedError),
    (503, "engine_unavailable", sa.EngineUnavailableError), (500, "internal", sa.SandboxAgentError),
    (422, "unsafe_archive", sa.UnsafeArchiveError), (503, "interrupted", sa.TurnInterruptedError),
])
def test_error_kinds(status, kind, cls):
    e = error_from(status, {"error": "msg", "kind": kind})
    assert type(e) is cls
    assert (e.status, e.kind, e.message) == (status, kind, "msg")
    assert isinstance(e, sa.SandboxAgentError)


def test_error_details():
    e = error_from(422, {"error": "bad key", "kind": "driver_error", "driver": "codex", "exit_code": 1,
                         "turn": {"reply": ""}})
    assert (e.driver, e.exit_code, e.result) == ("codex", 1, {"reply": ""})
    assert isinstance(error_from(504, {"error": "x"}), TimeoutError)  # the kind from the status
    assert error_from(None, {"error": "x", "kind": "busy"}).status == 409


def test_create_request(fake, agent):
    assert agent.id == "a1"
    assert fake.agents["a1"] == {"driver": "claude"}  # nothing the caller did not set; a remote engine: no audit_root


def test_create_options(fake):
    eng = sa.Engine.connect(fake.url, TOKEN)
    drv = sa.OpenCodeDriver(provider="zhipuai-coding-plan", api_key="sk-secret", default_image="my/img:1")
    with sa.SandboxAgent(driver=drv, model="zhipuai-coding-plan/glm-5.3", engine=eng, audit=False, memory="1g",
                         env={"A": "1"}) as a:
        body = fake.agents["a1"]
        assert body["endpoint"] == {"api_key": "sk-secret", "provider": "zhipuai-coding-plan"}
        assert body["audit"] is False and body["image"] == "my/img:1" and body["memory"] == "1g"
        assert "sk-secret" not in repr(drv) and "sk-secret" not in repr(a)
    assert "a1" not in fake.agents  # closed by the with-block
    # A fake-model script: no endpoint sent, whatever the driver holds.
    with sa.SandboxAgent(driver=drv, engine=eng, fake_model_script={"responses": []}) as a:
        assert "endpoint" not in fake.agents["a1"]


def test_create_error(fake):
    with pytest.raises(sa.InvalidArgumentError, match="6m"):
        sa.SandboxAgent(driver="pi", engine=sa.Engine.connect(fake.url, TOKEN), memory="1k")
    with pytest.raises(sa.UnauthorizedError):
        sa.SandboxAgent(driver="pi", engine=sa.Engine.connect(fake.url, "wrong-token-0123456789"))
    with pytest.raises(TypeError, match="driver"):
        sa.SandboxAgent(driver="gpt", engine=sa.Engine.connect(fake.url, TOKEN))


def test_remote_engine_from_env(fake, monkeypatch):
    monkeypatch.setenv("SANDBOX_AGENT_URL", fake.url)
    monkeypatch.setenv("SANDBOX_AGENT_TOKEN", TOKEN)
    with sa.SandboxAgent(driver="pi") as a:
        assert a.engine.url == fake.url and a.engine.process is None
    monkeypatch.delenv("SANDBOX_AGENT_TOKEN")
    with pytest.raises(sa.InvalidArgumentError, match="token"):
        sa.SandboxAgent(driver="pi")


def test_ask_stream_exec(fake, agent):
    assert agent.ask("x") == "hi x"
    assert agent.last_result["session_id"] == "s1"
    events = list(agent.stream("y"))
    assert [e.kind for e in events] == ["tool_call"] and events[0].payload == {"command": "ls"}
    assert agent.last_result["reply"] == "hi y"
    code, out = agent.container.exec(["echo", "a"])
    assert (code, out) == (3, "out:echo aerr")
    r = agent.container.run(["ls"], timeout=5, env={"X": "1"}, workdir="/tmp")
    assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (3, "out:ls", "err", False)
    sent = json.loads(fake.requests[-1][3])
    assert sent == {"cmd": ["ls"], "timeout": 5, "env": {"X": "1"}, "workdir": "/tmp"}
    with pytest.raises(sa.InvalidArgumentError):
        agent.container.exec("ls -l")


def test_turn_errors(fake, agent):
    fake.turn_error = {"error": "invalid api key", "kind": "driver_error", "driver": "claude", "exit_code": 1}
    with pytest.raises(sa.DriverError) as ei:
        agent.ask("x")
    assert ei.value.driver == "claude" and ei.value.result["reply"] == "hi x"
    with pytest.raises(sa.DriverError) as ei:
        list(agent.stream("y"))
    assert ei.value.exit_code == 1 and agent.last_result["error"] == "invalid api key"


def test_sessions_and_rules(fake, agent):
    assert agent.fork() == "s2"
    agent.use_session("s2")
    assert json.loads(fake.requests[-1][3]) == {"session_id": "s2"}
    agent.new_session()
    assert json.loads(fake.requests[-1][3]) == {"session_id": ""}
    agent.install_rules("be brief")
    assert json.loads(fake.requests[-1][3]) == {"rules": "be brief"}
    agent.install_skill("s", {"SKILL.md": b"x"})
    assert json.loads(fake.requests[-1][3]) == {"name": "s", "files": {"SKILL.md": "x"}}
    assert agent.session_id == "s1"


def test_download_file(fake, agent, tmp_path):
    fake.files["/tmp/qs.py"] = tar_of(("qs.py", "file", b"print(1)\n"))
    got = agent.container.download("/tmp/qs.py", tmp_path / "out.py")
    assert got == str(tmp_path / "out.py") and open(got, "rb").read() == b"print(1)\n"
    assert agent.last_skipped == 2
    # Into an existing directory: under its own name.
    got = agent.container.download("/tmp/qs.py", tmp_path)
    assert got == str(tmp_path / "qs.py")
    assert agent.container.read_file("/tmp/qs.py") == b"print(1)\n"
    assert sorted(os.listdir(tmp_path)) == ["out.py", "qs.py"]  # no temporary left


def test_download_dotfile(fake, agent, tmp_path):
    fake.files["/root/.bashrc"] = tar_of((".bashrc", "file", b"x"))
    assert agent.container.download("/root/.bashrc", tmp_path) == str(tmp_path / ".bashrc")
    fake.files["/d"] = tar_of(("./.d", "dir", None), ("./.d/f", "file", b"y"))
    assert open(os.path.join(agent.container.download("/d", tmp_path / "dd"), "f")).read() == "y"


def test_download_limits(fake, agent, tmp_path, monkeypatch):
    fake.files["/many"] = tar_of(("m", "dir", None), *[("m/%d" % i, "file", b"x") for i in range(20)])
    with pytest.raises(sa.TooLargeError):
        agent.container.download("/many", tmp_path / "a", max_entries=10)
    with pytest.raises(sa.TooLargeError):
        agent.container.download("/many", tmp_path / "b", max_bytes=5)
    monkeypatch.setenv("SANDBOX_AGENT_MAX_DOWNLOAD_BYTES", "5")
    with pytest.raises(sa.TooLargeError):
        agent.container.download("/many", tmp_path / "c")
    assert os.listdir(tmp_path) == []  # nothing left of the refused ones
    monkeypatch.delenv("SANDBOX_AGENT_MAX_DOWNLOAD_BYTES")
    agent.container.download("/many", tmp_path / "d")
    assert len(os.listdir(tmp_path / "d")) == 20


def test_download_dir(fake, agent, tmp_path):
    fake.files["/work/out"] = tar_of(("out", "dir", None), ("out/a.txt", "file", b"a"), ("out/sub", "dir", None),
                                     ("out/sub/b.txt", "file", b"b"))
    got = agent.container.download("/work/out", tmp_path / "res")
    assert open(os.path.join(got, "sub", "b.txt")).read() == "b"
    assert agent.container.download("/work/out", tmp_path) == str(tmp_path / "out")  # inside a directory
    with pytest.raises(sa.InvalidArgumentError, match="exists"):
        agent.container.download("/work/out", tmp_path)  # never merged into what is there


@pytest.mark.parametrize("entries", [
    [("/etc/passwd", "file", b"x")],
    [("out/../../escape", "file", b"x")],
    [("out", "dir", None), ("out/link", "symlink", "/etc/passwd")],
    [("out", "dir", None), ("out/fifo", "fifo", None)],
    [("a", "file", b"1"), ("b", "file", b"2")],
])
def test_download_hostile(fake, agent, tmp_path, entries):
    fake.files["/x"] = tar_of(*entries)
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(sa.UnsafeArchiveError):
        agent.container.download("/x", dest / "got")
    assert os.listdir(dest) == []  # nothing half-written
    assert not (tmp_path / "escape").exists()


def test_read_file_limits(fake, agent):
    fake.files["/big"] = tar_of(("big", "file", b"x" * 100))
    with pytest.raises(sa.TooLargeError):
        agent.container.read_file("/big", max_bytes=10)
    fake.files["/d"] = tar_of(("d", "dir", None))
    with pytest.raises(sa.UnsafeArchiveError):
        agent.container.read_file("/d")
    with pytest.raises(sa.NotFoundError):
        agent.container.read_file("/missing")


def test_upload(fake, agent, tmp_path):
    (tmp_path / "d" / "s").mkdir(parents=True)
    (tmp_path / "d" / "s" / "f").write_text("f")
    os.symlink("/etc/passwd", tmp_path / "d" / "link")
    agent.container.upload(tmp_path / "d", "/work/in")
    method, path, headers, raw = fake.requests[-1]
    assert (method, headers["Content-Type"]) == ("PUT", "application/x-tar")
    names = tarfile.open(fileobj=io.BytesIO(raw)).getnames()
    assert sorted(names) == ["s", "s/f"]  # the link left out
    agent.container.write_file("/work/t.txt", "é")
    assert fake.requests[-1][3] == "é".encode()


def test_closed_agent(fake, agent):
    agent.close()
    agent.close()  # idempotent
    with pytest.raises(sa.SandboxAgentError, match="closed"):
        agent.ask("x")


def test_versions(monkeypatch):
    v = versions.VERSIONS
    for cli in ("opencode", "codex", "claude", "pi", "dsh"):
        want = "%s:%s-%s-%s" % (v["repo"], cli, v["clis"][cli]["version"], v["image_date"])
        assert getattr(versions, cli.upper() + "_IMAGE") == want
    monkeypatch.setenv("SANDBOX_AGENT_IMAGE_NAME", "127.0.0.1:5000/mirror/sa")
    assert versions.image("pi").startswith("127.0.0.1:5000/mirror/sa:pi-")
    assert versions.resolve("pi", driver_default="x/y:1").startswith("127.0.0.1:5000/mirror/sa:pi-")
    assert versions.resolve("pi", explicit="mine:2") == "mine:2"
    monkeypatch.setenv("SANDBOX_AGENT_IMAGE_NAME", "Bad:Name:latest")
    with pytest.raises(sa.InvalidArgumentError):
        versions.image("pi")
    monkeypatch.delenv("SANDBOX_AGENT_IMAGE_NAME")
    assert versions.resolve("pi", driver_default="x/y:1") == "x/y:1"
    with pytest.raises(sa.InvalidArgumentError):
        versions.image("gpt")


def test_config_file(monkeypatch, tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"image_name": "reg.example/team/sa", "audit_root": "/data/a"}))
    monkeypatch.setenv("SANDBOX_AGENT_CONFIG", str(cfg))
    monkeypatch.delenv("SANDBOX_AGENT_IMAGE_NAME", raising=False)
    monkeypatch.delenv("SANDBOX_AGENT_AUDIT_ROOT", raising=False)
    assert versions.image("pi").startswith("reg.example/team/sa:pi-")
    assert audit._root() == "/data/a"
    monkeypatch.setenv("SANDBOX_AGENT_AUDIT_ROOT", "/env/wins")
    assert audit._root() == "/env/wins"
    cfg.write_text("{not json")
    with pytest.raises(sa.InvalidArgumentError, match="config file"):
        versions.image_name()


def test_audit_defaults(monkeypatch):
    monkeypatch.setenv("SANDBOX_AGENT_CONFIG", "/nonexistent/c.json")
    monkeypatch.delenv("SANDBOX_AGENT_AUDIT_ROOT", raising=False)
    monkeypatch.delenv("SANDBOX_AGENT_AUDIT_RETENTION_DAYS", raising=False)
    monkeypatch.setenv("TMPDIR", "/var/tmp")
    assert audit._root() == "/var/tmp/sandbox-agent-%d" % os.getuid()
    assert audit._days() == 7
    monkeypatch.setenv("SANDBOX_AGENT_AUDIT_RETENTION_DAYS", "-1")
    with pytest.raises(sa.InvalidArgumentError):
        audit._days()


def fake_binary(tmp_path, body):
    p = tmp_path / "sandbox-agent"
    p.write_text("#!%s\n%s" % (sys.executable, textwrap.dedent(body)))
    p.chmod(0o755)
    return str(p)


def test_engine_start_failure(tmp_path):
    binary = fake_binary(tmp_path, """
        import sys
        print("sandbox-agent: cannot reach the container engine", file=sys.stderr)
        sys.exit(1)
    """)
    with pytest.raises(sa.EngineError, match="cannot reach the container engine") as ei:
        sa.Engine.start(binary, timeout=10)
    assert ei.value.kind == "engine_start"


def test_engine_start_and_stop(tmp_path):
    # A stand-in engine: writes the ready file, then waits for its stdin to
    # end (the private engine's life line) and records that it did.
    mark = tmp_path / "stopped"
    binary = fake_binary(tmp_path, """
        import sys, os, stat
        args = sys.argv[1:]
        assert args[0] == "serve" and "--stop-on-stdin-eof" in args
        tf = args[args.index("--token-file") + 1]
        tok = open(tf).read().strip()
        assert len(tok) == 64 and stat.S_IMODE(os.stat(os.path.dirname(tf)).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(tf).st_mode) == 0o600
        ready = args[args.index("--ready-file") + 1]
        open(ready + ".tmp", "w").write("127.0.0.1:9\\n")
        os.rename(ready + ".tmp", ready)
        sys.stdin.read()
        open(%r, "w").write("eof")
    """ % str(mark))
    e = sa.Engine.start(binary, timeout=10)
    assert e.url == "http://127.0.0.1:9" and e.private and e.started_in > 0
    assert e.workdir is None  # the token file is gone once the engine serves
    e.close()
    assert mark.read_text() == "eof"
    e.close()  # idempotent


def test_engine_start_timeout(tmp_path):
    binary = fake_binary(tmp_path, "import time\ntime.sleep(60)\n")
    t0 = time.monotonic()
    with pytest.raises(sa.EngineError, match="did not serve"):
        sa.Engine.start(binary, timeout=0.5)
    assert time.monotonic() - t0 < 30


def test_engine_binary_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("SANDBOX_AGENT_BIN", str(tmp_path / "nope"))
    with pytest.raises(sa.EngineError, match="platform wheel"):
        engine_mod.binary_path()


def test_no_redirect_no_token_leak(fake, agent):
    with pytest.raises(sa.EngineError, match="redirect"):
        agent._client.json("GET", "/v1/agents/a1/redirect")
    assert all(not p.startswith("/v1/agents/a1?") and p != "/v1/agents/a1" for _, p, _, _ in fake.requests[-1:])


def test_hostile_answers(fake, agent, monkeypatch):
    with pytest.raises(sa.EngineError, match="not JSON"):
        agent._client.json("GET", "/v1/agents/a1/notjson")
    from sandbox_agent import _http
    monkeypatch.setattr(_http, "MAX_JSON", 1000)
    with pytest.raises(sa.TooLargeError):
        agent._client.json("GET", "/v1/agents/a1/big")
    raw = b"event: event\n" + b"data: x\n" * 10 + b"\n"
    with pytest.raises(sa.TooLargeError):
        list(sa.parse_sse(io.BytesIO(raw), max_data=15))
    fake.files["/broken"] = b"this is not a tar archive" * 100
    with pytest.raises(sa.UnsafeArchiveError):
        agent.container.download("/broken", "/tmp/never-written")
    assert not os.path.exists("/tmp/never-written")
    with pytest.raises(sa.UnsafeArchiveError):
        agent.container.read_file("/broken")


def test_download_normalizes_modes(fake, agent, tmp_path):
    def archive(duplicate):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            d = tarfile.TarInfo("out")
            d.type, d.mode = tarfile.DIRTYPE, 0o500
            tf.addfile(d)
            f = tarfile.TarInfo("out/x")
            f.size, f.mode, f.uid, f.gid = 1, 0o4777, 4242, 4242
            tf.addfile(f, io.BytesIO(b"x"))
            if duplicate:
                tf.addfile(tarfile.TarInfo("out/x"), io.BytesIO(b""))
        return buf.getvalue()

    fake.files["/out"] = archive(True)
    with pytest.raises(sa.UnsafeArchiveError, match="exists"):
        agent.container.download("/out", tmp_path / "o")
    assert os.listdir(tmp_path) == []
    fake.files["/out"] = archive(False)
    got = agent.container.download("/out", tmp_path / "o")
    assert stat.S_IMODE(os.stat(got).st_mode) == 0o755 & ~_umask()
    st = os.stat(os.path.join(got, "x"))
    assert stat.S_IMODE(st.st_mode) == 0o644 & ~_umask() and st.st_uid == os.getuid()


def _umask():
    m = os.umask(0)
    os.umask(m)
    return m


def test_upload_hard_links_as_copies(fake, agent, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").write_text("same")
    os.link(tmp_path / "d" / "a", tmp_path / "d" / "b")
    agent.container.upload(tmp_path / "d", "/work/in")
    members = tarfile.open(fileobj=io.BytesIO(fake.requests[-1][3])).getmembers()
    assert [(m.name, m.isfile(), m.size) for m in members] == [("a", True, 4), ("b", True, 4)]


def test_fork_child_does_not_hold_the_engine(tmp_path):
    # A forked child closes its copy of the engine's stdin: the parent's
    # close is a graceful stop at once, not a kill after the timeout.
    mark = tmp_path / "stopped"
    binary = fake_binary(tmp_path, """
        import sys, os
        args = sys.argv[1:]
        ready = args[args.index("--ready-file") + 1]
        open(ready + ".tmp", "w").write("127.0.0.1:9\\n")
        os.rename(ready + ".tmp", ready)
        sys.stdin.read()
        open(%r, "w").write("eof")
    """ % str(mark))
    e = sa.Engine.start(binary, timeout=10)
    old = engine_mod._engine
    engine_mod._engine = e
    try:
        child_ok = tmp_path / "child-ok"
        pid = os.fork()
        if pid == 0:
            open(str(child_ok), "w").close()  # the at-fork hook did not hang
            time.sleep(30)
            os._exit(0)
        try:
            deadline = time.monotonic() + 10
            while not child_ok.exists():
                assert time.monotonic() < deadline, "the forked child hangs"
                time.sleep(0.05)
            t0 = time.monotonic()
            e.close(timeout=20)
            assert time.monotonic() - t0 < 10 and mark.read_text() == "eof"
            assert e.process.returncode == 0
        finally:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    finally:
        engine_mod._engine = old
