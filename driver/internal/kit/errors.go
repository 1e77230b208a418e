package kit

import (
	"encoding/json"
	"github.com/sandbox-agent/sandbox-agent/internal/lazyre"
	"strconv"
	"strings"
	"unicode/utf8"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// MaxMessage is the longest DriverError.Message, in bytes.
const MaxMessage = 500

// Message is the one rule for DriverError.Message, in every driver: s on
// one line (its words joined by single spaces), at most MaxMessage bytes;
// a longer one is cut at a rune boundary and ends in " …". The whole text
// stays in DriverError.Stderr (or the events) when it came from there.
func Message(s string) string { return Cut(Fold(s), MaxMessage) }

// cutMark ends a text Cut shortened.
const cutMark = " …"

// Cut is s in at most max bytes: a longer s is cut at a rune boundary and
// ends in " …" (counted in max).
func Cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max - len(cutMark)
	if n < 0 {
		n = 0
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strings.TrimRight(s[:n], " ") + cutMark
}

// Failure is a failed turn (or CLI command) as its parser's Finish sees
// it; Err makes its DriverError. Every driver builds its DriverErrors
// here, so that every Message follows one rule (Message).
type Failure struct {
	Driver   string // the driver's name
	ExitCode int    // the CLI's exit code
	Stderr   string // the CLI's stderr; Err trims it
}

// Err is the DriverError of the failure: msg by the message rule, and the
// HTTP status of the API error behind it (0: none known; see HTTPStatus).
func (f Failure) Err(msg string, status int) *sandboxagent.DriverError {
	return &sandboxagent.DriverError{
		Driver: f.Driver, Message: Message(msg), ExitCode: f.ExitCode,
		Stderr: strings.TrimSpace(f.Stderr), Status: status,
	}
}

// statusRE finds an HTTP status in a CLI's error text: in front ("401
// Incorrect API key", "429: slow down"), after "status" ("unexpected
// status 401 Unauthorized", "last status: 429 Too Many Requests") or after
// "HTTP" ("HTTP 503", the code "HTTP_401").
var statusRE = lazyre.New(`^([0-9]{3})(?:[\s:]|$)|\bstatus:? ([0-9]{3})\b|\bHTTP[_ ]([0-9]{3})\b`)

// HTTPStatus is the first HTTP error status (400 to 599) a CLI's error
// texts name, looked for in order (see statusRE), or 0. Drivers sniff a
// status only when the CLI reports none of its own.
func HTTPStatus(texts ...string) int {
	for _, t := range texts {
		for _, m := range statusRE.Get().FindAllStringSubmatch(t, -1) {
			for _, g := range m[1:] {
				if n, err := strconv.Atoi(g); err == nil && n >= 400 && n <= 599 {
					return n
				}
			}
		}
	}
	return 0
}

// ToolResultText is a tool result's content as Payload.Output shows it:
// a JSON string as it is; a list of content blocks as the text of its
// text blocks and "[type]" for any other block, one a line; anything else
// as its JSON text.
func ToolResultText(content json.RawMessage) string {
	if len(content) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s
	}
	var bs []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(content, &bs) != nil {
		return string(content)
	}
	parts := make([]string, len(bs))
	for i, b := range bs {
		if b.Type == "text" {
			parts[i] = b.Text
		} else {
			parts[i] = "[" + b.Type + "]"
		}
	}
	return strings.Join(parts, "\n")
}
