"""What the Python package adds to a turn, and how long its engine takes to start.

    python python/benchmarks/bench_ask.py [--turns N] [--driver pi] [--json]

Run from an installed wheel (BenchmarkPythonAsk in cmd/sandbox-agent does
that). Measured in one run:

- start: the private engine's first start (``Engine.start``: the process,
  its container engine connection, serving) against the baseline of a plain
  run of the same binary (``sandbox-agent version``);
- ask: N turns of one agent on the fake model, each timed around
  ``agent.ask`` in Python, against the same turn's duration in the engine
  (the Go API's ``Agent.Ask``, reported as ``duration_ms``): the overhead
  is the difference, turn by turn (HTTP, JSON, the server's bookkeeping).
"""

import argparse
import json
import statistics
import subprocess
import sys
import time

from sandbox_agent import Engine, SandboxAgent
from sandbox_agent.engine import binary_path


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--driver", default="pi")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    binary = binary_path()
    base = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([binary, "version"], check=True, stdout=subprocess.DEVNULL)
        base.append(time.perf_counter() - t0)
    starts = []
    for _ in range(3):
        e = Engine.start()
        starts.append(e.started_in)
        e.close()
    eng = Engine.start()
    try:
        script = {"responses": [{"text": "ok %d" % i} for i in range(a.turns + 1)]}
        with SandboxAgent(driver=a.driver, fake_model_script=script, engine=eng, timeout=300) as agent:
            agent.ask("warm up")  # the CLI's first start is not the package's
            wall, inner = [], []
            for i in range(a.turns):
                t0 = time.perf_counter()
                agent.ask("turn %d" % i)
                wall.append((time.perf_counter() - t0) * 1000)
                inner.append(float(agent.last_result["duration_ms"]))
    finally:
        eng.close()
    over = [w - g for w, g in zip(wall, inner)]
    res = {
        "turns": a.turns,
        "ask_p50_ms": round(statistics.median(wall), 2),
        "engine_p50_ms": round(statistics.median(inner), 2),
        "overhead_p50_ms": round(statistics.median(over), 2),
        "overhead_p90_ms": round(pct(over, 90), 2),
        "start_ms": round(statistics.median(starts) * 1000, 1),
        "start_baseline_ms": round(statistics.median(base) * 1000, 1),
    }
    res["start_ratio"] = round(res["start_ms"] / res["start_baseline_ms"], 2)
    if a.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print("%-18s %s" % (k, v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
