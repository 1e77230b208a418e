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
