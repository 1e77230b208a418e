package kit

import (
	"bytes"
	"encoding/json"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// Raw is the one event of a stdout line a parser does not understand
// (parsers never drop a line silently).
func Raw(line []byte) []sandboxagent.Event {
	return []sandboxagent.Event{{Kind: sandboxagent.KindRaw, Payload: sandboxagent.Payload{Raw: string(line)}}}
}

// Blank reports whether a stdout line holds nothing but white space; it
// gives no events.
func Blank(line []byte) bool { return len(bytes.TrimSpace(line)) == 0 }

// Decode decodes a stdout line that holds one JSON object into v and
// reports whether it did; plain text and other JSON values are not
// decoded.
func Decode(line []byte, v any) bool {
	line = bytes.TrimSpace(line)
	return len(line) > 0 && line[0] == '{' && json.Unmarshal(line, v) == nil
}

// Line decodes one stdout line of a CLI that prints typed JSON objects
// into v, whose type field is typ. It reports false with the events to
// return when there is nothing more to do: none for a blank line, a raw
// event for anything but a JSON object with a type.
func Line(line []byte, v any, typ *string) ([]sandboxagent.Event, bool) {
	if Blank(line) {
		return nil, false
	}
	if !Decode(line, v) || *typ == "" {
		return Raw(line), false
	}
	return nil, true
}

// ToolArgs are a tool call's arguments, for the strings the events show
// (payload command and path).
type ToolArgs map[string]any

// ParseToolArgs decodes a tool call's input; anything but a JSON object
// gives no arguments.
func ParseToolArgs(input []byte) ToolArgs {
	var a ToolArgs
	_ = json.Unmarshal(input, &a)
	return a
}

// Str is the string argument k, or "".
func (a ToolArgs) Str(k string) string {
	s, _ := a[k].(string)
	return s
}

// First is the first non-empty string argument among keys (CLIs name a
// file tool's path file_path, filePath or path), or "".
func (a ToolArgs) First(keys ...string) string {
	for _, k := range keys {
		if s := a.Str(k); s != "" {
			return s
		}
	}
	return ""
}
