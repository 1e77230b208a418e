// Package codex drives the OpenAI Codex CLI (`codex`, npm @openai/codex)
// inside a sandbox-agent container.
//
//	drv := codex.New(codex.Options{BaseURL: "http://127.0.0.1:8080/v1", APIKey: key})
//	agent, err := sandboxagent.Start(ctx, rt, drv, sandboxagent.WithModel("gpt-5.5"))
//
// # Configuration (Setup)
//
// Setup writes $CODEX_HOME/config.toml (CODEX_HOME defaults to ~/.codex, i.e.
// /home/agent/.codex in the image) with a custom model provider
// "sandbox-agent" (wire_api = "responses": codex speaks only the OpenAI
// Responses API, POST {BaseURL}/responses). A custom provider is used even
// for OpenAI itself: the built-in one ignores OPENAI_BASE_URL, tries a
// WebSocket first and refreshes a model catalogue over the network.
// The file also holds:
//
//   - env_key = "SANDBOX_AGENT_CODEX_API_KEY": the key is never written to a
//     file; each turn's Invocation carries it in its environment, and
//     shell_environment_policy.exclude keeps it out of the environment of the
//     commands the model runs.
//   - request_max_retries / stream_max_retries = Options.Retries (default 2).
//     stream_max_retries is the one that governs retries of HTTP errors such
//     as 401 (codex's default 5 took about 6 s); with 2 a bad key fails in
//     about 2 s plus the CLI's start-up.
//   - approval_policy = "never", sandbox_mode = "danger-full-access": codex's
//     own bwrap sandbox cannot create namespaces inside a container, the
//     container is the sandbox.
//   - analytics.enabled = false, features.plugins = false,
//     check_for_update_on_startup = false: with these and the custom provider
//     codex makes no start-up connection at all (checked with a logging proxy:
//     without them it contacts github.com, api.github.com, chatgpt.com and
//     ab.chatgpt.com).
//
// # One turn (Command)
//
//	codex exec [resume] --json --skip-git-repo-check
//	      --dangerously-bypass-approvals-and-sandbox -m MODEL -- [SESSION_ID] PROMPT
//
// with stdin closed (codex exec reads a piped stdin to EOF and appends it to
// the prompt; an open pipe would block it). A prompt longer than 64 KiB, or
// the prompt "-", is passed as "-" with the prompt on stdin instead (argv
// strings are limited to 128 KiB). The model is Turn.Model, else
// Options.Model, else DefaultModel ("gpt-5.5"): a name in codex's bundled
// catalogue, so codex offers its full tool set (exec_command, apply_patch,
// ...) and prints no "model metadata not found" warning. A gateway or the
// fake model accept any name.
//
// # Output
//
// codex exec --json prints one JSON object per line: thread.started (the
// session id, a UUIDv7), turn.started, item.started/updated/completed,
// error, turn.completed (usage) and turn.failed. They map to events as
// follows: agent_message → text (whole messages; codex prints no deltas);
// reasoning → thinking (only when the backend returned reasoning text);
// command_execution → tool_call (tool "command_execution", command = the
// shell string codex ran, e.g. `/bin/bash -lc 'echo hi'`, input = the item
// as codex printed it) and tool_result (output = aggregated_output,
// exit_code, is_error when it failed); file_change → tool_call/tool_result
// with path = the first changed file; mcp_tool_call → tool "SERVER.TOOL"
// with input = its arguments; web_search → tool "web_search"; an error
// item (a warning) and top-level error lines (retries "Reconnecting... n/N")
// → error; turn.completed → usage with cumulative=true (codex reports the
// thread's running totals, carried over by resume and fork); turn.failed →
// error and a *sandboxagent.DriverError from Finish. todo_list items and
// any line the parser does not know are kept verbatim as raw events; so
// is a line of app-server's vocabulary (the long-lived mode's), and a
// thread.started naming another thread than the first one.
//
// # Long-lived mode (ServeCommand, TurnInput, AbortInput)
//
// By default (Config.PerTurn false) one `codex app-server` serves every
// turn of a session. app-server speaks JSON-RPC on stdio and a turn needs
// the thread id thread/start answers before turn/start can name it, so a
// node bridge Setup installs ($CODEX_HOME/sandbox-agent/appserver.mjs,
// assets/appserver.mjs) sits in front of it:
//
//	sh -c 'exec node "${CODEX_HOME:-$HOME/.codex}/sandbox-agent/appserver.mjs"'
//
// with the key in its environment (app-server inherits it; config.toml
// keeps it from the model's commands as for exec). It sends initialize
// (deltas opted out: the parser reads whole items, as exec prints them;
// experimentalApi for thread/backgroundTerminals/clean) and then, per
// stdin line {"type":"prompt","threadId":ID or "","text":T,"model":M}
// (TurnInput), thread/start (approvalPolicy "never", sandbox
// "danger-full-access") or thread/resume of the turn's session (once per
// process: the agent starts another one for another session), then
// turn/start. app-server's notifications are printed as they came, one per
// line; after the turn's turn/completed the bridge prints
// {"type":"turn_end","threadId":ID}, which is what Ended reports. A thread
// it cannot start or resume gives a {"method":"sandbox-agent/error"} line
// and turn_end. Requests app-server sends the client (command or patch
// approvals, user input, tool calls) are answered with a JSON-RPC error:
// nothing is approved on the user's behalf, and with approval_policy
// "never" none is asked. {"type":"abort"} (AbortInput) sends
// turn/interrupt: the turn completes "interrupted" and, since interrupt
// leaves the turn's commands running as background terminals,
// thread/backgroundTerminals/clean stops them before turn_end (bounded
// to 3 s). The bridge exits when stdin closes (closing app-server's stdin,
// on which it exits) or when app-server exits, with its status.
//
// NewParser picks the parser by the turn's mode (Turn.LongLived): this
// mode's takes only app-server's notifications and the bridge's lines, a
// line of `codex exec --json`'s vocabulary is a raw event (so a forged
// thread.started or turn.completed names no session and completes no
// turn), as exec's parser takes an app-server line for unknown. Both map
// a thread item through one function per item kind (items.go):
// item/completed agentMessage → text, reasoning (summary and content) →
// thinking, commandExecution/fileChange/mcpToolCall/webSearch → tool_call
// and tool_result as for exec (their ids are the model's call ids here),
// error (willRetry: not fatal) → error, warning/configWarning/
// deprecationNotice → error (not fatal), thread/tokenUsage/updated's
// thread total → one usage event (cumulative) at turn/completed, whose
// status failed or interrupted fails the turn. thread/started names the
// session; a resumed thread's first line of the turn names the turn's.
// Lines of another thread (a sub-agent's) and unknown notifications are raw
// events; known bookkeeping notifications (status, rate limits, diffs)
// make none.
//
// # Sessions
//
// Codex keeps each thread in
// $CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread_id>.jsonl plus
// SQLite indexes in $CODEX_HOME.
//
//   - Continue: `codex exec resume ... -- ID PROMPT`. The id must be a UUID:
//     codex takes anything else for a thread name and, not finding it,
//     silently starts a new thread; Command refuses such ids, and Finish
//     reports a turn whose thread id differs from the one resumed.
//   - Fork: `codex exec fork ... -- ID` with no prompt makes no model request
//     and prints the new thread id. Codex 0.171 forks by reference: the new
//     rollout's session_meta has forked_from_id / history_base pointing at a
//     byte offset of the parent's rollout, so later turns of either thread do
//     not change the other, but the fork needs the parent's file.
//   - Rules: InstallRules writes $CODEX_HOME/AGENTS.md (codex's global
//     instructions, sent before any project AGENTS.md); a later call
//     replaces it.
//   - Skills: InstallSkill writes $CODEX_HOME/skills/<name>/ (replacing an
//     older copy); codex lists each skill's name and description in its
//     <skills_instructions> message.
//   - ListSessions lists the rollout files (id, path, modification time).
//   - DeleteSession runs `codex delete --force ID`, which refuses to delete a
//     thread a fork depends on; a session codex's index does not know (one
//     loaded from a dump) has its rollout file removed instead, unless a
//     fork depends on it.
//   - DumpSession returns the rollout file and, for a fork, those of the
//     threads it was forked from (keys are paths relative to $CODEX_HOME,
//     "sessions/..."); LoadSession writes them back under $CODEX_HOME of
//     another container, where `codex exec resume ID` or app-server's
//     thread/resume continues it (no SQLite file is needed). app-server
//     writes the same rollouts as exec, so all of these work on its
//     threads (TestCodexLongLived forks one and resumes the fork).
//
// All files are written with Run (the content on stdin) so they belong to
// the user the CLI runs as.
package codex
