package images

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandbox-agent/sandbox-agent/internal/lazyre"
	"io"
	"strings"
)

var (
	// ansiRe matches the colour escapes the classic builder wraps stderr in.
	ansiRe = lazyre.New("\x1b\\[[0-9;]*[A-Za-z]")
	// failedCmdRe is the classic builder's failure message, which repeats
	// the whole RUN command (already shown as the failing step).
	failedCmdRe = lazyre.New(`(?s)^The command '.*' returned a non-zero code: (\d+)$`)
)

// builderNoise reports output lines of the classic builder itself.
func builderNoise(l string) bool {
	return strings.HasPrefix(l, " ---> ") || strings.HasPrefix(l, "Removing intermediate container ") ||
		strings.HasPrefix(l, "Successfully built ") || strings.HasPrefix(l, "Successfully tagged ")
}

// BuildError is a failed build: the engine's message, the step that failed
// and the tail of that step's output.
type BuildError struct {
	Step    string // e.g. "Step 8/11 : RUN ..." (truncated), "" if unknown
	Output  string // last lines the failing step printed
	Message string // the engine's error
}

func (e *BuildError) Error() string {
	var b strings.Builder
	b.WriteString(e.Message)
	if e.Step != "" {
		fmt.Fprintf(&b, "\nfailing step: %s", e.Step)
	}
	if out := strings.TrimSpace(e.Output); out != "" {
		fmt.Fprintf(&b, "\nits output (tail):\n%s", indent(out))
	}
	return b.String()
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// streamMessage is one line of the engine's JSON progress stream (build,
// push). Old engines put the error in "error", newer ones in "errorDetail";
// both are read.
type streamMessage struct {
	Stream      string `json:"stream"`
	Status      string `json:"status"`
	Progress    string `json:"progress"`
	ID          string `json:"id"`
	Error       string `json:"error"`
	ErrorDetail *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"errorDetail"`
	Aux json.RawMessage `json:"aux"`
}

const (
	maxStepTail  = 40      // lines of the failing step kept
	maxStepBytes = 8 << 10 // bytes of the failing step kept
	maxStepTitle = 200
)

// decodeStream copies the engine's JSON message stream to w as plain text
// and returns the first error message in it as a *BuildError (with the
// current step and its output tail). Progress-bar updates (messages with a
// progress string) are not printed.
func decodeStream(r io.Reader, w io.Writer) error {
	dec := json.NewDecoder(r)
	var step string
	var tail []string // output lines of the current step
	var partial strings.Builder
	addOutput := func(s string) {
		partial.WriteString(s)
		text := partial.String()
		lines := strings.Split(text, "\n")
		partial.Reset()
		partial.WriteString(lines[len(lines)-1]) // unterminated rest
		for _, l := range lines[:len(lines)-1] {
			if strings.HasPrefix(l, "Step ") {
				step, tail = truncate(l, maxStepTitle), nil
				continue
			}
			if builderNoise(l) {
				continue
			}
			tail = append(tail, truncate(l, 1000))
			if len(tail) > maxStepTail {
				tail = tail[len(tail)-maxStepTail:]
			}
		}
	}
	for {
		var m streamMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading the engine's progress stream: %w", err)
		}
		if m.Stream != "" {
			text := ansiRe.Get().ReplaceAllString(m.Stream, "")
			io.WriteString(w, text)
			addOutput(text)
		}
		if m.Status != "" && m.Progress == "" {
			if m.ID != "" {
				fmt.Fprintf(w, "%s: %s\n", m.ID, m.Status)
			} else {
				fmt.Fprintln(w, m.Status)
			}
		}
		msg := m.Error
		if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
			msg = m.ErrorDetail.Message
		}
		if msg != "" {
			if partial.Len() > 0 {
				addOutput("\n")
			}
			out := strings.Join(tail, "\n")
			if len(out) > maxStepBytes {
				out = "..." + out[len(out)-maxStepBytes:]
			}
			msg = strings.TrimSpace(ansiRe.Get().ReplaceAllString(msg, ""))
			if sub := failedCmdRe.FindStringSubmatch(msg); sub != nil && step != "" {
				msg = "the step's command returned a non-zero code: " + sub[1]
			}
			return &BuildError{Step: step, Output: out, Message: msg}
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
