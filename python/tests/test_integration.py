"""Integration tests: the installed package drives the real engine it carries, on a real
container engine, with the fake model (a real HTTP server the real CLI talks to).

Run by the Go test TestPythonPackage (cmd/sandbox-agent) from the wheel installed in a
fresh venv, with no Go toolchain and no sandbox-agent on PATH. The drivers are
SANDBOX_AGENT_TEST_DRIVERS (default "pi claude"; all five: "opencode codex claude pi dsh").
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import sandbox_agent as sa
from sandbox_agent import audit, smoke, versions
from sandbox_agent.engine import binary_path, engine

pytestmark = pytest.mark.integration

DRIVERS = os.environ.get("SANDBOX_AGENT_TEST_DRIVERS", "pi claude").split()
TURN = 300

QS = '''def qs(a):
    return a if len(a) < 2 else qs([x for x in a[1:] if x < a[0]]) + [a[0]] + qs([x for x in a[1:] if x >= a[0]])

print(qs([3, 1, 2]))
'''
SCRIPT = {"responses": [{"tool": "write", "path": "/tmp/qs.py", "content": QS}, {"text": "saved /tmp/qs.py"}]}


def engine_containers(prefix="sandbox-agent"):
    """The container names the engine's Docker reports (all states)."""
    import http.client
    import socket

    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    assert host.startswith("unix://"), "these checks read Docker's API over its Unix socket, not %s" % host

    class Conn(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(host[len("unix://"):])

    c = Conn("docker")
    c.request("GET", "/containers/json?all=1")
    names = [n.lstrip("/") for ct in json.loads(c.getresponse().read()) for n in ct["Names"]]
    c.close()
    return names


def test_installed_from_the_wheel():
    # The package and its engine are the installed wheel's; nothing else helps.
    assert os.path.realpath(sa.__file__).startswith(os.path.realpath(sys.prefix)), sa.__file__
    assert sys.prefix != sys.base_prefix, "not in a venv"
    assert shutil.which("go") is None and shutil.which("sandbox-agent") is None
    assert "SANDBOX_AGENT_BIN" not in os.environ
    b = binary_path()
    assert b.startswith(os.path.dirname(os.path.realpath(sa.__file__))) and os.access(b, os.X_OK)


def test_versions_match_the_engine():
    for cli in versions.CLIS:
        out = subprocess.run([sys.executable, "-m", "sandbox_agent", "images", "which", cli],
                             check=True, capture_output=True, text=True).stdout.strip()
        assert getattr(versions, cli.upper() + "_IMAGE") == out


@pytest.mark.parametrize("driver", DRIVERS)
def test_seed_example(driver, tmp_path, monkeypatch):
    # The seed's example, but the model: a driver object, the with-block,
    # ask, container.exec -> (code, out), container.download to a file path.
    monkeypatch.chdir(tmp_path)
    drv = {"opencode": sa.OpenCodeDriver, "codex": sa.CodexDriver, "claude": sa.ClaudeDriver,
           "pi": sa.PiDriver, "dsh": sa.DshDriver}[driver]()
    with sa.SandboxAgent(driver=drv, fake_model_script=SCRIPT, timeout=TURN) as agent:
        print(agent.ask("write a quicksort in Python, save it to /tmp/qs.py"))

        code, out = agent.container.exec(["python3", "/tmp/qs.py"])
        agent.container.download("/tmp/qs.py", "./qs.py")
        name = agent.container.name
        assert name in engine_containers()
    assert (code, out) == (0, "[1, 2, 3]\n")
    assert (tmp_path / "qs.py").read_text() == QS
    assert name not in engine_containers(), "the container outlived the with-block"


def test_audit_root_and_audit_off(tmp_path, monkeypatch):
    on, off = tmp_path / "on", tmp_path / "off"
    monkeypatch.setattr(audit, "AUDIT_ROOT", str(on))
    with sa.SandboxAgent(driver=DRIVERS[0], fake_model_script={"responses": [{"text": "A"}]}, timeout=TURN) as a:
        a.ask("hi")
        d = a.last_result["audit_dir"]
    assert d.startswith(str(on) + os.sep)
    for f in ("events.jsonl", "session.jsonl", "status.json"):
        assert os.path.getsize(os.path.join(d, f)) > 0
    # audit=False on an engine whose own root is "off", the package's
    # AUDIT_ROOT set to "off2": neither gets a byte.
    off2 = tmp_path / "off2"
    monkeypatch.setattr(audit, "AUDIT_ROOT", str(off2))
    eng = sa.Engine.start(env={"SANDBOX_AGENT_AUDIT_ROOT": str(off)})
    try:
        with sa.SandboxAgent(driver=DRIVERS[0], audit=False, fake_model_script={"responses": [{"text": "B"}]},
                             timeout=TURN, engine=eng) as a:
            assert a.ask("hi") == "B"
            assert not a.last_result.get("audit_dir")
        for d in (off, off2):
            assert not d.exists() or list(d.rglob("*")) == [], "audit=False wrote under %s" % d
        # The control: audit on, on the same engine, writes under off2.
        with sa.SandboxAgent(driver=DRIVERS[0], fake_model_script={"responses": [{"text": "C"}]},
                             timeout=TURN, engine=eng) as a:
            a.ask("hi")
            assert a.last_result["audit_dir"].startswith(str(off2) + os.sep)
    finally:
        eng.close()


def test_stream_and_errors():
    script = {"responses": [{"tool": "shell", "command": "echo hi > /tmp/x"}, {"text": "done"}]}
    with sa.SandboxAgent(driver=DRIVERS[0], fake_model_script=script, timeout=TURN) as a:
        kinds = [e.kind for e in a.stream("run it")]
        assert "tool_call" in kinds and "tool_result" in kinds
        assert a.last_result["reply"] == "done"
        r = a.container.run(["sh", "-c", "sleep 20"], timeout=1)
        assert r.timed_out
        with pytest.raises(sa.NotFoundError):
            a.container.read_file("/nonexistent")
    with pytest.raises(sa.InvalidArgumentError):
        sa.SandboxAgent(driver=DRIVERS[0], memory="1k")
    bad = {"responses": [{"error": 401, "message": "invalid api key"}]}
    with sa.SandboxAgent(driver=DRIVERS[0], fake_model_script=bad, timeout=TURN) as a:
        with pytest.raises(sa.DriverError) as ei:
            a.ask("hi")
        assert ei.value.status == 422 and ei.value.driver == DRIVERS[0]


def test_one_engine_per_process():
    with sa.SandboxAgent(driver=DRIVERS[0], fake_model_script={"responses": []}) as a, \
            sa.SandboxAgent(driver=DRIVERS[0], fake_model_script={"responses": []}) as b:
        assert a.engine is b.engine is engine()
        assert a.engine.process is not None and a.engine.process.poll() is None


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_engine_ends_with_its_process(tmp_path, how):
    # A child Python starts an agent, then exits normally or is killed: the
    # engine stops (its stdin's end) and removes the sandbox either way.
    child = tmp_path / "child.py"
    child.write_text(textwrap.dedent("""
        import sys, time
        import sandbox_agent as sa
        a = sa.SandboxAgent(driver=%r, fake_model_script={"responses": []})
        print(a.engine.process.pid, a.container.name, flush=True)
        if sys.argv[1] == "sigkill":
            time.sleep(600)
    """ % DRIVERS[0]))
    p = subprocess.Popen([sys.executable, str(child), how], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().split()
    assert len(line) == 2, "the child printed %r" % line
    pid, name = int(line[0]), line[1]
    assert name in engine_containers()
    if how == "sigkill":
        p.send_signal(signal.SIGKILL)
    p.wait(120)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        # A zombie (its parent gone, not reaped yet) counts as ended.
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the engine (pid %d) outlived its process by 120 s" % pid)
    assert name not in engine_containers(), "the engine left its sandbox behind"


def test_smoke():
    # The seed's main.py behaviours through the package, for the drivers
    # under test, in parallel.
    assert smoke.main(DRIVERS) == 0


def test_repo_changes(tmp_path):
    # A repository in, the agent's commit out as a branch of it.
    git = shutil.which("git")
    assert git, "git is needed on the host for repositories"
    repo = tmp_path / "repo"
    repo.mkdir()

    def g(*args):
        return subprocess.run([git, "-C", str(repo)] + list(args), check=True, capture_output=True,
                              text=True).stdout.strip()

    g("init", "-q", "-b", "main")
    (repo / "README").write_text("hello\n")
    g("add", "README")
    g("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "first")
    script = {"responses": [{"tool": "shell", "command": "echo agent > new.txt && git add new.txt && "
                                                         "git commit -qm 'agent work'"}, {"text": "done"}]}
    with sa.SandboxAgent(driver=DRIVERS[0], fake_model_script=script, timeout=TURN,
                         repo={"path": str(repo), "branch": "sandbox-agent/py"}) as a:
        a.ask("commit a file")
        ch = a.changes()
        assert ch["branch"] == "sandbox-agent/py" and len(ch["commits"]) == 1, ch
        bundle = a.changes(format="bundle")
        assert bundle.startswith(b"# v")
    assert g("show", "sandbox-agent/py:new.txt") == "agent"
    assert g("rev-parse", "--abbrev-ref", "HEAD") == "main" and g("status", "--porcelain") == ""
