// Package opencode drives the opencode CLI (npm opencode-ai, tested with
// 1.18.33) inside a sandbox.
//
// # Configuration (Setup)
//
// Setup writes $HOME/.config/opencode/opencode.json (the directory where the
// image pre-installed @opencode-ai/plugin, so opencode does not npm-install
// it at start):
//
//   - with Options.BaseURL set: a custom provider named Options.Provider
//     (default "sandbox") using the bundled "@ai-sdk/openai-compatible"
//     package, options.baseURL = BaseURL, and the model DefaultModel
//     declared; "model" and "small_model" point at it;
//   - with BaseURL empty: Options.Provider is one of opencode's own providers
//     (e.g. "zhipuai-coding-plan") and only its key is configured.
//
// The key is never written into the file: options.apiKey is
// "{env:SANDBOX_AGENT_OPENCODE_API_KEY}" and each turn's Invocation carries
// that variable. Startup network traffic is off: "autoupdate": false,
// "share": "disabled", OPENCODE_DISABLE_AUTOUPDATE, OPENCODE_DISABLE_MODELS_FETCH
// (no models.dev download: the catalogue compiled into the binary is used)
// and OPENCODE_DISABLE_LSP_DOWNLOAD; "snapshot": false stops opencode keeping
// a git snapshot of the workspace after every step. The background
// `npm install @opencode-ai/plugin` opencode starts for its config dir is
// avoided by the image (the package is pre-installed there).
//
// # One turn (Command)
//
//	opencode run --format json --thinking --auto [-m PROVIDER/MODEL] [--session ID | --title]
//
// with the prompt on stdin (opencode wraps every argv word holding a space in
// double quotes, so stdin is the only way to pass a prompt verbatim; stdin
// is closed after it, as opencode reads it to EOF). --format json prints one
// JSON event per finished part (no deltas); --thinking adds reasoning parts;
// --auto approves any permission rule that says "ask" (the run keeps its own
// denials of the interactive question/plan tools) so no turn waits for a
// human; --title without a value titles a new session with its prompt,
// which saves the extra title-generation request. A model given without a
// provider prefix is taken as a model of Options.Provider; with a custom
// provider, Turn.Model "" means DefaultModel and any other model is declared
// for the turn through OPENCODE_CONFIG_CONTENT (merged over the file).
// A rejected key (HTTP 401) is not retried by opencode (one request, then
// one "error" line with statusCode 401 and exit 1), so it fails as fast as
// opencode starts. Other API errors (5xx, 429) are retried silently by
// opencode with backoff (about 70 s in all, per the reference notes;
// not re-measured) before the same "error" line.
//
// Cost: every opencode start loads a ~180 MB Bun binary and its bundle,
// about 10 CPU-seconds per turn (and 2 for `opencode --version`); on a
// loaded machine a turn takes tens of seconds, so give timeout_ask room.
//
// # Long-lived mode (ServeCommand, TurnInput, AbortInput)
//
// By default (sandboxagent.LongLived; config per_turn goes back to Command)
// one process serves the turns: `node ~/.config/sandbox-agent/opencode-serve.mjs`,
// a bridge Setup installs, which starts `opencode serve --hostname 127.0.0.1
// --port 0` with a random one-off OPENCODE_SERVER_PASSWORD (only the bridge
// holds it), subscribes to GET /event and reads one JSON command per stdin
// line. A prompt {"type":"prompt","sessionID","text","model"} creates the
// session when it has none (POST /session with run's title, the prompt's
// first 50 characters, and run's non-interactive rules denying question,
// plan_enter and plan_exit) or checks it exists ("Session not found"
// otherwise, as run says), then POST /session/ID/message. The events of the
// session become the very lines `opencode run --format json --thinking`
// prints (finished tool parts, step_start, step_finish, finished text and
// reasoning, session errors) — it mirrors run's event loop — and
// {"type":"turn_end"} follows once the session is idle and the request
// answered; the Parser ends the turn there (Ended). Permission asks of the
// session and its subagents are approved once, as with run --auto.
// {"type":"abort"} is POST /session/ID/abort: the turn ends, the server
// lives on. The bridge exits when stdin closes, and with the server's exit
// status when the server dies (the agent starts another on the next turn).
// opencode serve grows over long runs: past Options.ServerMemoryMB of
// resident memory (default 1536) the bridge stops it after a turn and
// exits, and the next turn starts another on the same session.
// Turns 2+ cost about 0.25 s and 0.4 CPU-seconds instead of 6 s and 9
// (BENCHMARKS.md); the server's start is paid once per session and model.
//
// # Sessions
//
// opencode keeps sessions in SQLite at ~/.local/share/opencode/opencode.db,
// keyed by the directory they were started in, so a session continues only
// from the same working directory.
//
//   - Continue: --session ID (the whole history is re-sent).
//   - Fork: `opencode run --fork` only forks as part of a turn, so Fork starts
//     `opencode serve` on a loopback port (4096, or a random one if taken) with a random one-off
//     password (OPENCODE_SERVER_PASSWORD), calls POST /session/ID/fork (the
//     same operation the TUI uses: a new session holding copies of every
//     message, titled "<title> (fork #1)") and stops the server.
//   - Rules: $HOME/.config/opencode/AGENTS.md (global instructions, put into
//     the system prompt of every session).
//   - Skills: $HOME/.config/opencode/skills/NAME/ (SKILL.md with name and
//     description front matter; listed in the system prompt, loaded by the
//     skill tool).
//   - List: `opencode session list --format json` (sessions of the sandbox's
//     working directory); Delete: `opencode session delete ID`.
//   - Dump: `opencode export ID` (JSON {info, messages}) as file
//     "export.json"; Load: `opencode import FILE` in the other container,
//     which keeps the session id. The session's directory is recorded in the
//     export; continue it from the same working directory.
package opencode
