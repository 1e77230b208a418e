"""Tests of the Python client (sandbox_agent.py).

    python3 -m unittest -v examples/python/test_sandbox_agent.py

The offline tests (the SSE parser, the error mapping, stream() and download()
against a canned local HTTP server) run anywhere. The server tests run
against a real ``sandbox-agent serve`` named by SANDBOX_AGENT_URL and
SANDBOX_AGENT_TOKEN, with the driver SANDBOX_AGENT_TEST_DRIVER (default
codex) on the built-in fake model; without SANDBOX_AGENT_URL they skip.
"""

import http.server
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sandbox_agent as sa  # noqa: E402

URL = os.environ.get("SANDBOX_AGENT_URL", "")
TOKEN = os.environ.get("SANDBOX_AGENT_TOKEN", "")
DRIVER = os.environ.get("SANDBOX_AGENT_TEST_DRIVER", "codex")
TURN_TIMEOUT = 240


class SSEParserTest(unittest.TestCase):
    def test_messages(self):
        raw = (b": ping\n\n"
               b"event: event\ndata: {\"kind\": \"text\"}\n\n"
               b"event: event\r\ndata:{\"a\":\r\ndata: 1}\r\n\r\n"
               b"data: plain\n\n"
               b"\n\n"
               b"event: result\ndata: {\"reply\": \"DONE\"}\n\n"
               b"event: result\ndata: cut off")
        got = list(sa.parse_sse(io.BytesIO(raw)))
        self.assertEqual(got, [("event", '{"kind": "text"}'), ("event", '{"a":\n1}'),
                               ("message", "plain"), ("result", '{"reply": "DONE"}')])


class ErrorMappingTest(unittest.TestCase):
    def test_kinds(self):
        for status, kind, cls in [(409, "busy", sa.BusyError), (404, "not_found", sa.NotFoundError),
                                  (504, "timeout", sa.AgentTimeoutError), (422, "driver_error", sa.DriverError),
                                  (401, "unauthorized", sa.UnauthorizedError), (429, "limit", sa.SandboxAgentError)]:
            e = sa._error(status, {"error": "msg", "kind": kind})
            self.assertIs(type(e), cls)
            self.assertEqual((e.status, e.kind, e.message), (status, kind, "msg"))
        e = sa._error(422, {"error": "bad key", "kind": "driver_error", "driver": "codex", "exit_code": 1,
                            "turn": {"reply": ""}})
        self.assertEqual((e.driver, e.exit_code, e.result), ("codex", 1, {"reply": ""}))
        self.assertIsInstance(sa._error(504, {"error": "x"}), TimeoutError)  # kind from the status
        self.assertEqual(sa._error(None, {"error": "x", "kind": "busy"}).status, 409)


class _Canned(http.server.BaseHTTPRequestHandler):
    """Answers what the test put in ``routes``: (status, headers, body) by method+path."""
    routes = {}  # type: dict

    def _answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        if self.headers.get("Authorization") != "Bearer canned-token":
            status, headers, body = 401, {}, b'{"error": "bad token", "kind": "unauthorized"}'
        else:
            status, headers, body = self.routes.get(self.command + " " + self.path.split("?")[0],
                                                    (404, {}, b'{"error": "no", "kind": "not_found"}'))
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, *args):
        pass


def _sse(*msgs):
    return b"".join(b"event: %s\ndata: %s\n\n" % (e.encode(), json.dumps(d).encode()) for e, d in msgs)


class OfflineClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Canned)
        threading.Thread(target=cls.httpd.serve_forever, daemon=True).start()
        cls.url = "http://127.0.0.1:%d" % cls.httpd.server_address[1]

    @classmethod
    def tearDownClass(cls):
        cls.httpd.shutdown()
        cls.httpd.server_close()

    def agent(self, token="canned-token"):
        return sa.SandboxAgent.attach("a1", url=self.url, token=token)

    def test_stream_result_and_error(self):
        ok = {"reply": "DONE", "session_id": "s"}
        _Canned.routes = {"POST /v1/agents/a1/turns": (200, {"Content-Type": "text/event-stream"}, _sse(
            ("event", {"kind": "tool_call"}), ("event", {"kind": "text"}), ("result", ok)))}
        a = self.agent()
        gen = a.stream("hi")
        kinds = []
        with self.assertRaises(StopIteration) as stop:
            while True:
                kinds.append(next(gen)["kind"])
        self.assertEqual((kinds, stop.exception.value, a.last_result), (["tool_call", "text"], ok, ok))
        failed = {"reply": "", "error": "bad key", "kind": "driver_error"}
        _Canned.routes["POST /v1/agents/a1/turns"] = (200, {}, _sse(("event", {"kind": "error"}), ("result", failed)))
        with self.assertRaises(sa.DriverError) as cm:
            list(a.stream("hi"))
        self.assertEqual((cm.exception.result, cm.exception.status, a.last_result), (failed, 422, failed))
        _Canned.routes["POST /v1/agents/a1/turns"] = (200, {}, _sse(("event", {"kind": "text"})))
        with self.assertRaises(sa.SandboxAgentError):
            list(a.stream("hi"))

    def test_http_errors(self):
        _Canned.routes = {"POST /v1/agents/a1/turns": (409, {}, b'{"error": "a turn is running", "kind": "busy"}'),
                          "POST /v1/agents/a1/exec": (500, {}, b"not json")}
        with self.assertRaises(sa.BusyError):
            self.agent().ask("hi")
        with self.assertRaises(sa.BusyError):
            next(self.agent().stream("hi"))
        with self.assertRaises(sa.SandboxAgentError) as cm:
            self.agent().exec(["true"])
        self.assertEqual((cm.exception.status, cm.exception.kind, cm.exception.message), (500, "internal", "not json"))
        with self.assertRaises(sa.UnauthorizedError):
            self.agent(token="wrong").exec(["true"])
        with self.assertRaises(sa.NotFoundError):
            sa.SandboxAgent.attach("nope", url=self.url, token="canned-token").get()

    def test_checkpoints(self):
        ck = {"id": "ck-01", "name": "fork", "agent": "a1"}
        _Canned.routes = {
            "POST /v1/agents/a1/fork": (201, {}, json.dumps({"agents": [{"id": "b1"}, {"id": "b2"}],
                                                              "checkpoint": ck}).encode()),
            "GET /v1/checkpoints": (200, {}, json.dumps({"checkpoints": [ck]}).encode()),
            "GET /v1/checkpoints/ck-01": (200, {}, json.dumps(ck).encode()),
            "DELETE /v1/checkpoints/ck-01": (409, {}, b'{"error": "in use", "kind": "conflict"}'),
        }
        a = self.agent()
        fork = a.fork_agents(2)
        branches, checkpoint = fork
        self.assertEqual(([b.id for b in branches], checkpoint), (["b1", "b2"], ck))
        self.assertEqual((fork.agents, fork.checkpoint), (branches, ck))
        self.assertEqual((branches[0].info, branches[0].url, branches[0].token), ({"id": "b1"}, self.url, "canned-token"))
        self.assertEqual(a.list_checkpoints(), [ck])
        self.assertEqual(a.get_checkpoint("ck-01"), ck)
        with self.assertRaises(sa.SandboxAgentError) as cm:
            a.delete_checkpoint("ck-01")
        self.assertEqual((cm.exception.status, cm.exception.kind), (409, "conflict"))
        with self.assertRaises(sa.NotFoundError):
            a.get_checkpoint("ck-02")

    def test_repo_and_changes(self):
        ch = {"branch": "sandbox-agent/x", "tip": "b", "base": "a", "commits": ["b"], "uncommitted": True}
        _Canned.routes = {
            "POST /v1/agents": (201, {}, b'{"id": "a1"}'),
            "GET /v1/agents/a1/changes": (200, {}, json.dumps(ch).encode()),
        }
        a = sa.SandboxAgent("pi", url=self.url, token="canned-token", repo={"bundle": b"# v2 git bundle\n"})
        self.assertEqual((a.id, a.changes()), ("a1", ch))
        _Canned.routes["GET /v1/agents/a1/changes"] = (200, {"Content-Type": "application/x-git-bundle"}, b"BUNDLE")
        self.assertEqual(a.changes(format="bundle"), b"BUNDLE")
        _Canned.routes["GET /v1/agents/a1/changes"] = (409, {}, b'{"error": "no repository", "kind": "conflict"}')
        with self.assertRaises(sa.SandboxAgentError) as cm:
            a.changes()
        self.assertEqual((cm.exception.status, cm.exception.kind), (409, "conflict"))

    def test_download_refuses_unsafe_entries(self):
        def tar(*entries):
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tf:
                for name, typ in entries:
                    ti = tarfile.TarInfo(name)
                    ti.type = typ
                    if typ == tarfile.SYMTYPE:
                        ti.linkname = "/etc/passwd"
                    data = b"" if typ != tarfile.REGTYPE else b"ok\n"
                    ti.size = len(data)
                    tf.addfile(ti, io.BytesIO(data))
            return buf.getvalue()
        route = "GET /v1/agents/a1/files"
        with tempfile.TemporaryDirectory() as d:
            _Canned.routes = {route: (200, {"X-Sandbox-Agent-Skipped": "2"}, tar(("out", tarfile.DIRTYPE),
                                                                                  ("out/f.txt", tarfile.REGTYPE)))}
            a = self.agent()
            self.assertEqual(a.download("/tmp/out", d), ["out", "out/f.txt"])
            with open(os.path.join(d, "out", "f.txt")) as f:
                self.assertEqual((f.read(), a.last_skipped), ("ok\n", 2))
            for bad in [("../escape.txt", tarfile.REGTYPE), ("/abs.txt", tarfile.REGTYPE), ("l", tarfile.SYMTYPE)]:
                _Canned.routes = {route: (200, {}, tar(bad))}
                with self.assertRaises((sa.SandboxAgentError, tarfile.TarError), msg=bad[0]):
                    a.download("/x", os.path.join(d, "sub"))
            self.assertFalse(os.path.exists(os.path.join(d, "escape.txt")))


