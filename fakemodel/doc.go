// Package fakemodel is a scripted stand-in for an LLM API: a real HTTP
// server that coding-agent CLIs (opencode, codex, claude, pi, dsh) talk to
// instead of a model, so they can be driven end to end without a network or
// a key. Only the model is fake; the CLI runs its real tools.
//
// # APIs
//
//   - OpenAI chat completions: POST /v1/chat/completions (opencode, pi, dsh).
//     Reasoning goes out as the DeepSeek-style delta field reasoning_content.
//   - OpenAI Responses: POST /v1/responses (codex, wire_api="responses").
//     Streams response.created, response.in_progress, output_item.added/done,
//     reasoning summary, output_text and function_call_arguments
//     deltas, and response.completed carrying usage.
//   - Anthropic Messages: POST /v1/messages (claude); also
//     /v1/messages/count_tokens. A role:"system" message inside messages and a
//     top-level system are both accepted (the fake does not look at them).
//
// Every route is matched by suffix, so /chat/completions, /responses and
// /messages work without the /v1 prefix too. Each API answers as SSE when
// the body has "stream": true and as one JSON object otherwise. GET
// /v1/models lists one model; HEAD on any path and GET / answer 200 (CLIs
// probe); anything else is a JSON 404.
//
// # Script
//
//	{"expect_key": "sk-test",            // optional
//	 "responses": [
//	   {"tool": "shell", "command": "echo hi > /tmp/out.txt"},
//	   {"tool": "write", "path": "/tmp/a.py", "content": "print(1)\n"},
//	   {"thinking": "optional reasoning", "text": "DONE"},
//	   {"error": 429, "message": "slow down"},
//	   {"error": 401, "message": "invalid api key", "repeat": true}
//	 ]}
//
// Steps are consumed in order, one per request that offers tools (a
// non-empty "tools" array). A request without tools — several CLIs make one
// to title the session — gets the text TitleText and consumes nothing. Once
// the script is exhausted every request with tools gets the text DoneText.
//
// Step fields:
//
//   - tool "shell" + command: a call of the CLI's shell tool running command.
//   - tool "write" + path + content: a call of the CLI's file-write tool. When
//     the CLI offers none (codex), the shell tool runs
//     mkdir -p DIR && printf '%s' BASE64 | base64 -d > PATH, which is
//     byte-exact. content is a JSON string, so it is text (UTF-8).
//   - text, thinking: an assistant answer; thinking is emitted as reasoning
//     first. On a tool step they are emitted before the call.
//   - error (400-599) + message: the request gets that HTTP status with an
//     error body in the API's style. By default 401 and 403 are sticky (a bad
//     key stays bad: that request and every later one, with or without
//     tools, fail the same way) and every other status is consumed once (the
//     CLI's retry gets the next step). "repeat": true/false overrides this.
//   - usage {"input_tokens", "output_tokens"}: token counts reported for the
//     step. Without it the fake estimates them from the sizes (about four
//     bytes a token), so usage is always present.
//
// expect_key: when set, a request whose x-api-key, or else Authorization
// Bearer value, differs gets 401 and consumes nothing.
//
// # Tool selection
//
// The fake reads the tools the CLI offered (Anthropic input_schema, chat
// function.parameters, or Responses flat parameters). The shell tool is the
// best of: a known name (bash, shell, exec_command, run_shell_command, …,
// case-insensitive), a name containing bash/shell/terminal/exec, or a tool
// whose description mentions a shell and that requires a command parameter;
// in each case it must declare a free string parameter command, cmd or
// script (an enum, as in str_replace_editor, does not count), or an array
// one (then ["bash","-lc",command] is sent). The write tool must be named
// like one (write, write_file, create_file, …) and declare a path parameter
// (file_path, filePath, path, …) and a content parameter (content,
// file_text, …). Arguments use the parameter names the schema declares; a
// declared "description" is always filled, and every other required
// parameter gets a value from its default, enum or type. If the tool a step
// needs is missing, the fake answers an explanatory text instead (and the
// step counts as consumed).
//
// # Requests
//
// Every request is recorded (Server.Requests, and as JSON lines in
// Options.LogFile) with its headers — Authorization, x-api-key and similar
// values replaced by "[REDACTED]" — and its raw JSON body.
package fakemodel
