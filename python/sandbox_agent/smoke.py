"""End-to-end smoke test through this package, the Python twin of ``sandbox-agent smoke``.

::

    python -m sandbox_agent.smoke                 # opencode
    python -m sandbox_agent.smoke claude codex    # some drivers
    python -m sandbox_agent.smoke all [--json]    # all five, in parallel

Each driver's agents talk to a fake model (the engine binary's
``fake-model serve``, a real HTTP server the real CLI talks to) through the
driver's ``base_url`` and ``api_key``: no model key is needed, and every
request the CLI made is on record for the checks. Steps: container I/O,
ask, tool events, continue, fork isolation, skills and rules, delete and
dump, audit, load into a second container, a bad key raising
DriverError. A step the driver cannot do is "n/a". Exit status 1 when a
step failed, 2 on bad usage.
"""

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from . import drivers as _drivers
from .agent import SandboxAgent
from .engine import binary_path, engine
from .errors import DriverError, SandboxAgentError, UnsupportedError

STEPS = ["container_io", "ask", "tool_events", "continue", "fork_isolation", "skills_rules", "delete_dump",
         "audit", "load", "bad_key"]
DRIVERS = ["opencode", "codex", "claude", "pi", "dsh"]
TURN_TIMEOUT = 300.0


class NA(Exception):
    """The driver cannot do this step."""


