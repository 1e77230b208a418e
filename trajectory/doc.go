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
// buffered on the proxy's path and parsed, in End order, by the Record's
// parse worker (one at most, alive only while requests wait); queries
// that need them wait (Record.Wait). A request is scanned once
// for what the Record needs (whether it offers tools, the results for
// calls still waiting for one); only messages that may hold such a
// result are decoded, and anything the scan is unsure of goes to a full
// json.Unmarshal (see quick.go).
//
// Call SetSecrets before the first exchange with the secrets the proxy
// redacts from what it sends to the sandbox (the upstream's key): the
// Record then keeps and returns them as Redacted, in text, reasoning,
// arguments and results (a secret split across deltas included), so the
// CLI's events, which carry Redacted, match, and FinalAnswer never
// returns a secret.
//
// # Bounds
//
// A process in the sandbox can read the proxy's token and send requests
// of its own, as many and as large as it likes, during a turn. A Record
// keeps at most MaxExchanges exchanges (Begin returns nil past it),
// buffers at most MaxRequest bytes of one request and MaxRequestBytes
// over all its requests in flight (an exchange past either stops
// buffering: its request is unparsed), keeps at most MaxKept bytes of
// text, arguments and results, and runs at most one response worker and
// one request parse. Past a bound the Record is Truncated.
//
// Queries are priced by what the sandbox prints, since a tool can print
// any number of forged events: none costs a pass over the Record (see
// index.go). HasText and HasReasoning search the ended exchanges' text
// by suffix array once the linear scans would have cost a build, and
// scan only the exchanges still streaming; FindToolCall and FindCommand
// are map lookups by canonical arguments and command form computed once
// per call; ToolResult and ResultMatches wait only for the requests
// still pending and match against forms prepared once per result.
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
//   - Settled: the agent loop is over (nothing in flight, and a final
//     answer, or a failed last agent-loop exchange with no call waiting
//     for its result). A request that offers no tools, which is all a
//     tool in the sandbox can easily forge, cannot settle a turn, nor can
//     any failure while a call the model asked for has no result yet
//     (PendingCalls: the host keeps a long-lived turn waiting while a
//     tool runs).
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
//   - Anything past a bound (MaxKept, MaxLine, MaxRequest,
//     MaxRequestBytes, MaxExchanges): the Record is then Truncated and a
//     negative answer proves nothing.
//   - A secret's occurrences as such: with SetSecrets, the Record cannot
//     tell the key from Redacted the model wrote itself.
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
// released at once (memory stays bounded by MaxRequestBytes) and the
// turn's end does not pay for every request at once; with the scan, the
// background parse no longer weighs on the proxy's latency.
//
//	go test -run '^$' -bench BenchmarkQueries -benchtime 10000x ./trajectory/
//
// Against a record of 16 MiB of text (64 exchanges of four 64 KiB parts)
// and 1000 calls with their results, per query (mean over 10,000, half of
// them forged): HasText 37 ms before (every part and every response's
// joined parts rebuilt and scanned per query), 0.26–0.37 ms after, nearly
// all of it the one suffix array build (32 MiB of forms) the flood pays
// for; FindToolCall 884 µs -> 1.2–1.4 µs; FindCommand 1.36 ms -> 0.6–0.7
// µs; ResultMatches 13.7 µs -> 0.6 µs. The suffix array costs 4 bytes per
// byte of indexed form (up to twice the kept text), and only a Record
// queried more than a build's worth is indexed.
package trajectory
