// Package trajectory records the model's side of an agent turn as the
// host's model proxy saw it, so the host can check the events it parses
// from the CLI's stdout against it.
//
// A tool the agent runs shares the CLI's stdout and can print lines that
// look like the CLI's own events: a fake tool call, a fake final answer.
// The proxy runs on the host and the sandbox cannot write into it, so what
// it relayed is the reference.
//
// # Use
//
// One Record per turn. The proxy's tap calls Record.Begin for every
// forwarded request; completion routes (see DetectAPI) get an *Exchange,
// whose RequestBody, Response, ResponseBody and End the proxy calls as
// bytes pass. Responses (SSE for all three APIs, or one JSON answer) are
// parsed synchronously, chunk by chunk, before each chunk goes on to the
// sandbox: when the CLI prints a part or a call, the Record already holds
// it. Request bodies are only buffered on the proxy's path and parsed on a
// goroutine started at End; queries that need them wait (Record.Wait).
//
// # What the Record proves
//
//   - The model's tool calls (id, name, arguments as sent), its text and
//     its reasoning are authoritative: they came from the upstream. A CLI
//     event claiming a call, a text or a reasoning the Record lacks did
//     not come from the model (ToolCall, FindToolCall, FindCommand,
//     HasText, HasReasoning).
//   - FinalAnswer is the text of the last completed agent-loop response
//     that asked for no tool: the answer the CLI should report.
//   - ToolResult is what the CLI told the model a tool returned, for calls
//     this Record's responses asked for.
//
// # What it cannot prove
//
//   - A tool's real output. The tool runs in the sandbox; the Record knows
//     its output only as the CLI reported it to the model. ResultMatches
//     shows that the output the CLI printed is what the model was given,
//     not that the tool produced it. It also cannot show a CLI ran a call
//     it was asked for, nor what a call did.
//   - Reasoning the upstream did not send: encrypted or redacted thinking
//     and reasoning models that return none leave HasReasoning false.
//   - Anything past a bound (MaxKept, MaxLine, MaxRequest): the Record is
//     then Truncated and a negative answer proves nothing.
//   - Compressed responses (the proxy asks for identity) and answers in
//     shapes it does not know are counted as unparsed, not guessed at.
//   - Text matching is whitespace-normalised containment: a CLI event that
//     prints a fragment of the model's text matches, as a delta must.
//
// # Cost
//
//	go test -run '^$' -bench BenchmarkRecordExchange ./trajectory/
//
// On a 2-core CI machine: a 200-event Anthropic SSE answer costs the proxy
// about 1.4 ms in all (7 µs an event, parsed as it passes); buffering a
// 500 KB request about 1.1 ms (64 KiB blocks, never copied on the path);
// parsing that request, off the path, about 21 ms.
package trajectory
