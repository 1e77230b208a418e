"""The seed's example with the package, on the built-in fake model (no key needed).

    pip install "$(bash .ci/build_wheel.sh | tail -n1)"     # once, from a checkout
    python3 examples/python/example.py [DRIVER]            # default claude

The fake model plays the LLM: it asks the CLI to write /tmp/qs.py with its
own write tool, then answers. The real CLI runs in its container; the
example checks the file with exec, brings it home, and the with-block
destroys the container. With a real model, drop fake_model_script and give
the driver its key: OpenCodeDriver(provider="zhipuai-coding-plan", api_key=...).
"""

import sys

from sandbox_agent import SandboxAgent, SandboxAgentError, drivers

QS = """def qs(a):
    return a if len(a) < 2 else qs([x for x in a[1:] if x < a[0]]) + [a[0]] + qs([x for x in a[1:] if x >= a[0]])

print(qs([5, 3, 8, 1]))
"""
SCRIPT = {"responses": [{"tool": "write", "path": "/tmp/qs.py", "content": QS}, {"text": "Saved /tmp/qs.py."}]}


def main() -> int:
    name = sys.argv[1] if len(sys.argv) > 1 else "claude"
    driver = drivers.driver_for(name)
    try:
        with SandboxAgent(driver=driver, fake_model_script=SCRIPT, timeout=300) as agent:
            for event in agent.stream("write a quicksort in Python, save it to /tmp/qs.py"):
                if event.kind == "tool_call":
                    print("  tool call:", event.payload.get("tool"), event.payload.get("path") or "")
            print("reply:", agent.last_result["reply"])

            code, out = agent.container.exec(["python3", "/tmp/qs.py"])
            print("exec:", code, out.strip())
            print("downloaded:", agent.container.download("/tmp/qs.py", "./qs.py"))
    except SandboxAgentError as e:
        print("error:", e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
