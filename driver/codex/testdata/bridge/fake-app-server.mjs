// A scripted stand-in for `codex app-server` in the bridge's test: the
// peer's side of the protocol the bridge must keep (requests it sends the
// client, an interrupt, a clean). What it received the client answer to
// its own request with comes back as a test/answer notification.
import readline from "node:readline";

const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const thread = "01a23e0c-0000-7000-8000-0000000000aa";
let turns = 0;
let running = null;

const rl = readline.createInterface({ input: process.stdin });
rl.on("line", (line) => {
  const m = JSON.parse(line);
  if (m.method === undefined) {
    // The client's answer to our request.
    out({ method: "test/answer", params: m });
    return;
  }
  out({ method: "test/got", params: { method: m.method, params: m.params ?? null } });
  switch (m.method) {
    case "initialize":
      out({ id: m.id, result: { userAgent: "fake" } });
      return;
    case "initialized":
      return;
    case "thread/start":
      out({ id: "srv-1", method: "item/commandExecution/requestApproval", params: { threadId: thread, itemId: "x", command: "rm -rf /" } });
      out({ method: "thread/started", params: { thread: { id: thread } } });
      out({ id: m.id, result: { thread: { id: thread } } });
      return;
    case "turn/start": {
      const id = "turn-" + ++turns;
      out({ id: m.id, result: { turn: { id, status: "inProgress" } } });
      out({ method: "turn/started", params: { threadId: thread, turn: { id } } });
      // A turn/completed of another thread must not end this turn.
      out({ method: "turn/completed", params: { threadId: "01a23e0c-0000-7000-8000-0000000000bb", turn: { id: "other", status: "completed" } } });
      if (m.params.input[0].text === "hang") {
        running = id;
        return;
      }
      out({ method: "item/completed", params: { threadId: thread, turnId: id, item: { type: "agentMessage", id: "m" + turns, text: "ANSWER " + turns } } });
      out({ method: "turn/completed", params: { threadId: thread, turn: { id, status: "completed" } } });
      return;
    }
    case "turn/interrupt":
      out({ id: m.id, result: {} });
      if (running === m.params.turnId) {
        out({ method: "turn/completed", params: { threadId: thread, turn: { id: running, status: "interrupted" } } });
        running = null;
      }
      return;
    case "thread/backgroundTerminals/clean":
      out({ id: m.id, result: {} });
      return;
    default:
      out({ id: m.id, error: { code: -32601, message: "unknown method" } });
  }
});
rl.on("close", () => process.exit(0));
