package trajectory

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/sandbox-agent/sandbox-agent/internal/lazyre"
)

// OutputMatches reports whether reported, a tool's output as a CLI
// printed it, agrees with sent, the result the CLI gave the model. Both
// are whitespace-normalised first. The rules come from what the CLIs do:
//
//   - equal: claude, opencode, pi and dsh print exactly what they send
//     ("(no output)", "(Bash completed with no output)", the raw output);
//   - codex wraps the output for the model in a header ("Chunk ID: …",
//     "Wall time: …", "Process exited with code N", "Original token count:
//     …", then "Output:") and prints only the raw output: the part after
//     "Output:" must match;
//   - an empty report matches an empty output, or a placeholder such as
//     "(no output)";
//   - reported occurs within sent: a CLI may print only part (stdout
//     without stderr, one result of several blocks);
//   - sent is a cut-down version of reported: CLIs shorten long outputs
//     for the model with a marker line ("[... 120 lines truncated ...]",
//     "…500 tokens truncated…", "omitted"); every piece of sent between
//     markers must occur in reported, in order.
//
// A report that fails all of these did not reach the model as printed.
// The containment rules mean a report can be a fragment of the real
// output, never text the model was not sent.
func OutputMatches(sent, reported string) bool {
	return prepareSent(sent).matches(reported)
}

// matches is OutputMatches against a prepared result. Containment is
// searched as in HasText (textIndex), so that many reports against one
// large result do not each scan it.
func (f *sentForm) matches(reported string) bool {
	o := normalize(reported)
	if f.s == o || f.nb == o {
		return true
	}
	if o == "" {
		return f.nb == "" || f.placeholder
	}
	if f.nbIx.contains([]byte(o)) {
		return true
	}
	if len(f.pieces) == 0 {
		return false
	}
	rest := o
	for _, p := range f.pieces {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

var (
	placeholderRE = lazyre.New(`(?i)^\(.*\bno output\b.*\)$`)
	// Codex's inline "…N tokens truncated…", then whole lines about a cut.
	inlineCutRE  = lazyre.New(`…\d+ \w+ truncated…`)
	cutLineRE    = lazyre.New(`(?im)^[^\n]*\b(truncated|omitted)\b[^\n]*$`)
	headerLineRE = lazyre.New(`^(Process exited with code -?\d+|Process running with session ID \d+|[A-Z][A-Za-z ]{1,40}: .*)$`)
)

// envelopeBody returns the output inside codex's result envelope: header
// lines, then "Output:" on its own line, then the output.
func envelopeBody(sent string) (string, bool) {
	i := strings.Index(sent, "Output:\n")
	if i < 0 || (i > 0 && sent[i-1] != '\n') {
		return "", false
	}
	for _, l := range strings.Split(strings.TrimSuffix(sent[:i], "\n"), "\n") {
		if l != "" && !headerLineRE.MatchString(l) {
			return "", false
		}
	}
	return sent[i+len("Output:\n"):], true
}

// CommandMatches reports whether c carries the shell command a CLI
// reported. The call's candidates are its string argument command, cmd or
// script, or an argv array there (joined by spaces, and its last element
// after a "-c"/"-lc" flag); a local shell call's action.command likewise.
// Each side is compared whitespace-normalised, also after unwrapping one
// shell invocation (codex prints "/bin/bash -lc 'echo hi'" for the model's
// {"cmd":"echo hi"}).
func CommandMatches(c ToolCall, command string) bool {
	want := commandForms(command)
	for _, f := range callCommandForms(c.Arguments) {
		if slices.Contains(want, f) {
			return true
		}
	}
	return false
}

// callCommandForms returns the command forms (see commandForms) of every
// candidate a call's arguments carry.
func callCommandForms(arguments string) []string {
	var args map[string]json.RawMessage
	if json.Unmarshal([]byte(arguments), &args) != nil {
		return nil
	}
	var out []string
	for _, k := range []string{"command", "cmd", "script"} {
		raw, ok := args[k]
		if !ok {
			continue
		}
		var cands []string
		if s, ok := jsonString(raw); ok {
			cands = append(cands, s)
		} else {
			var argv []string
			if json.Unmarshal(raw, &argv) == nil && len(argv) > 0 {
				cands = append(cands, strings.Join(argv, " "))
				if n := len(argv); n >= 3 && shellFlagRE.MatchString(argv[n-2]) {
					cands = append(cands, argv[n-1])
				}
			}
		}
		for _, cand := range cands {
			for _, f := range commandForms(cand) {
				if !slices.Contains(out, f) {
					out = append(out, f)
				}
			}
		}
	}
	return out
}

var (
	shellFlagRE = lazyre.New(`^-[a-z]*c$`)
	shellWrapRE = lazyre.New(`^(?:/usr/bin/|/bin/)?(?:ba|z|da)?sh\s+-[a-z]*c\s+`)
)

// commandForms is a command normalised, plus the command inside it when it
// is one shell invocation with a single-word script.
func commandForms(s string) []string {
	n := normalize(s)
	if n == "" {
		return nil
	}
	out := []string{n}
	t := strings.TrimSpace(s)
	if loc := shellWrapRE.FindStringIndex(t); loc != nil {
		if w, ok := shellWord(t[loc[1]:]); ok {
			if nw := normalize(w); nw != "" {
				out = append(out, nw)
			}
		}
	}
	return out
}

// shellWord unquotes s when it is exactly one POSIX shell word.
func shellWord(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return "", false
			}
			b.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0 {
					i++
				}
				b.WriteByte(s[i])
			}
			if i >= len(s) {
				return "", false
			}
		case c == '\\':
			if i+1 >= len(s) {
				return "", false
			}
			i++
			b.WriteByte(s[i])
		case isSpace(c):
			return "", false // more than one word
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}
