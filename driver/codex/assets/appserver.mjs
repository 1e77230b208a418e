// sandbox-agent's long-lived codex: runs `codex app-server` (JSON-RPC
// over stdio) and turns it into a process that takes one JSON command per
// stdin line and prints app-server's notifications, one per stdout line,
// as app-server wrote them, and after each turn
// {"type":"turn_end","threadId":ID} (as the opencode bridge's).
//
// Commands:
//   {"type":"prompt","threadId":ID or "","text":T,"model":M,"cwd":C or ""}
//   {"type":"abort"}                  interrupts the running turn
//   {"type":"warm","model":M}         starts the next new session's thread now → {"type":"warm_done"}
//   {"type":"warm_turn","model":M}    a turn on a throwaway thread, deleted → {"type":"warm_turn_done"}
// The first prompt starts a thread (threadId "") or resumes one; later
// prompts run on the same thread (the agent starts another bridge for
// another session). Requests app-server sends the client (approvals and
// the like; with approval_policy "never" it sends none) are refused with a
// JSON-RPC error: nothing is granted here. It exits when stdin closes
// (closing app-server's, which exits on that) or app-server exits (with
// its exit code).
import { spawn } from "node:child_process";
import { constants } from "node:os";

// Deltas repeat what the completed items say; the Go parser reads whole
// items (as `codex exec --json` prints them).
const optOut = [
  "item/agentMessage/delta",
  "item/plan/delta",
  "item/reasoning/summaryTextDelta",
  "item/reasoning/summaryPartAdded",
  "item/reasoning/textDelta",
  "item/commandExecution/outputDelta",
  "item/fileChange/outputDelta",
  "command/exec/outputDelta",
  "process/outputDelta",
];
// A line of app-server longer than this is dropped (the Go side bounds
// lines far below it).
const maxLine = 16 << 20;

const server = spawn("codex", ["app-server"], { stdio: ["pipe", "pipe", "inherit"] });
server.on("error", (e) => fail("start codex app-server: " + e.message));
server.on("exit", (code, signal) => {
  process.stderr.write(`codex app-server exited (${signal || code})\n`);
  process.exit(signal ? 128 + (constants.signals[signal] || 0) : code ?? 1);
});
server.stdin.on("error", () => {}); // its exit reports a dead server

function fail(msg) {
  process.stderr.write("sandbox-agent codex bridge: " + msg + "\n");
  server.kill("SIGKILL");
  process.exit(1);
}