class FakeModel:
    """The engine binary's fake model on a free port of the loopback, with its request log."""

    def __init__(self, script: Dict[str, Any]):
        self.dir = tempfile.mkdtemp(prefix="sandbox-agent-smoke-")
        path = os.path.join(self.dir, "script.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(script, f)
        self.log = os.path.join(self.dir, "requests.jsonl")
        ready = os.path.join(self.dir, "ready")
        errlog = os.path.join(self.dir, "stderr")
        with open(errlog, "wb") as err:
            self.proc = subprocess.Popen([binary_path(), "fake-model", "serve", "--listen", "127.0.0.1:0",
                                          "--script", path, "--log", self.log, "--ready-file", ready],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + 30
        addr = ""
        while not addr:
            try:
                with open(ready, encoding="utf-8") as f:
                    addr = f.read().strip()
            except FileNotFoundError:
                pass
            if not addr and (self.proc.poll() is not None or time.monotonic() > deadline):
                with open(errlog, encoding="utf-8", errors="replace") as f:
                    msg = f.read()[-2000:]
                self.close()
                raise RuntimeError("the fake model did not start: %s" % msg)
            time.sleep(0.01)
        self.url = "http://%s/v1" % addr

    def requests(self) -> List[str]:
        """Every request so far, as its raw JSON line."""
        try:
            with open(self.log, encoding="utf-8") as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def saw(self, since: int, *needles: str) -> bool:
        """Whether a request after the first ``since`` holds every needle."""
        return any(all(n in line for n in needles) for line in self.requests()[since:])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Run:
    """One driver's steps, in order; a step's failure does not stop the next ones."""

    def __init__(self, name: str, progress: Callable[[Dict[str, Any]], None]):
        self.name, self.progress = name, progress
        self.key = "sk-smoke-" + secrets.token_hex(16)
        self.marker = "M" + secrets.token_hex(4)
        self.fake = None  # type: Optional[FakeModel]
        self.agent = None  # type: Optional[SandboxAgent]
        self.first = {}  # type: Dict[str, Any]
        self.orig = ""
        self.fork_id = ""
        self.dump = None  # type: Optional[Dict[str, Any]]

    def driver(self, key: Optional[str] = None) -> _drivers.BaseDriver:
        cls = _drivers._BY_NAME[self.name]
        assert self.fake is not None
        return cls(api_key=key or self.key, base_url=self.fake.url)

    def start(self, key: Optional[str] = None) -> SandboxAgent:
        return SandboxAgent(driver=self.driver(key), timeout=TURN_TIMEOUT)

    def run(self) -> List[Dict[str, Any]]:
        results = []
        try:
            self.fake = FakeModel({"expect_key": self.key, "responses": [
                {"text": "SMOKE-ASK " + self.marker},
                {"tool": "shell", "command": "echo smoke-%s > /tmp/smoke-tool.txt" % self.marker},
                {"text": "DONE"},
            ]})
            self.agent = self.start()
        except Exception as e:  # noqa: BLE001 - every step fails with the reason
            for step in STEPS:
                results.append(self._result(step, "fail", 0.0, "set-up: %s" % e))
                self.progress(results[-1])
            self._close()
            return results
        try:
            for step in STEPS:
                t0 = time.monotonic()
                try:
                    getattr(self, "step_" + step)()
                    status, detail = "pass", ""
                except NA as e:
                    status, detail = "n/a", str(e)
                except UnsupportedError as e:
                    status, detail = "n/a", e.message
                except Exception as e:  # noqa: BLE001
                    status, detail = "fail", "%s: %s" % (type(e).__name__, e)
                results.append(self._result(step, status, time.monotonic() - t0, detail))
                self.progress(results[-1])
        finally:
            self._close()
        return results

    def _result(self, step: str, status: str, secs: float, detail: str) -> Dict[str, Any]:
        return {"driver": self.name, "step": step, "status": status, "seconds": round(secs, 2), "detail": detail}

    def _close(self) -> None:
        if self.agent is not None:
            try:
                self.agent.close()
            except SandboxAgentError:
                pass
        if self.fake is not None:
            self.fake.close()

    # --- the steps ---

    def step_container_io(self) -> None:
        c = self.agent.container  # type: ignore[union-attr]
        c.write_file("/tmp/smoke/in.txt", "in " + self.marker)
        if c.read_file("/tmp/smoke/in.txt") != ("in " + self.marker).encode():
            raise AssertionError("read_file gave other bytes than write_file wrote")
        code, out = c.exec(["sh", "-c", "cat /tmp/smoke/in.txt; echo err >&2; exit 3"])
        if code != 3 or "in " + self.marker not in out or "err" not in out:
            raise AssertionError("exec: %r %r" % (code, out))
        r = c.run(["sleep", "30"], timeout=1)
        if not r.timed_out:
            raise AssertionError("a command past its timeout was not stopped: %r" % (r,))
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "up", "sub"))
            with open(os.path.join(d, "up", "sub", "f.txt"), "w") as f:
                f.write("up")
            c.upload(os.path.join(d, "up"), "/tmp/smoke/up")
            got = c.download("/tmp/smoke/up", os.path.join(d, "down"))
            with open(os.path.join(got, "sub", "f.txt")) as f:
                if f.read() != "up":
                    raise AssertionError("the downloaded directory differs")
            got = c.download("/tmp/smoke/in.txt", os.path.join(d, "in.txt"))
            with open(got) as f:
                if f.read() != "in " + self.marker:
                    raise AssertionError("the downloaded file differs")

    def step_ask(self) -> None:
        reply = self.agent.ask("Say the code word " + self.marker)  # type: ignore[union-attr]
        if "SMOKE-ASK " + self.marker not in reply:
            raise AssertionError("reply %r" % reply)
        self.first = self.agent.last_result or {}  # type: ignore[union-attr]
        self.orig = self.first.get("session_id") or ""
        if not self.orig:
            raise AssertionError("the turn has no session id")

    def step_tool_events(self) -> None:
        kinds = [e.kind for e in self.agent.stream("Write the file.")]  # type: ignore[union-attr]
        if "tool_call" not in kinds or "tool_result" not in kinds:
            raise AssertionError("events %s: want tool_call and tool_result" % kinds)
        code, out = self.agent.container.exec(["cat", "/tmp/smoke-tool.txt"])  # type: ignore[union-attr]
        if code != 0 or "smoke-" + self.marker not in out:
            raise AssertionError("the tool's file: %r %r" % (code, out))

    def step_continue(self) -> None:
        assert self.fake is not None and self.agent is not None
        n = len(self.fake.requests())
        m = "C" + secrets.token_hex(4)
        self.agent.ask("Continue " + m)
        if self.agent.last_result.get("session_id") != self.orig:  # type: ignore[union-attr]
            raise AssertionError("the session changed: %s" % self.agent.last_result.get("session_id"))  # type: ignore[union-attr]
        if not self.fake.saw(n, m, self.marker):
            raise AssertionError("the model did not see the first turn's words with the second's")

    def step_fork_isolation(self) -> None:
        assert self.fake is not None and self.agent is not None
        self.fork_id = self.agent.fork(self.orig)
        if not self.fork_id or self.fork_id == self.orig:
            raise AssertionError("fork id %r" % self.fork_id)
        fm = "F" + secrets.token_hex(4)
        self.agent.use_session(self.fork_id)
        n = len(self.fake.requests())
        self.agent.ask("In the fork " + fm)
        if not self.fake.saw(n, fm, self.marker):
            raise AssertionError("the fork did not carry the original's history")
        self.agent.use_session(self.orig)
        om = "O" + secrets.token_hex(4)
        n = len(self.fake.requests())
        self.agent.ask("Back in the original " + om)
        if not self.fake.saw(n, om):
            raise AssertionError("the original's turn did not reach the model")
        if self.fake.saw(n, om, fm):
            raise AssertionError("the fork's turn leaked into the original session")

    def step_skills_rules(self) -> None:
        assert self.fake is not None and self.agent is not None
        rule = "R" + secrets.token_hex(4)
        done = []
        try:
            self.agent.install_rules("Smoke rule %s: keep answers short.\n" % rule)
            done.append(rule)
        except UnsupportedError:
            pass
        skill = "smoke-skill-" + secrets.token_hex(3)
        try:
            self.agent.install_skill(skill, {"SKILL.md": "---\nname: %s\ndescription: Smoke skill %s.\n---\n"
                                                          "Say SMOKE.\n" % (skill, skill)})
            done.append(skill)
        except UnsupportedError:
            pass
        if not done:
            raise NA("the driver takes neither rules nor skills")
        self.agent.new_session()
        n = len(self.fake.requests())
        self.agent.ask("Rules check " + self.marker)
        for needle in done:
            if not self.fake.saw(n, needle):
                raise AssertionError("%s did not reach the model" % needle)
        self.agent.use_session(self.orig)

    def step_delete_dump(self) -> None:
        assert self.agent is not None
        self.dump = self.agent.dump_session(self.orig)
        if not self.dump.get("files"):
            raise AssertionError("the dump has no files")
        if self.fork_id:
            self.agent.delete_session(self.fork_id)
            ids = [s.get("id") for s in self.agent.sessions().get("sessions", [])]
            if self.fork_id in ids:
                raise AssertionError("the deleted fork is still listed")

    def step_audit(self) -> None:
        d = self.first.get("audit_dir")
        if not d:
            raise AssertionError("the first turn has no audit folder")
        for name in ("events.jsonl", "session.jsonl", "status.json"):
            p = os.path.join(d, name)
            with open(p, "rb") as f:
                data = f.read()
            if not data:
                raise AssertionError("%s is empty" % p)
            if self.key.encode() in data:
                raise AssertionError("the key is in %s" % p)

    def step_load(self) -> None:
        assert self.fake is not None
        if not self.dump:
            raise AssertionError("no dump from the previous step")
        with self.start() as other:
            sid = other.load_session(self.dump)
            other.use_session(sid)
            m = "L" + secrets.token_hex(4)
            n = len(self.fake.requests())
            other.ask("Continue in another container " + m)
            if not self.fake.saw(n, m, self.marker):
                raise AssertionError("the loaded session's history did not reach the model")

    def step_bad_key(self) -> None:
        bad = "sk-invalid-" + secrets.token_hex(12)
        with self.start(bad) as a:
            try:
                a.ask("Say hello.", timeout=TURN_TIMEOUT)
            except DriverError as e:
                if bad in str(e) or bad in json.dumps(e.body):
                    raise AssertionError("the key leaked into the DriverError") from None
                return
            raise AssertionError("a bad key did not raise DriverError")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sandbox_agent.smoke", description=__doc__.split("\n\n")[0])
    p.add_argument("drivers", nargs="*", help="opencode, codex, claude, pi, dsh or all (default opencode)")
    p.add_argument("--json", action="store_true", help="print each step result as a JSON line")
    a = p.parse_args(argv)
    names = a.drivers or ["opencode"]
    if names == ["all"]:
        names = list(DRIVERS)
    for n in names:
        if n not in DRIVERS:
            print("smoke: unknown driver %r (have: %s, or all)" % (n, ", ".join(DRIVERS)), file=sys.stderr)
            return 2
    t0 = time.monotonic()
    e = engine()
    print("engine %s started in %.0f ms" % (e.url, e.started_in * 1000), file=sys.stderr)
    lock = threading.Lock()

    def progress(r: Dict[str, Any]) -> None:
        with lock:
            if a.json:
                print(json.dumps(r), flush=True)
            else:
                print("%-9s %-15s %-5s %6.1fs %s" % (r["driver"], r["step"], r["status"], r["seconds"],
                                                       r["detail"][:300]), file=sys.stderr, flush=True)

    results = {}  # type: Dict[str, List[Dict[str, Any]]]
    threads = []
    for n in names:
        t = threading.Thread(target=lambda n=n: results.__setitem__(n, Run(n, progress).run()))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    for n in names:  # a driver whose run died is a failure, never a silent pass
        got = results.get(n) or []
        if len(got) != len(STEPS):
            results[n] = [{"driver": n, "step": st, "status": "fail", "seconds": 0.0,
                           "detail": "the driver's run ended early"} for st in STEPS]
    failed = sum(1 for rs in results.values() for r in rs if r["status"] == "fail")
    if not a.json:
        print("\n%-15s %s" % ("step", " ".join("%-9s" % n for n in names)))
        for i, step in enumerate(STEPS):
            print("%-15s %s" % (step, " ".join("%-9s" % results[n][i]["status"] for n in names)))
        print("\n%d step(s) failed; %.0f s" % (failed, time.monotonic() - t0))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
