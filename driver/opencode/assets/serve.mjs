// sandbox-agent's long-lived opencode: runs `opencode serve` on the
// container's loopback and turns it into a stdin/stdout process, one JSON
// command per stdin line, the same JSON lines `opencode run --format json`
// prints on stdout (it mirrors run's event loop), and after each turn
// {"type":"turn_end"}.
//
// Commands:
//   {"type":"prompt","sessionID":ID or "","text":T,"model":{"providerID","modelID"} or null}
//   {"type":"abort"}                  interrupts the running turn
//   {"type":"warm"}                   makes the next new session ahead → {"type":"warm_done"}
//   {"type":"warm_turn","model":…}    a prompt on a throwaway session → {"type":"warm_turn_done"}
// It exits when stdin closes or the server exits (with its exit code), and
// after a turn when the server's memory passed SANDBOX_AGENT_OPENCODE_MAX_RSS_MB
// (the next turn starts another on the same session).
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { constants } from "node:os";
import readline from "node:readline";

const maxRSS = Number(process.env.SANDBOX_AGENT_OPENCODE_MAX_RSS_MB || 0) * 1024 * 1024;

// Only this process may talk to the server (the agent's own tools run
// under it and could, but nothing else in the sandbox).
const password = randomBytes(24).toString("hex");
const auth = "Basic " + Buffer.from("opencode:" + password).toString("base64");
const server = spawn("opencode", ["serve", "--hostname", "127.0.0.1", "--port", "0"], {
  env: { ...process.env, OPENCODE_SERVER_PASSWORD: password },
  stdio: ["ignore", "pipe", "inherit"],
});
server.on("error", (e) => fail("start opencode serve: " + e.message));
// The server's end is the bridge's, with its exit status (128+signal as a
// shell reports it).
server.on("exit", (code, signal) => {
  process.stderr.write(`opencode serve exited (${signal || code})\n`);
  process.exit(signal ? 128 + (constants.signals[signal] || 0) : code || 1);
});

function fail(msg) {
  process.stderr.write("sandbox-agent opencode bridge: " + msg + "\n");
  server.kill("SIGKILL");
  process.exit(1);
}

