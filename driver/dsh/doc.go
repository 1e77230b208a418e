// Package dsh drives DeepSeek Harness (`dsh`, npm @deepseek-ai/dsh
// 0.1.0-rc.8) inside a sandbox-agent container.
//
//	// an OpenAI-compatible endpoint: a gateway, the fake model
//	drv := dsh.New(dsh.Options{BaseURL: "http://127.0.0.1:8080/v1", APIKey: key})
//	agent, err := sandboxagent.Start(ctx, rt, drv, sandboxagent.WithModel("glm-5.3"))
//
//	drv := dsh.New(dsh.Options{DeepSeek: true, APIKey: deepseekKey}) // DeepSeek itself
//
// dsh keeps everything in $DSH_HOME (default ~/.dsh, /home/agent/.dsh in the
// image). Its headless mode (`dsh --profile headless TASK`) runs one fresh
// session, prints only the final assistant text and has no way to continue
// a session; its machine-readable stream is the session log
// $DSH_HOME/sessions/--<cwd>--/session-<uuid>/session.jsonl. The driver
// therefore adds two small Node scripts (assets/) and configures dsh to use
// them.
//
// # Configuration (Setup)
//
// Setup writes into $DSH_HOME (files mode 600, folders 700, owned by the
// sandbox user):
//
//   - settings.yaml (written as JSON, which YAML reads as is): the model
//     route. With a BaseURL (and DeepSeek false) a
//     generic OpenAI-compatible provider "sandbox-agent" in the llm-pi-ai
//     section (api openai-completions, baseURL = Options.BaseURL, which
//     /chat/completions is appended to, apiKeyEnv
//     SANDBOX_AGENT_DSH_API_KEY: the name of the credential, not the key),
//     and agent-default-model = that provider and Options.Model (default
//     DefaultModel, "deepseek-v4-flash", dsh's own default; a gateway or the
//     fake model takes it as the wire model name). dsh refuses a model its
//     route does not list ("UNKNOWN_MODEL"), so run.mjs adds a turn's model
//     (Turn.Model, which Setup cannot know) to that list before dsh starts.
//     With DeepSeek set, or no
//     BaseURL, dsh's native adapter "deepseek-official" (thinking, reasoning
//     effort) with llm-deepseek.baseURL when a BaseURL is given.
//   - cordis.patch.yml, the patch layer of every profile: session logs as
//     plain JSONL (compression none, packChunks false: one event a line,
//     text deltas unpacked) flushed within 20 ms, so they can be followed
//     while the turn runs.
//   - sandbox-agent/headless.patch.yml: disables the headless profile's
//     runner plugin (row headless-runner) and inserts
//     sandbox-agent/runner.mjs instead (a patch cannot rename a row's
//     plugin: dsh skips it with "name mismatch"), a
//     copy of the stock runner (@deepseek-ai/dsh-headless) that can also
//     resume a persisted session (ctx.agents.resume, the same code path as
//     agent-loop's resumeSessionId), takes the session id, the model and the
//     task from the environment and stdin, and exits like the stock one.
//   - sandbox-agent/run.mjs: the turn wrapper (below).
//
// The API key is never written to a file: each turn's Invocation carries it
// in its environment (SANDBOX_AGENT_DSH_API_KEY, or DEEPSEEK_API_KEY for the
// DeepSeek adapter; dsh looks credentials up in the environment first).
// dsh also drops credential-shaped variables (KEY, TOKEN, SECRET, PASSWORD)
// and DSH_* from the environment of the commands the model runs, so the
// model's tools do not see the key (checked end to end).
// Telemetry is off (DSH_TELEMETRY_DISABLED=1, also set in the image); dsh
// makes no other start-up connection (no update check, model catalogue or
// plugin install in headless mode).
//
// # One turn (Command)
//
//	sh -c 'exec node "${DSH_HOME:-$HOME/.dsh}/sandbox-agent/run.mjs"'
//
// with the prompt on stdin and the environment DSH_PERMISSION_MODE=
// danger-full-access (no approval channel exists in headless mode; the
// container is the sandbox), DSH_TELEMETRY_DISABLED=1, the key,
// SANDBOX_AGENT_DSH_SESSION (a new "session-<uuid>" made by Command, or
// Turn.SessionID with SANDBOX_AGENT_DSH_RESUME=1 to continue it),
// SANDBOX_AGENT_DSH_PROVIDER and, when the agent has one,
// SANDBOX_AGENT_DSH_MODEL (Turn.Model, the wire model name). run.mjs reads
// the prompt, starts
//
//	dsh --profile headless --patch $DSH_HOME/sandbox-agent/headless.patch.yml PLACEHOLDER
//
// feeding it the prompt on stdin (so a prompt of any length, or starting
// with "-", arrives intact; the positional task the headless app insists on
// is a placeholder), copies every line appended to the session's
// session.jsonl to its stdout while dsh runs (for a continued session, from
// the end the log had before), and after dsh exited and the log stopped
// growing prints one line {"type":"sandbox-agent/exit","session":ID,
// "code":N,"stdout":"<dsh's stdout>"} and exits with dsh's exit code. It
// gives dsh a V8 compile cache ($DSH_HOME/sandbox-agent/compile-cache), which
// makes every boot after a container's first one cheaper. dsh's stderr
// passes through. Nothing outlives the turn: the wrapper is dsh's parent,
// polls the file itself (no tail process) and forwards SIGTERM/SIGINT/
// SIGHUP; a dsh crash ends the wrapper with dsh's code.
//
// dsh does not retry HTTP 401/403 (AUTH): a bad key fails in the time dsh
// needs to start (a few seconds). 5xx and 429 are retried up to 5 times
// with backoff (about 16 s), reported as error events.
//
// # Output
//
// Every line of the session log becomes zero or more events:
//
//   - the header {"type":"session","id":...} → session (a new session's
//     first line; the id is the session folder's name), and the wrapper's
//     exit line → session again (the session the turn ran in; a continued
//     session's part of the log has no header);
//   - assistant/chunk text-delta / reasoning-delta → text / thinking with
//     delta=true; assistant/message → text and thinking (whole blocks,
//     thinking only when the backend returned reasoning text), and the
//     reply (the last assistant text, as dsh prints it);
//   - assistant/chunk usage → usage (per model request, not cumulative;
//     input_tokens exclude cache_read_tokens; dsh reports no cost);
//   - tool/call → tool_call (tool = dsh's tool name, command for bash,
//     path for file tools (file_path/path), input = the arguments JSON,
//     call_id); tool/result → tool_result (output = its text, is_error;
//     exit_code for bash: dsh appends "[exit code: N]" to failed commands'
//     output, so none means 0);
//   - llm/retry → error (a retry: code, message, attempt); turn/end with an
//     error reason → error (and Finish's DriverError);
//   - lines the parser knows to be uninteresting (turn/step boundaries,
//     user messages, request headers, titles, policies, block boundaries)
//     → no event; any other line → raw.
//
// Finish returns the reply (dsh's stdout from the exit line, else the last
// assistant text) and the session id, and a *sandboxagent.DriverError when
// dsh exited non-zero or the turn ended in an error: Message "CODE:
// message" (dsh's codes: AUTH, QUOTA, RATE_LIMIT, SERVER, TRANSPORT, ...),
// Status (the HTTP status dsh recorded), ExitCode, Stderr.
//
// # Sessions
//
//   - Continue: the next turn resumes the session by id (runner.mjs calls
//     ctx.agents.resume): dsh reloads the log, sends the whole history and
//     appends to the same session.jsonl. A session that does not exist
//     fails the turn with a DriverError; it never silently starts afresh.
//   - Fork: copies the session folder to a new session-<uuid> folder beside
//     it with the header's id replaced (the only place a log names its
//     session); later turns of either do not touch the other.
//   - Rules: InstallRules writes $DSH_HOME/AGENTS.md, dsh's user-global
//     instructions (sent as a <system-reminder> user message); empty rules
//     remove it.
//   - Skills: InstallSkill writes $DSH_HOME/skills/<name>/ (replacing an
//     older copy); dsh lists each skill's name and description to the model
//     and loads it with its skill tool.
//   - ListSessions lists the session logs (id, path, modification time, the
//     latest session/title). DeleteSession removes the session's folder.
//   - DumpSession returns the folder's files ("session.jsonl" and
//     "files/<rel>" for any other); LoadSession writes them to the project
//     folder of the header's cwd in another container, where the next turn
//     continues it.
package dsh