@unittest.skipUnless(URL, "SANDBOX_AGENT_URL is not set (no server to test against)")
class ServerTest(unittest.TestCase):
    """One agent through its life; the tests run in name order and build on each other."""

    SCRIPT = {"responses": [
        {"tool": "shell", "command": "echo py-hello > /tmp/py.txt"}, {"text": "DONE"},
        {"tool": "shell", "command": "echo py-again > /tmp/py2.txt"}, {"text": "DONE"},
    ]}

    @classmethod
    def setUpClass(cls):
        cls.agent = sa.SandboxAgent(DRIVER, url=URL, token=TOKEN, fake_model_script=cls.SCRIPT,
                                    timeout=TURN_TIMEOUT)

    @classmethod
    def tearDownClass(cls):
        cls.agent.close()

    def test_0_created(self):
        info = self.agent.get()
        self.assertEqual((info["id"], info["driver"], info["status"]), (self.agent.id, DRIVER, "idle"))
        self.assertIn(self.agent.id, [a["id"] for a in sa.SandboxAgent.attach(
            "", url=URL, token=TOKEN)._json("GET", "/v1/agents")["agents"]])

    def test_1_stream(self):
        events = []
        gen = self.agent.stream("Run: echo py-hello > /tmp/py.txt, then answer DONE.")
        try:
            while True:
                events.append(next(gen))
        except StopIteration as stop:
            result = stop.value
        kinds = [e["kind"] for e in events]
        self.assertIn("tool_call", kinds)
        call = next(e for e in events if e["kind"] == "tool_call")
        self.assertIn("py-hello", json.dumps(call["payload"]))
        self.assertEqual(result["reply"], "DONE", result)
        self.assertIs(self.agent.last_result, result)
        self.assertTrue(result["session_id"])

    def test_2_ask(self):
        self.assertEqual(self.agent.ask("Run: echo py-again > /tmp/py2.txt, then answer DONE."), "DONE")
        res = self.agent.last_result
        self.assertIn("tool_call", [e["kind"] for e in res["events"]])
        self.assertEqual(self.agent.get()["turns"], 2)

    def test_3_exec(self):
        res = self.agent.exec(["cat", "/tmp/py.txt"])
        self.assertEqual((res["exit_code"], res["stdout"]), (0, "py-hello\n"), res)
        res = self.agent.exec(["sh", "-c", 'echo "$X" in "$PWD" >&2; exit 3'], env={"X": "y"}, workdir="/tmp")
        self.assertEqual((res["exit_code"], res["stderr"], res["timed_out"]), (3, "y in /tmp\n", False), res)

    def test_4_download(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(self.agent.download("/tmp/py.txt", d), ["py.txt"])
            with open(os.path.join(d, "py.txt")) as f:
                self.assertEqual(f.read(), "py-hello\n")

    def test_5_upload(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "proj", "sub"))
            with open(os.path.join(d, "proj", "sub", "a.txt"), "w") as f:
                f.write("from-host\n")
            self.agent.upload(os.path.join(d, "proj"), "/tmp/up")
            self.agent.upload(os.path.join(d, "proj", "sub", "a.txt"), "/tmp/one.txt")
        res = self.agent.exec(["sh", "-c", "cat /tmp/up/sub/a.txt /tmp/one.txt"])
        self.assertEqual(res["stdout"], "from-host\nfrom-host\n", res)

    def test_6_sessions(self):
        s = self.agent.sessions()
        self.assertEqual(s["current"], self.agent.last_result["session_id"], s)
        self.assertIn(s["current"], [x["id"] for x in s["sessions"]], s)
        fork = self.agent.fork()
        self.assertTrue(fork)
        self.assertNotEqual(fork, s["current"])

    def test_6z_checkpoints(self):
        self.agent.exec(["sh", "-c", "echo ck-state > py-ck.txt"])
        ck = self.agent.checkpoint("py")
        self.assertEqual((ck["name"], ck["agent"], ck["driver"]), ("py", self.agent.id, DRIVER), ck)
        self.assertEqual(self.agent.get_checkpoint(ck["id"])["id"], ck["id"])
        branches, fork_ck = self.agent.fork_agents(1)
        try:
            self.assertEqual((len(branches), fork_ck["name"], fork_ck["agent"]), (1, "fork", self.agent.id))
            ids = [c["id"] for c in self.agent.list_checkpoints()]
            self.assertIn(ck["id"], ids)
            self.assertIn(fork_ck["id"], ids)
            res = branches[0].exec(["cat", "py-ck.txt"])
            self.assertEqual((res["exit_code"], res["stdout"]), (0, "ck-state\n"), res)
            if fork_ck.get("image"):  # a committed image: in use while the branch runs
                with self.assertRaises(sa.SandboxAgentError) as cm:
                    self.agent.delete_checkpoint(fork_ck["id"])
                self.assertEqual((cm.exception.status, cm.exception.kind), (409, "conflict"))
        finally:
            for b in branches:
                b.close()
        for c in (fork_ck, ck):
            self.agent.delete_checkpoint(c["id"])
        with self.assertRaises(sa.NotFoundError):
            self.agent.get_checkpoint(ck["id"])

    @unittest.skipUnless(shutil.which("git"), "git is not installed")
    def test_6z_repo(self):
        def git(*args, cwd):
            env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_AUTHOR_NAME="u",
                       GIT_AUTHOR_EMAIL="u@example.com", GIT_COMMITTER_NAME="u", GIT_COMMITTER_EMAIL="u@example.com")
            return subprocess.run(["git"] + list(args), cwd=cwd, env=env, check=True,
                                  capture_output=True, text=True).stdout.strip()
        with self.assertRaises(sa.SandboxAgentError) as cm:
            self.agent.changes()
        self.assertEqual((cm.exception.status, cm.exception.kind), (409, "conflict"))
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "src")
            os.makedirs(src)
            git("init", "-q", "-b", "main", cwd=src)
            with open(os.path.join(src, "README"), "w") as f:
                f.write("hello\n")
            git("add", "README", cwd=src)
            git("commit", "-qm", "first", cwd=src)
            git("bundle", "create", "-q", os.path.join(d, "src.bundle"), "main", cwd=src)
            with open(os.path.join(d, "src.bundle"), "rb") as f:
                bundle = f.read()
            script = {"responses": [
                {"tool": "shell", "command": "echo x > f && git add f && git commit -qm agent && echo y > g"},
                {"text": "DONE"}]}
            with sa.SandboxAgent(DRIVER, url=URL, token=TOKEN, timeout=TURN_TIMEOUT, fake_model_script=script,
                                 repo={"bundle": bundle, "branch": "py-work"}) as agent:
                self.assertEqual(agent.ask("Commit something, then answer DONE."), "DONE")
                ch = agent.changes()
                self.assertEqual((ch["branch"], len(ch["commits"]), ch["uncommitted"]), ("py-work", 2, True), ch)
                self.assertEqual(ch["base"], git("rev-parse", "HEAD", cwd=src))
                data = agent.changes(format="bundle")
            with open(os.path.join(d, "changes.bundle"), "wb") as f:
                f.write(data)
            git("bundle", "verify", "-q", os.path.join(d, "changes.bundle"), cwd=src)
            git("fetch", "-q", os.path.join(d, "changes.bundle"), "py-work:py-work", cwd=src)
            self.assertEqual(git("rev-parse", "py-work", cwd=src), ch["tip"])
            self.assertEqual(git("ls-tree", "--name-only", "py-work", cwd=src).split(), ["README", "f", "g"])

    def test_7_errors(self):
        with self.assertRaises(sa.UnauthorizedError) as cm:
            sa.SandboxAgent(DRIVER, url=URL, token="wrong-token-wrong-token")
        self.assertEqual(cm.exception.status, 401)
        with self.assertRaises(sa.NotFoundError) as cm:
            sa.SandboxAgent.attach("no-such-agent", url=URL, token=TOKEN).exec(["true"])
        self.assertEqual((cm.exception.status, cm.exception.kind), (404, "not_found"))

    def test_8_driver_error(self):
        with sa.SandboxAgent(DRIVER, url=URL, token=TOKEN, timeout=TURN_TIMEOUT, fake_model_script={
                "responses": [{"error": 401, "message": "invalid api key"}]}) as bad:
            with self.assertRaises(sa.DriverError) as cm:
                bad.ask("hi")
            self.assertEqual((cm.exception.status, cm.exception.kind), (422, "driver_error"))
            self.assertIsNotNone(cm.exception.result)
            with self.assertRaises(sa.DriverError) as cm:
                list(bad.stream("hi"))
            self.assertIsNotNone(bad.last_result)
            self.assertTrue(bad.last_result.get("error"))

    def test_9_close(self):
        agent_id = self.agent.id
        self.agent.close()
        self.agent.close()  # idempotent
        with self.assertRaises(sa.NotFoundError):
            sa.SandboxAgent.attach(agent_id, url=URL, token=TOKEN).get()


if __name__ == "__main__":
    unittest.main()