function out(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

const base = await new Promise((resolve) => {
  let buf = "";
  const timer = setTimeout(() => fail("opencode serve did not say where it listens within 120 s"), 120000);
  server.stdout.on("data", (d) => {
    buf += d.toString();
    const m = /listening on (http:\/\/[^\s]+)/.exec(buf);
    if (m) {
      clearTimeout(timer);
      server.stdout.removeAllListeners("data");
      server.stdout.resume(); // nothing more of interest
      resolve(m[1].replace(/\/$/, ""));
    }
  });
});

async function api(method, path, body) {
  const res = await fetch(base + path, {
    method,
    headers: { authorization: auth, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let data;
  try {
    data = text ? JSON.parse(text) : undefined;
  } catch {
    data = text;
  }
  return { ok: res.ok, status: res.status, data };
}

// The running turn, or null; abortWanted: an abort came while the turn
// was still being set up.
let turn = null;
let pending = 0;
let abortWanted = false;

// The non-interactive rules of `opencode run` (it denies the tools that
// wait for a human); everything else that asks is approved once, as with
// run --auto.
const rules = [
  { permission: "question", action: "deny", pattern: "*" },
  { permission: "plan_enter", action: "deny", pattern: "*" },
  { permission: "plan_exit", action: "deny", pattern: "*" },
];

function onEvent(event) {
  const t = turn;
  if (!t) return;
  const props = event.properties || {};
  const emit = (type, data) => out({ type, timestamp: Date.now(), sessionID: t.sessionID, ...data });
  switch (event.type) {
    case "session.created":
      if (props.info?.parentID && t.sessions.has(props.info.parentID)) t.sessions.add(props.info.id);
      return;
    case "message.part.updated": {
      const part = props.part;
      if (!part || part.sessionID !== t.sessionID) return;
      if (part.type === "tool" && (part.state?.status === "completed" || part.state?.status === "error")) emit("tool_use", { part });
      else if (part.type === "step-start") emit("step_start", { part });
      else if (part.type === "step-finish") emit("step_finish", { part });
      else if (part.type === "text" && part.time?.end) emit("text", { part });
      else if (part.type === "reasoning" && part.time?.end) emit("reasoning", { part });
      return;
    }
    case "session.error":
      if (props.sessionID === t.sessionID && props.error) emit("error", { error: props.error });
      return;
    case "session.status":
      // Idle after busy: the prompt ran. (The answer to the prompt's
      // request may come before these events do, on a loaded machine by
      // seconds: the turn waits for them.)
      if (props.sessionID !== t.sessionID) return;
      if (props.status?.type === "busy") t.busy = true;
      if (props.status?.type === "idle" && t.busy) {
        t.idle = true;
        t.check();
      }
      return;
    case "permission.asked":
      if (t.sessions.has(props.sessionID)) api("POST", `/permission/${encodeURIComponent(props.id)}/reply`, { reply: "once" }).catch(() => {});
      return;
  }
}

// The event stream, read for the bridge's whole life.
await new Promise((resolve) => {
  (async () => {
    const res = await fetch(base + "/event", { headers: { authorization: auth, accept: "text/event-stream" } });
    if (!res.ok) fail(`GET /event: HTTP ${res.status}`);
    const decoder = new TextDecoder();
    let buf = "";
    for await (const chunk of res.body) {
      buf += decoder.decode(chunk, { stream: true });
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const frame = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const data = frame
          .split("\n")
          .filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).trimStart())
          .join("\n");
        if (!data) continue;
        let event;
        try {
          event = JSON.parse(data);
        } catch {
          continue;
        }
        if (event.type === "server.connected") resolve();
        onEvent(event);
      }
    }
    throw new Error("it ended");
    // As the server's death ends the stream, give its exit a moment to
    // report that instead.
  })().catch((e) => setTimeout(() => fail("the server's event stream: " + e.message), 1000));
});

function bridgeError(sessionID, message) {
  out({ type: "error", timestamp: Date.now(), sessionID, error: { name: "UnknownError", data: { message } } });
}

function rssBytes() {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${server.pid}/status`, "utf8"));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

// run --title without a value: the prompt's start.
function titleOf(text) {
  return text.slice(0, 50) + (text.length > 50 ? "..." : "");
}

// warmed is a session made ahead by a warm command for the next prompt
// that names none.
let warmed = "";

// warm gets the next new session's first turn ready: the server is up
// (no command is read before), its session made and the providers
// loaded, so that turn costs what a follow-up costs.
async function warm() {
  if (!warmed) {
    const created = await api("POST", "/session", { title: "sandbox-agent", permission: rules });
    if (!created.ok || !created.data?.id) {
      bridgeError("", `create session: HTTP ${created.status} ${JSON.stringify(created.data)}`);
      out({ type: "warm_done", ok: false });
      return;
    }
    warmed = created.data.id;
  }
  await api("GET", "/config/providers").catch(() => {});
  out({ type: "warm_done", ok: true });
}

// warmTurn runs a prompt on a throwaway session, then deletes it: the
// server's lazy loading at its first prompt is done before the first
// turn. The agent answers its model requests itself (nothing reaches the
// model), and the events of a session that is no turn's are not printed.
async function warmTurn(cmd) {
  const created = await api("POST", "/session", { title: "sandbox-agent warm-up", permission: rules });
  if (created.ok && created.data?.id) {
    const id = encodeURIComponent(created.data.id);
    const body = { parts: [{ type: "text", text: "sandbox-agent warm-up: reply DONE" }] };
    if (cmd.model) body.model = cmd.model;
    await api("POST", `/session/${id}/message`, body).catch(() => {});
    await api("DELETE", `/session/${id}`).catch(() => {});
  }
  out({ type: "warm_turn_done", ok: !!created.ok });
}

async function prompt(cmd) {
  const text = String(cmd.text ?? "");
  let sessionID = cmd.sessionID || "";
  if (sessionID) {
    const got = await api("GET", `/session/${encodeURIComponent(sessionID)}`);
    if (!got.ok) {
      // run's words for it (and its exit code 1).
      process.stderr.write("Error: Session not found\n");
      bridgeError(sessionID, "Session not found");
      out({ type: "turn_end", sessionID });
      return;
    }
  } else if (warmed) {
    // The session a warm command made ahead: it gets its title now.
    sessionID = warmed;
    warmed = "";
    api("PATCH", `/session/${encodeURIComponent(sessionID)}`, { title: titleOf(text) }).catch(() => {});
  } else {
    const created = await api("POST", "/session", { title: titleOf(text), permission: rules });
    if (!created.ok || !created.data?.id) {
      bridgeError("", `create session: HTTP ${created.status} ${JSON.stringify(created.data)}`);
      out({ type: "turn_end" });
      return;
    }
    sessionID = created.data.id;
  }
  await new Promise((resolve) => {
    const t = {
      sessionID,
      sessions: new Set([sessionID]),
      busy: false,
      idle: false,
      answered: false,
      check() {
        if (this.idle && this.answered) resolve();
      },
    };
    turn = t;
    if (abortWanted) setTimeout(abort, 50); // once the prompt is in
    const body = { parts: [{ type: "text", text }] };
    if (cmd.model) body.model = cmd.model;
    api("POST", `/session/${encodeURIComponent(sessionID)}/message`, body)
      .then((res) => {
        if (!res.ok) {
          out({ type: "error", timestamp: Date.now(), sessionID, error: res.data });
          t.idle = true; // a refused prompt never runs
        }
      })
      // A failed request is most likely a dead server, whose exit ends
      // the bridge (no turn_end): wait a moment for it.
      .catch((e) => new Promise((r) => setTimeout(r, 1000)).then(() => {
        bridgeError(sessionID, "prompt: " + e.message);
        t.idle = true;
      }))
      .finally(() => {
        t.answered = true;
        t.check();
      });
  });
  turn = null;
  abortWanted = false;
  out({ type: "turn_end", sessionID });
  if (maxRSS > 0 && rssBytes() > maxRSS) {
    process.stderr.write(`opencode serve uses more than ${maxRSS >> 20} MiB; stopping it\n`);
    server.removeAllListeners("exit");
    server.kill("SIGTERM");
    process.exit(0);
  }
}

function abort() {
  if (turn) api("POST", `/session/${encodeURIComponent(turn.sessionID)}/abort`).catch(() => {});
}

// Commands run in order; an abort goes at once to the running turn.
let queue = Promise.resolve();
const rl = readline.createInterface({ input: process.stdin });
rl.on("line", (line) => {
  if (!line.trim()) return;
  let cmd;
  try {
    cmd = JSON.parse(line);
  } catch {
    process.stderr.write("sandbox-agent opencode bridge: not JSON: " + line.slice(0, 200) + "\n");
    return;
  }
  if (cmd.type === "abort") {
    if (turn) abort();
    else if (pending > 0) abortWanted = true;
    return;
  }
  if (cmd.type === "warm" || cmd.type === "warm_turn") {
    queue = queue.then(() => (cmd.type === "warm" ? warm() : warmTurn(cmd))).catch((e) => fail(cmd.type + ": " + e.message));
    return;
  }
  if (cmd.type === "prompt") {
    pending++;
    queue = queue
      .then(() => prompt(cmd))
      .catch((e) => fail("turn: " + e.message))
      .finally(() => pending--);
  }
});
rl.on("close", () => {
  queue.finally(() => {
    server.removeAllListeners("exit");
    server.kill("SIGTERM");
    process.exit(0);
  });
});
