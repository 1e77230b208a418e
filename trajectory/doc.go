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
// bytes pass. Response, ResponseBody and End only copy what they get into
// the Record's ordered queue; a worker goroutine (alive only while there
// is work) parses it. Every query first applies what was queued before
// it, so when the CLI prints a part or a call (after the proxy forwarded
// it, after ResponseBody returned), a query sees it. Request bodies are
// buffered on the proxy's path and parsed on a goroutine started at End;
// queries that need them wait (Record.Wait). A request is scanned once
// for what the Record needs (whether it offers tools, the results for
// calls still waiting for one); only messages that may hold such a
// result are decoded, and anything the scan is unsure of goes to a full
// json.Unmarshal (see quick.go).
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
//	go test -run '^$' -bench Trajectory -benchtime 400x ./modelproxy/
//
// On a shared 2-core machine (three runs each): on the proxy's path, a
// 500 KB request is buffered in 26–32 µs (pooled 64 KiB blocks) and a
// 200-event Anthropic SSE answer queued in 23–46 µs; off it, the answer
// is parsed in 0.5–0.8 ms and the request scanned in 0.56–0.73 ms (no
// call waiting for a result) or 0.66–1.07 ms (one, its message decoded),
// where a full json.Unmarshal takes 16–19 ms. What the record adds to a
// proxied request (100 KB streamed chat completion, p50 of paired
// differences, BenchmarkTrajectory p50-added-µs) is 90–157 µs, down from
// 697–853 µs when answers were parsed on the path and requests in full.
// Requests are parsed at End rather than at query time: the buffers are
// released at once (memory stays bounded by one request per exchange in
// flight) and the turn's end does not pay for every request at once; with
// the scan, the background parse no longer weighs on the proxy's latency.
package trajectory
