// sandbox-agent's turn wrapper for dsh, installed by the sandbox-agent dsh
// driver. dsh's headless mode prints only the final text; its event stream is
// the session log. This wrapper
//
//   1. reads the prompt from its stdin;
//   2. starts `dsh --profile headless` (whose runner, replaced by
//      sandbox-agent's runner.mjs, reads the task from its stdin and creates
//      or resumes the session SANDBOX_AGENT_DSH_SESSION);
//   3. copies every line appended to that session's session.jsonl to its
//      stdout while dsh runs (for a resumed session: from the log's end as
//      it was before dsh started);
//   (0. when SANDBOX_AGENT_DSH_MODEL names a model the generic route
//       SANDBOX_AGENT_DSH_PROVIDER of settings.yaml does not list, adds it:
//       dsh refuses unlisted models, and settings.yaml is JSON written by
//       the driver;)
//   4. after dsh exited and the log stopped growing, prints one line
//      {"type":"sandbox-agent/exit","session":ID,"code":N,"signal":S,"stdout":"..."}
//      carrying dsh's stdout (the final text) and exits with dsh's code.
//
// dsh's stderr passes through. Killing the wrapper (SIGTERM/SIGINT/SIGHUP)
// kills dsh; nothing is left running.
import { spawn } from "node:child_process";
import { closeSync, openSync, readdirSync, readFileSync, readSync, renameSync, statSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { constants } from "node:os";

const env = process.env;
const id = env.SANDBOX_AGENT_DSH_SESSION || "";
const resume = env.SANDBOX_AGENT_DSH_RESUME === "1";
const home = env.DSH_HOME || join(homedir(), ".dsh");
const root = join(home, "sessions");
const pollMs = 40;
const maxStdout = 8 << 20;

if (!/^[A-Za-z0-9._-]+$/.test(id) || id === "." || id === "..") {
	process.stderr.write(`sandbox-agent: bad SANDBOX_AGENT_DSH_SESSION ${JSON.stringify(id)}\n`);
	process.exit(2);
}

// findLog is the session's log path, or "" while it does not exist.
function findLog() {
	let projects;
	try {
		projects = readdirSync(root);
	} catch {
		return "";
	}
	for (const p of projects) {
		const f = join(root, p, id, "session.jsonl");
		try {
			if (statSync(f).isFile()) return f;
		} catch {}
	}
	return "";
}

let log = findLog();
let offset = 0;
if (log !== "" && resume) offset = statSync(log).size;
else if (log !== "" && !resume) {
	process.stderr.write(`sandbox-agent: session ${id} already exists\n`);
	process.exit(2);
}

// addModel lists the turn's model in the generic route of settings.yaml
// (copying the first model's limits).
function addModel() {
	const model = env.SANDBOX_AGENT_DSH_MODEL;
	const provider = env.SANDBOX_AGENT_DSH_PROVIDER;
	if (!model || !provider) return;
	const file = join(home, "settings.yaml");
	let settings;
	try {
		settings = JSON.parse(readFileSync(file, "utf8"));
	} catch {
		return; // not ours (or not JSON): leave it to dsh
	}
	const route = settings?.["llm-pi-ai"]?.providers?.[provider];
	if (!route || !Array.isArray(route.models) || route.models.some((m) => m?.id === model)) return;
	route.models.push({ ...(route.models[0] ?? {}), id: model, name: model });
	const tmp = `${file}.tmp.${process.pid}`;
	writeFileSync(tmp, JSON.stringify(settings, null, 2) + "\n", { mode: 0o600 });
	renameSync(tmp, file);
}
addModel();

let pending = Buffer.alloc(0);
const buf = Buffer.alloc(1 << 20);

// pump copies the complete lines appended since the last call; it returns
// whether it read anything.
function pump() {
	if (log === "") log = findLog();
	if (log === "") return false;
	let fd;
	try {
		fd = openSync(log, "r");
	} catch {
		return false;
	}
	let any = false;
	try {
		for (;;) {
			const n = readSync(fd, buf, 0, buf.length, offset);
			if (n <= 0) break;
			any = true;
			offset += n;
			pending = Buffer.concat([pending, buf.subarray(0, n)]);
		}
	} finally {
		closeSync(fd);
	}
	const nl = pending.lastIndexOf(10);
	if (nl >= 0) {
		process.stdout.write(pending.subarray(0, nl + 1));
		pending = pending.subarray(nl + 1);
	}
	return any;
}

async function readAll(stream) {
	const chunks = [];
	let size = 0;
	for await (const c of stream) {
		if (size < maxStdout) chunks.push(c);
		size += c.length;
	}
	return Buffer.concat(chunks).subarray(0, maxStdout).toString("utf8");
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const prompt = await readAll(process.stdin);

const child = spawn("dsh", ["--profile", "headless", "--patch", join(home, "sandbox-agent", "headless.patch.yml"), "sandbox-agent: the task is on stdin"], {
	stdio: ["pipe", "pipe", "inherit"],
	// A V8 code cache makes every boot after the first cheaper.
	env: { NODE_COMPILE_CACHE: join(home, "sandbox-agent", "compile-cache"), ...env, SANDBOX_AGENT_DSH_STDIN: "1" },
});
let spawnError;
const exited = new Promise((resolve) => {
	child.on("error", (err) => {
		spawnError = err;
		resolve([null, null]);
	});
	child.on("close", (code, signal) => resolve([code, signal]));
});
child.stdin.on("error", () => {});
child.stdin.end(prompt);
const stdoutText = readAll(child.stdout);

for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"]) {
	process.on(sig, () => {
		child.kill(sig);
		setTimeout(() => process.exit(128 + constants.signals[sig]), 2000).unref();
	});
}

let done = false;
exited.then(() => {
	done = true;
});
while (!done) {
	pump();
	await sleep(pollMs);
}
const [code, signal] = await exited;
if (spawnError) {
	process.stderr.write(`sandbox-agent: cannot start dsh: ${spawnError.message}\n`);
	process.exit(spawnError.code === "ENOENT" ? 127 : 126);
}
// dsh flushes its session before it exits; read until the log is still.
for (let quiet = 0; quiet < 2; ) {
	quiet = pump() ? 0 : quiet + 1;
	if (quiet < 2) await sleep(pollMs);
}
if (pending.length > 0) process.stdout.write(Buffer.concat([pending, Buffer.from("\n")]));
const exitCode = code ?? 128 + (constants.signals[signal] ?? 0);
const line = { type: "sandbox-agent/exit", session: id, code: exitCode, stdout: await stdoutText };
if (signal) line.signal = signal;
if (log === "") line.error = `dsh wrote no session log for ${id}`;
process.stdout.write(JSON.stringify(line) + "\n");
process.exitCode = exitCode;
