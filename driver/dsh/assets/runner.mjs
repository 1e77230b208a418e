// sandbox-agent's replacement for dsh's headless runner plugin
// (@deepseek-ai/dsh-headless, row "headless-runner"), installed by the
// sandbox-agent dsh driver and mounted by $DSH_HOME/cordis.patch.yml.
//
// It behaves like the stock runner (one task, drive it to quiescence, flush
// the session, print the last assistant text, exit 0 if the turn completed,
// else print "dsh: CODE: message" on stderr and exit 1), and adds what the
// stock runner lacks, all from the environment:
//
//   SANDBOX_AGENT_DSH_SESSION  the session id to create ("session-<uuid>");
//                              random when unset, as in the stock runner.
//   SANDBOX_AGENT_DSH_RESUME=1 resume that persisted session (agents.resume,
//                              the same path as agent-loop's resumeSessionId)
//                              instead of creating it: a second turn continues
//                              the conversation.
//   SANDBOX_AGENT_DSH_MODEL    the wire model name for this turn (provider:
//                              SANDBOX_AGENT_DSH_PROVIDER, else the default
//                              model's provider).
//   SANDBOX_AGENT_DSH_STDIN=1  the task is this process's stdin (so any
//                              prompt, however long or dash-led, arrives
//                              intact); the positional task is a placeholder.
import { randomUUID } from "node:crypto";
import { realpathSync } from "node:fs";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

// Load dsh's own modules (the very files the stock runner imports), resolved
// from the stock runner's location.
const bin = realpathSync(process.argv[1]);
const headlessPath = createRequire(bin).resolve("@deepseek-ai/dsh-headless");
const req = createRequire(headlessPath);
const load = (spec) => import(pathToFileURL(req.resolve(spec)).href);
const [headless, { installModelSelection }, { createUserMessage }, { SessionId }] = await Promise.all([
	import(pathToFileURL(headlessPath).href),
	load("@deepseek-ai/dsh-agent"),
	load("@deepseek-ai/dsh-llm"),
	load("@deepseek-ai/dsh-session"),
]);

export const name = "headless-runner";
export const inject = ["agentDefaultModel", "agents", "sessions"];
export const Config = headless.Config;

const env = process.env;
// Read at start-up; the commands the model runs need not inherit it.
delete env.NODE_COMPILE_CACHE;

function summarize(events, firstSeq) {
	let started = false;
	let text = "";
	let reason;
	for (const event of events) {
		if (event.seq < firstSeq) continue;
		if (event.type === "turn/start") {
			started = true;
			continue;
		}
		if (!started) continue;
		if (event.type === "assistant/message") {
			const joined = event.data.message.content.filter((b) => b.type === "text").map((b) => b.text).join("");
			if (joined !== "") text = joined;
		}
		if (event.type === "turn/end") reason = event.data.reason;
	}
	return { text, reason };
}

async function readStdin() {
	const chunks = [];
	for await (const c of process.stdin) chunks.push(c);
	return Buffer.concat(chunks).toString("utf8");
}

async function run(ctx, configTask, io) {
	await ctx.get("loader")?.await();
	const agents = ctx.get("agents");
	const defaultModel = ctx.get("agentDefaultModel");
	const sessions = ctx.get("sessions");
	if (agents === undefined || defaultModel === undefined || sessions === undefined) return;
	const task = env.SANDBOX_AGENT_DSH_STDIN === "1" ? await readStdin() : configTask;
	if (task.trim() === "") throw new Error("INVALID_TASK: the task is empty");
	let selection = defaultModel.currentSelection();
	if (env.SANDBOX_AGENT_DSH_MODEL) {
		selection = { provider: env.SANDBOX_AGENT_DSH_PROVIDER || selection.provider, model: env.SANDBOX_AGENT_DSH_MODEL };
	}
	const options = {
		agentOptions: { provider: selection.provider, model: selection.model },
		setup: (agentCtx) => {
			installModelSelection(agentCtx, { current: selection, assembled: undefined });
		},
	};
	const id = env.SANDBOX_AGENT_DSH_SESSION || `session-${randomUUID()}`;
	const { agent } = env.SANDBOX_AGENT_DSH_RESUME === "1"
		? await agents.resume({ resumeSessionId: SessionId(id), ...options })
		: await agents.create({ sessionId: SessionId(id), meta: { cwd: process.cwd() }, ...options });
	await agent.whenIdle();
	const firstSeq = agent.session.seq;
	agent.followup(createUserMessage({ content: [{ type: "text", text: task }], source: { kind: "user" } }));
	await agent.whenIdle();
	await sessions.flush(agent.session);
	const outcome = summarize(agent.session.events, firstSeq);
	io.stdout.write(outcome.text + "\n");
	if (outcome.reason?.kind === "error") io.stderr.write(`dsh: ${outcome.reason.error.code}: ${outcome.reason.error.message}\n`);
	else if (outcome.reason === undefined) io.stderr.write("dsh: NO_TURN: the turn never ended\n");
	else if (outcome.reason.kind !== "completed") io.stderr.write(`dsh: ${String(outcome.reason.kind).toUpperCase()}: the turn ended without completing\n`);
	io.exit(outcome.reason?.kind === "completed" ? 0 : 1);
}

export function apply(ctx, config) {
	const exit = ctx.get("appExit");
	if (exit === undefined) throw new Error("headless-runner: the launcher must provide ctx.appExit before the tree mounts");
	const io = { stdout: process.stdout, stderr: process.stderr, exit };
	run(ctx, config.task, io).catch((error) => {
		io.stderr.write(`dsh: ${error instanceof Error ? error.message : String(error)}\n`);
		io.exit(1);
	});
}
