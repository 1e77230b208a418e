// Package claude drives Claude Code (the `claude` CLI, @anthropic-ai/claude-code)
// headless inside a sandbox.
//
// # One turn
//
// With Config.PerTurn (else see Long-lived mode), each turn runs
//
//	claude -p --output-format stream-json --verbose --dangerously-skip-permissions \
//	       --model MODEL [--resume SESSION] [--max-turns N]
//
// with the prompt on stdin (then EOF). Why each part:
//
//   - -p (print mode) is the non-interactive mode; with no positional prompt
//     it reads the prompt from stdin. Stdin carries the prompt byte for byte,
//     so a prompt that starts with "-" is not taken for a flag and a long
//     prompt does not hit the kernel's per-argument limit (128 KiB).
//   - --output-format stream-json (which requires --verbose) prints one JSON
//     object per line as the turn goes; the parser reads those.
//   - --dangerously-skip-permissions: every tool runs without asking (in
//     print mode an unapproved tool call is otherwise denied). The image
//     runs as a non-root user; IS_SANDBOX=1 is set too so that a sandbox
//     run as root (which the CLI otherwise refuses) works as well.
//   - --model: Turn.Model, or DefaultModel ("sonnet", the CLI's alias for its
//     current Sonnet model: a model the CLI knows, so it sends its full
//     token limits, and what gateways and the fake model accept) when the
//     agent was given none.
//   - --resume SESSION continues Turn.SessionID (same id, the transcript is
//     appended to).
//   - --max-turns N only when Options.MaxTurns is set.
//
// The environment of the turn carries the key (ANTHROPIC_API_KEY, or
// ANTHROPIC_AUTH_TOKEN with Options.BearerAuth) and never a file;
// ANTHROPIC_BASE_URL; CLAUDE_CODE_MAX_RETRIES (Options.MaxRetries, default
// 2). The CLI retries every API error, 401 included, and has no setting for
// 401 alone; its default of 10 retries keeps a bad key busy for more than
// 100 s, while 2 add under 2 s of back-off to the CLI's start-up (about 5 s
// on an idle machine, 15-20 s on a heavily loaded one). Then come the
// switches that stop all start-up traffic
// (CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1, DISABLE_TELEMETRY=1,
// DISABLE_AUTOUPDATER=1, DISABLE_ERROR_REPORTING=1) and IS_SANDBOX=1.
//
// # Long-lived mode
//
// By default one CLI process serves all the turns of a session
// (sandboxagent.LongLived), so a follow-up turn does not pay the CLI's
// start-up (about 0.8 s and as much CPU with the fake model; a follow-up
// turn then takes about 60 ms, like an `exec true`). ServeCommand is the
// turn's command line with --input-format stream-json after -p (same
// flags, --resume SESSION when the turn has one, same environment) and no
// stdin of its own; it lives until stdin closes. The agent starts it again
// for another session or model. TurnInput writes one line per turn:
//
//	{"type":"user","message":{"role":"user","content":PROMPT},"parent_tool_use_id":null,"session_id":SESSION}
//
// (the encoder escapes the prompt's newlines; the CLI ignores session_id
// and serves the session it was started on). Each message prints the
// turn's lines as in a turn of its own, from a system/init line naming
// the session to the result line, which ends the turn (the parser's
// Ended). The result's usage is the turn's; its total_cost_usd is the
// process's (and, after --resume, includes the cost restored from the
// transcript), so the cost reported is model_usage_since_last_result's.
// A rejected key fails the turn in its result line and the process lives
// on; for an unknown --resume session the CLI prints the result line at
// once, before reading any input, and exits 1.
//
// WarmSteps (sandboxagent.Warmer) are two control requests a warmed
// process answers before its first prompt: initialize, then
// get_context_usage with detail "summary", for which the CLI assembles
// the system prompt, tools, skills and memory files its first request
// will carry and counts them locally (no request to the model, nothing
// in the session). That takes about a quarter of the first turn's CPU
// off it. What a first turn still costs beyond a follow-up (the query
// loop, the streaming request and the transcript run for the first time
// in the process) only a turn exercises, and a warm-up turn cannot be
// taken back: one process serves one session, and /clear leaves its
// command in the next request's context.
//
// AbortInput is the interrupt control request
//
//	{"type":"control_request","request_id":"sandbox-agent-interrupt","request":{"subtype":"interrupt"}}
//
// (Traits.Abort is AbortInterrupt): the CLI answers with a control_response,
// kills the running tool (checked with tail -f /dev/null), notes "[Request
// interrupted by user for tool use]" in the session, prints the turn's
// result line (is_error, terminal_reason aborted_tools or
// aborted_streaming) and reads the next message, which continues the
// session. An interrupt while no turn runs gets only the control_response.
// With Config.PerTurn an abort kills the CLI instead.
//
// When the process stops (stdin closed, then its process tree killed), the
// CLI appends its exit records to the session file it served: a
// cost-state record and, when not yet written, the last-prompt one. So a
// session forked while its process lived gets these two lines after the
// fork; they change no history (a resumed session continues from its last
// message, whatever last-prompt's leafUuid says).
//
// # Setup
//
// Setup writes ~/.claude/settings.json: the same non-secret environment
// (base URL, retries, traffic switches) under "env", so a claude started by
// hand in the sandbox talks to the same endpoint, and
// permissions.defaultMode "bypassPermissions". Note that the CLI lets the
// settings "env" override the process environment, so the base URL must be
// right in both places (it is: both come from Options.BaseURL).
//
// All files are written through Run (a small sh script reading the content
// from stdin), so they belong to the sandbox's user, who is the one the CLI
// runs as and who must be able to append to transcripts.
//
// # Output
//
// Lines are mapped to events as follows: system/init → session; assistant
// text blocks → text; thinking blocks with text → thinking; tool_use →
// tool_call (payload.command for Bash, payload.path for file tools,
// payload.input the arguments as sent); user tool_result → tool_result
// (exit_code 0 for a successful Bash call, N from the "Exit code N" prefix of
// a failed one); system/api_retry → error (is_error false: the CLI retries);
// system/permission_denied and synthetic API-error messages → error
// (is_error true); the result line → usage (the turn's tokens; cost_usd
// from model_usage_since_last_result, see Long-lived mode). stream_event
// lines (only with --include-partial-messages, which this driver does not
// pass) give text/thinking deltas. system/thinking_tokens, system/status,
// system/task_* (a long tool call's progress), keep_alive, a successful
// control_response and the CLI's "[Request interrupted by user...]" note
// give no event; a refused control request gives an error (is_error
// false); any other line becomes a raw event.
//
// A turn fails with a *sandboxagent.DriverError when the result line says
// is_error:true (the CLI reports API failures with subtype "success" and
// is_error true), when the CLI exits non-zero, or when no result line came.
// Status is api_error_status (or the last retry's HTTP status). ExitCode is
// 0 for a long-lived turn that ended with its result line.
//
// # Sessions
//
// The CLI keeps each session as ~/.claude/projects/<slug(cwd)>/<id>.jsonl
// (slug: every non-alphanumeric character of the working directory replaced
// by "-", so /workspace → -workspace), with an optional <id>/ folder beside it
// (subagent and large tool-result files).
//
//   - Continue: --resume <id>.
//   - Fork: copies the transcript (and its folder) to a new random UUID in
//     the same project folder, replacing the old id inside it; the fork is
//     then resumed like any session and the original file gets nothing of
//     the fork (only its own exit records, if its long-lived process was
//     still running: see Long-lived mode). (The CLI's own --fork-session
//     only forks while running a turn.)
//   - InstallRules: ~/.claude/CLAUDE.md, the user-global instructions the CLI
//     puts into the first user message of every session (replaced on each
//     call). Project files (CLAUDE.md in the working directory) are left to
//     the user.
//   - InstallSkill: ~/.claude/skills/<name>/ (SKILL.md plus any files); the
//     CLI lists it in init.skills and in the Skill tool's description.
//   - ListSessions: every transcript under ~/.claude/projects, newest first;
//     Title is the session's last prompt: the later of the last last-prompt
//     record and the last queued prompt (queue-operation enqueue). The CLI
//     writes last-prompt lazily (with its other metadata once enough bytes
//     were appended, and at exit), so while a long-lived process serves the
//     session that record may still name an earlier turn's prompt.
//   - DeleteSession: removes the transcript, its folder and
//     ~/.claude/session-env/<id>.
//   - DumpSession: Files["transcript.jsonl"] plus Files["files/<rel>"] for the
//     session folder; Meta["project"] is the project folder name.
//   - LoadSession: writes them back under the same project folder and id in
//     another sandbox (refused when that id exists there). --resume finds a
//     transcript in any project folder (checked: a session of /workspace
//     resumed from /tmp), so the new sandbox's working directory need not
//     match.
//
// A turn that failed before reaching the model (a bad key) still leaves a
// transcript, so it is listed like any other session.
package claude