function out(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

let nextID = 1;
const pending = new Map();

function request(method, params) {
  const id = nextID++;
  server.stdin.write(JSON.stringify({ id, method, params }) + "\n");
  return new Promise((resolve) => pending.set(id, resolve));
}

// The running turn: {threadId, turnId, ended(), abortWanted, aborted}, or
// null.
let turn = null;
let thread = ""; // the thread this app-server runs
// warmWait is the throwaway turn's end while a warm_turn runs; warmed
// is the thread a warm command started (no prompt ran on it yet) and
// started its thread/started line, which the first prompt there prints
// again: that line names the session to the agent, which read (and
// dropped) the first one while warming.
let warmWait = null;
let warmed = "";
let started = new Map(); // thread id → its thread/started line, until the first prompt
let prompted = false;
const policy = { approvalPolicy: "never", sandbox: "danger-full-access" };

function onLine(text) {
  let msg;
  try {
    msg = JSON.parse(text);
  } catch {
    process.stderr.write("sandbox-agent codex bridge: a line of app-server is not JSON\n");
    return;
  }
  if (msg === null || typeof msg !== "object") return;
  const isReq = typeof msg.method === "string" && msg.id !== undefined && msg.id !== null;
  if (isReq) {
    // Nothing is approved or answered on the user's behalf.
    process.stderr.write(`sandbox-agent codex bridge: refused app-server's request ${JSON.stringify(String(msg.method).slice(0, 100))}\n`);
    server.stdin.write(JSON.stringify({ id: msg.id, error: { code: -32601, message: "sandbox-agent answers no requests" } }) + "\n");
    return;
  }
  if (msg.id !== undefined && msg.method === undefined) {
    const resolve = pending.get(msg.id);
    if (resolve) {
      pending.delete(msg.id);
      resolve(msg);
    }
    return;
  }
  if (typeof msg.method !== "string") return;
  process.stdout.write(text + "\n");
  if (msg.method === "thread/started" && !prompted && started.size < 8) {
    const id = msg.params?.thread?.id;
    if (typeof id === "string") started.set(id, text);
  }
  if (warmWait && msg.method === "turn/completed" && msg.params?.threadId === warmWait.threadId) warmWait.resolve();
  const t = turn;
  if (t && !t.turnId && msg.method === "turn/started" && t.threadId && msg.params?.threadId === t.threadId && msg.params?.turn?.id) {
    t.turnId = String(msg.params.turn.id);
    if (t.abortWanted) interrupt(t);
  }
  if (t && t.threadId && msg.method === "turn/completed" && msg.params?.threadId === t.threadId && t.turnId && msg.params?.turn?.id === t.turnId) {
    t.ended();
  }
}

// app-server's stdout, split on "\n" only (JSON escapes any other line
// break inside its strings).
{
  let parts = [];
  let size = 0;
  let dropping = false;
  server.stdout.on("data", (chunk) => {
    let start = 0;
    for (let i = chunk.indexOf(10); i >= 0; i = chunk.indexOf(10, start)) {
      if (!dropping) {
        parts.push(chunk.subarray(start, i));
        onLine(Buffer.concat(parts).toString("utf8"));
      }
      parts = [];
      size = 0;
      dropping = false;
      start = i + 1;
    }
    if (start < chunk.length && !dropping) {
      parts.push(chunk.subarray(start));
      size += chunk.length - start;
      if (size > maxLine) {
        process.stderr.write("sandbox-agent codex bridge: dropped a line of app-server over 16 MiB\n");
        parts = [];
        size = 0;
        dropping = true;
      }
    }
  });
}

function rpcError(res) {
  const e = res.error || {};
  return String(e.message || JSON.stringify(e)).slice(0, 4000);
}

function bridgeError(message) {
  out({ method: "sandbox-agent/error", params: { threadId: thread, message } });
}

const init = await request("initialize", {
  clientInfo: { name: "sandbox-agent", title: "sandbox-agent", version: "1" },
  // experimentalApi: thread/backgroundTerminals/clean (see abort).
  capabilities: { experimentalApi: true, optOutNotificationMethods: optOut },
});
if (init.error) fail("initialize: " + rpcError(init));
server.stdin.write(JSON.stringify({ method: "initialized" }) + "\n");

async function prompt(cmd) {
  const want = String(cmd.threadId || "");
  const model = cmd.model ? String(cmd.model) : null;
  const cwd = cmd.cwd ? String(cmd.cwd) : null;
  // An abort while the thread is being set up interrupts the turn once
  // it has an id.
  const t = { threadId: "", turnId: "", abortWanted: abortNext, aborted: abortNext, ended: () => {} };
  abortNext = false;
  waiting--;
  turn = t;
  if (!thread || (want && want !== thread)) {
    const res = want
      ? await request("thread/resume", { threadId: want, model, cwd, excludeTurns: true, ...policy })
      : await request("thread/start", { model, cwd, ...policy });
    if (res.error || !res.result?.thread?.id) {
      // exec's words for an unknown session.
      const msg = res.error ? rpcError(res) : "no thread in the answer";
      process.stderr.write(`Error: ${want ? "thread/resume" : "thread/start"}: ${msg}\n`);
      bridgeError(`${want ? "resume thread " + want : "start a thread"}: ${msg}`);
      turn = null;
      out({ type: "turn_end", threadId: want });
      return;
    }
    thread = res.result.thread.id; // app-server's thread/started named it
  }
  t.threadId = thread;
  if (warmed && thread === warmed) {
    // The session's name, which the agent dropped while warming.
    const line = started.get(warmed);
    if (line) process.stdout.write(line + "\n");
  }
  warmed = "";
  started.clear();
  prompted = true;
  await new Promise((resolve) => {
    t.ended = resolve;
    const params = { threadId: thread, input: [{ type: "text", text: String(cmd.text ?? ""), text_elements: [] }] };
    if (model) params.model = model;
    request("turn/start", params).then((res) => {
      if (res.error || !res.result?.turn?.id) {
        bridgeError("turn/start: " + (res.error ? rpcError(res) : "no turn in the answer"));
        resolve();
        return;
      }
      if (!t.turnId) {
        t.turnId = res.result.turn.id;
        if (t.abortWanted) interrupt(t);
      }
    });
  });
  turn = null;
  if (t.aborted) {
    // turn/interrupt leaves the turn's commands running (as background
    // terminals); an aborted turn's tools stop, as `codex exec`'s do when
    // it is killed. Bounded: a stuck answer must not hold the turn.
    const cleaned = await Promise.race([
      request("thread/backgroundTerminals/clean", { threadId: thread }),
      new Promise((r) => setTimeout(() => r({ error: { message: "no answer within 3 s" } }), 3000)),
    ]);
    if (cleaned.error) process.stderr.write("sandbox-agent codex bridge: thread/backgroundTerminals/clean: " + rpcError(cleaned) + "\n");
  }
  out({ type: "turn_end", threadId: thread });
}

async function warm(cmd) {
  if (!thread) {
    const res = await request("thread/start", { model: cmd.model ? String(cmd.model) : null, cwd: null, ...policy });
    if (res.error || !res.result?.thread?.id) {
      bridgeError("start a thread: " + (res.error ? rpcError(res) : "no thread in the answer"));
      out({ type: "warm_done", ok: false });
      return;
    }
    thread = warmed = res.result.thread.id; // the next prompt naming no thread runs there
  }
  out({ type: "warm_done", ok: true });
}

// warmTurn runs a turn on a throwaway thread, then deletes it: app-server's
// lazy loading at its first turn is done before the first real one. The
// agent answers its model requests itself (nothing reaches the model).
async function warmTurn(cmd) {
  const model = cmd.model ? String(cmd.model) : null;
  const res = await request("thread/start", { model, cwd: null, ephemeral: true, ...policy });
  const id = res.result?.thread?.id;
  if (res.error || !id) {
    out({ type: "warm_turn_done", ok: false });
    return;
  }
  let ok = true;
  await new Promise((resolve) => {
    warmWait = { threadId: id, resolve };
    const params = { threadId: id, input: [{ type: "text", text: "sandbox-agent warm-up: reply DONE", text_elements: [] }] };
    if (model) params.model = model;
    request("turn/start", params).then((r) => {
      if (r.error || !r.result?.turn?.id) {
        ok = false;
        resolve();
      }
    });
  });
  warmWait = null;
  const del = await request("thread/delete", { threadId: id });
  if (del.error) process.stderr.write("sandbox-agent codex bridge: thread/delete of the warm-up: " + rpcError(del) + "\n");
  out({ type: "warm_turn_done", ok });
}

function interrupt(t) {
  request("turn/interrupt", { threadId: t.threadId, turnId: t.turnId }).then((res) => {
    if (res.error) process.stderr.write("sandbox-agent codex bridge: turn/interrupt: " + rpcError(res) + "\n");
  });
}

// waiting: prompts read but not started yet; abortNext: an abort that came
// before the first of them started (an abort with no turn is dropped).
let waiting = 0;
let abortNext = false;

function abort() {
  const t = turn;
  if (!t) {
    if (waiting > 0) abortNext = true;
    return;
  }
  t.aborted = true;
  if (t.turnId) interrupt(t);
  else t.abortWanted = true;
}

// Commands, one per line; a prompt waits for the one before it.
let queue = Promise.resolve();
{
  let buf = "";
  process.stdin.setEncoding("utf8");
  process.stdin.on("data", (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const text = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (!text.trim()) continue;
      let cmd;
      try {
        cmd = JSON.parse(text);
      } catch {
        process.stderr.write("sandbox-agent codex bridge: a command is not JSON\n");
        continue;
      }
      if (cmd.type === "abort") abort();
      else if (cmd.type === "warm" || cmd.type === "warm_turn") {
        queue = queue.then(() => (cmd.type === "warm" ? warm(cmd) : warmTurn(cmd))).catch((e) => fail(cmd.type + ": " + e.message));
      } else if (cmd.type === "prompt") {
        waiting++;
        queue = queue.then(() => prompt(cmd)).catch((e) => fail("prompt: " + e.message));
      }
    }
  });
  process.stdin.on("end", () => server.stdin.end());
}
