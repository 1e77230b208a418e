// Package pi drives pi (the `pi` CLI, npm @mariozechner/pi-coding-agent,
// tested with 0.73.1) headless inside a sandbox.
//
// # One turn
//
// Each turn runs
//
//	pi --mode json --offline --provider PROVIDER --model MODEL \
//	   [--thinking LEVEL] [--session SESSION]
//
// with the prompt on stdin (then EOF). Why each part:
//
//   - --mode json prints every agent event as one JSON line and exits when
//     the prompt is done; it needs no TTY and asks nothing. pi has no
//     permission system at all, so every tool call runs: the turn is fully
//     autonomous without any further flag.
//   - The prompt goes on stdin, with no positional prompt: pi reads a piped
//     stdin to EOF and takes it as the prompt, byte for byte. As an
//     argument a prompt starting with "-" is taken for an option ("--" is
//     not understood), "@file" words are inlined, and every further
//     argument is a separate prompt. The agent closes stdin after the
//     prompt (an open stdin would make pi wait forever).
//   - --offline (and PI_OFFLINE=1, PI_SKIP_VERSION_CHECK=1, PI_TELEMETRY=0
//     in the environment) switches off every start-up network call: version
//     and package update checks and the install ping. In JSON mode pi makes
//     none anyway; this keeps it so if that changes.
//   - --provider and --model: Options.Provider (see below) and the turn's
//     model, else Options.Model, else DefaultModel ("gpt-5.5", the name the
//     other gateway drivers use; the fake model accepts any). A leading
//     "PROVIDER/" equal to the driver's provider is dropped; the rest is
//     the model id as the API knows it, so gateway ids with "/" work. A
//     model id not declared in models.json is used as is (pi warns on
//     stderr: "Using custom model id").
//   - --thinking only when Options.Thinking is set.
//   - --session SESSION continues Turn.SessionID: pi finds the session file
//     of that id among the sessions of the working directory and appends
//     the turn to it (same id).
//
// The environment of the turn carries the API key: in KeyEnv
// (SANDBOX_AGENT_PI_API_KEY), which models.json names as the provider's
// apiKey (pi resolves an apiKey that is the name of a variable to its
// value), or for a built-in provider in that provider's own variable
// (OPENAI_API_KEY, ANTHROPIC_API_KEY, …; Options.KeyEnv overrides). The key
// is never written to a file and never on the command line.
//
// # Setup
//
// Setup checks that pi is installed (ErrCLIMissing otherwise) and writes,
// as the sandbox's user, mode 0600:
//
//   - ~/.pi/agent/models.json (only with Options.BaseURL): a custom
//     provider Options.Provider (default "sandbox-agent") with baseUrl,
//     api (Options.API, default "openai-completions": pi POSTs to
//     BASEURL/chat/completions), apiKey = the name of KeyEnv, and one
//     declared model (the default model; reasoning from Options.Reasoning).
//     Without a BaseURL no models.json is written: pi's built-in provider
//     (Options.Provider, default "openai") talks to its real endpoint.
//   - ~/.pi/agent/settings.json: defaultProvider/defaultModel (so a pi
//     started by hand in the sandbox uses the same model), retry
//     {enabled, maxRetries: Options.MaxRetries (default 2), baseDelayMs:
//     1000, provider.maxRetries: 0 (one HTTP request per pi attempt, where
//     the OpenAI SDK would make three)}, enableInstallTelemetry false, and
//     shellCommandPrefix "unset KEYVAR" so the commands the model runs do not
//     inherit the key.
//
// pi never retries a rejected key (401/403): one request, then the turn
// fails, in a few seconds. Transient errors (429, 5xx, connection errors)
// are retried MaxRetries times after 1 s, 2 s, ….
//
// # Output
//
// Lines map to events as follows:
//
//   - session (the first line) → session (SessionID set).
//   - message_update text_delta / thinking_delta → text / thinking with
//     delta:true. The partial/message snapshots in message_update lines are
//     serialized late by pi (they already hold later content) and are
//     never read; toolcall_* fragments give no event.
//   - message_end of an assistant message → one text event per text block
//     and one thinking event per non-empty thinking block (whole parts,
//     delta false; thinking only when the backend returned reasoning), and
//     one tool_call per toolCall block: payload.tool is pi's tool name,
//     payload.command the bash tool's command, payload.path the path of the
//     file tools (read, write, edit, ls, find, grep), payload.input the
//     arguments as sent, payload.call_id the call id. An assistant message
//     that ended with stopReason "error" or "aborted" also gives an error
//     event (is_error) with pi's errorMessage.
//   - tool_execution_end → tool_result: call_id, output (the text parts),
//     is_error, and for bash exit_code (0 on success, N from pi's trailing
//     "Command exited with code N").
//   - agent_end → usage: the token counts of that agent run (one per
//     prompt, plus one per retry), summed over its model calls; not
//     cumulative over the session.
//   - auto_retry_start → error (is_error false: pi retries);
//     auto_retry_end with success:false → error (is_error true);
//     compaction_end with an errorMessage and extension_error → error.
//   - agent_start, turn_start, turn_end, message_start, the message_end of
//     user and tool-result messages, tool_execution_start/update,
//     queue_update and compaction_start give no event (what they carry is
//     reported by the lines above).
//   - Anything else (an unknown type, a line that is not JSON, such as pi's
//     "Session found in different project" question) → raw.
//
// A turn's reply is the text of the last assistant message (or, when that
// one has none, of the last assistant message that had text). pi exits 0
// in JSON mode even when the API failed, and with HTTP 5xx it runs one
// agent_start … agent_end cycle per retry, so the turn's outcome is decided
// at process exit, from the last assistant message: Finish returns a
// *sandboxagent.DriverError when its stopReason is "error" or "aborted"
// (Message is pi's errorMessage, Status the HTTP status pi puts in front
// of it, e.g. "401 …"), when pi gave up retrying, when pi exited non-zero
// (Message is the first line of stderr, e.g. "No session found matching
// 'ID'"), or when pi exited 0 without any assistant message.
//
// # Sessions
//
// pi keeps each session as one JSONL file
// ~/.pi/agent/sessions/--<cwd>--/<time>_<id>.jsonl (cwd without its leading
// "/", with "/" as "-"; ids are UUIDv7). Its first line is a header
// {"type":"session","version":3,"id","timestamp","cwd","parentSession"?};
// the entries after it form a tree by id/parentId.
//
//   - Continue: --session <id> (see above). pi resolves an id among the
//     sessions of the working directory first; one found only under another
//     directory makes pi ask a y/N question on stdin, which the driver never
//     lets happen (LoadSession places sessions under the sandbox's working
//     directory) and which would end the turn with a DriverError.
//   - Fork: copies the session file to a new file beside it whose header
//     has a new id and time and parentSession = the original file — what
//     pi's own --fork writes (pi's --fork only forks while running a
//     prompt). The copy holds the whole history, so the fork does not need
//     the original, and the original is never touched again.
//   - InstallRules: ~/.pi/agent/AGENTS.md, the global context file pi puts
//     into the system prompt of every session ("Project Context"),
//     replaced on each call.
//   - InstallSkill: ~/.pi/agent/skills/<name>/ (SKILL.md plus any files,
//     replacing an earlier skill of that name). pi lists it in the system
//     prompt's <available_skills> with the name and description of
//     SKILL.md's front matter and its location, and the model reads it with
//     the read tool. pi silently skips a skill whose SKILL.md has no front
//     matter with a description, so InstallSkill refuses one.
//   - ListSessions: every session file, newest first; Title is the first
//     line of the session's first prompt.
//   - DeleteSession: removes the session's file.
//   - DumpSession: Files["session.jsonl"] is the file; Meta["cwd"] its
//     working directory, Meta["file"] its file name.
//   - LoadSession: writes the file under the same id into the session
//     folder of the target sandbox's working directory, with the header's
//     cwd rewritten to that directory (pi refuses a session whose recorded
//     cwd does not exist); refused with ErrDestinationExists when the id is
//     already there.
//
// Session ids reach scripts and command lines only when they are UUIDs.
package pi
