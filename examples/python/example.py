"""Drive an agent on a running ``sandbox-agent serve`` (no model key needed).

    python3 examples/python/example.py

It reads SANDBOX_AGENT_URL and SANDBOX_AGENT_TOKEN (or the serve token file),
starts a codex agent on the built-in fake model scripted to run one shell
tool, prints the turn's tool calls as they stream, checks the file with
exec, downloads it, and closes the agent.
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sandbox_agent import SandboxAgent, SandboxAgentError  # noqa: E402

SCRIPT = {"responses": [
    {"tool": "shell", "command": "mkdir -p /tmp/out && echo hello from the sandbox > /tmp/out/hello.txt"},
    {"text": "DONE"},
]}


def main() -> int:
    driver = os.environ.get("SANDBOX_AGENT_TEST_DRIVER", "codex")
    try:
        with SandboxAgent(driver, fake_model_script=SCRIPT, timeout=240) as agent:
            print("agent", agent.id, "in container", agent.info.get("container"))
            turn = agent.stream("Write /tmp/out/hello.txt, then answer DONE.")
            for event in turn:
                p = event.get("payload", {})
                if event["kind"] == "tool_call":
                    print("  tool call:", p.get("tool"), p.get("command") or p.get("path") or "")
                elif event["kind"] == "tool_result":
                    print("  tool result: exit", p.get("exit_code"))
            print("reply:", agent.last_result["reply"])
            res = agent.exec(["cat", "/tmp/out/hello.txt"])
            print("exec cat:", res["exit_code"], res["stdout"].strip())
            dest = tempfile.mkdtemp(prefix="sandbox-agent-example-")
            names = agent.download("/tmp/out/hello.txt", dest)
            for name in names:
                print("downloaded", os.path.join(dest, name))
    except SandboxAgentError as e:
        print("error:", e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
