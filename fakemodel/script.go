package fakemodel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// Script is the scripted behaviour of the fake model. See the package
// documentation for the JSON format.
type Script struct {
	// Responses are consumed in order, one per request that offers tools.
	Responses []Step `json:"responses"`
	// ExpectKey, when set, is the only API key accepted: a request whose
	// x-api-key or Authorization: Bearer value differs gets HTTP 401 and
	// consumes nothing.
	ExpectKey string `json:"expect_key,omitempty"`
}

// Step is one scripted model turn: a tool call, a text answer or an HTTP
// error.
type Step struct {
	// Tool is "shell" (run Command with the CLI's shell tool) or "write"
	// (write Content to Path with the CLI's file-write tool, or through the
	// shell tool when the CLI offers no write tool).
	Tool    string `json:"tool,omitempty"`
	Command string `json:"command,omitempty"`
	Path    string `json:"path,omitempty"`
	Content string `json:"content,omitempty"`

	// Thinking is emitted as reasoning before Text (and before a tool call).
	Thinking string `json:"thinking,omitempty"`
	// Text is the assistant text. On a tool step it precedes the call.
	Text string `json:"text,omitempty"`

	// Error is an HTTP status (400-599) answered instead of a completion,
	// with Message in the API's error body.
	Error   int    `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
	// Repeat makes an error step sticky: once reached, every later request
	// fails the same way. Default: true for 401 and 403, false otherwise.
	Repeat *bool `json:"repeat,omitempty"`

	// Usage overrides the token counts reported for this step.
	Usage *Usage `json:"usage,omitempty"`
}

// Usage is a token count reported to the CLI.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// Step kinds.
const (
	ToolShell = "shell"
	ToolWrite = "write"
)

// IsError reports whether the step answers an HTTP error.
func (st Step) IsError() bool { return st.Error != 0 }

// Sticky reports whether an error step keeps failing every later request.
func (st Step) Sticky() bool {
	if st.Repeat != nil {
		return *st.Repeat
	}
	return st.Error == 401 || st.Error == 403
}

// ParseScript decodes and validates a script. Unknown fields are rejected;
// errors name the offending step as responses[i] (0-based).
func ParseScript(data []byte) (Script, error) {
	var top struct {
		Responses []json.RawMessage `json:"responses"`
		ExpectKey string            `json:"expect_key"`
	}
	if err := decodeStrict(data, &top); err != nil {
		return Script{}, fmt.Errorf("fakemodel: script: %w", err)
	}
	s := Script{ExpectKey: top.ExpectKey, Responses: make([]Step, 0, len(top.Responses))}
	for i, raw := range top.Responses {
		var st Step
		if err := decodeStrict(raw, &st); err != nil {
			return Script{}, fmt.Errorf("fakemodel: script: responses[%d]: %w", i, err)
		}
		s.Responses = append(s.Responses, st)
	}
	if err := s.Validate(); err != nil {
		return Script{}, err
	}
	return s, nil
}

// LoadScript reads and parses a script file.
func LoadScript(path string) (Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Script{}, fmt.Errorf("fakemodel: %w", err)
	}
	s, err := ParseScript(data)
	if err != nil {
		return Script{}, fmt.Errorf("%w (in %s)", err, path)
	}
	return s, nil
}

func decodeStrict(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return errors.New("empty document")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// Validate checks every step for consistency. ParseScript calls it; call it
// yourself for a Script built in code (New does).
func (s Script) Validate() error {
	for i, st := range s.Responses {
		if err := st.validate(); err != nil {
			return fmt.Errorf("fakemodel: script: responses[%d]: %w", i, err)
		}
	}
	return nil
}

func (st Step) validate() error {
	if st.Usage != nil && (st.Usage.InputTokens < 0 || st.Usage.OutputTokens < 0) {
		return errors.New("usage token counts must not be negative")
	}
	switch {
	case st.Error != 0:
		if st.Error < 400 || st.Error > 599 {
			return fmt.Errorf("error must be an HTTP status between 400 and 599, got %d", st.Error)
		}
		if st.Tool != "" || st.Command != "" || st.Path != "" || st.Content != "" || st.Text != "" || st.Thinking != "" {
			return errors.New("an error step cannot also have tool, command, path, content, text or thinking")
		}
		return nil
	case st.Message != "" || st.Repeat != nil:
		return errors.New("message and repeat belong to error steps (set error to an HTTP status)")
	}
	switch st.Tool {
	case ToolShell:
		if st.Command == "" {
			return errors.New(`tool "shell" needs a non-empty command`)
		}
		if st.Path != "" || st.Content != "" {
			return errors.New(`tool "shell" takes command, not path or content`)
		}
	case ToolWrite:
		if st.Path == "" {
			return errors.New(`tool "write" needs a non-empty path`)
		}
		if st.Command != "" {
			return errors.New(`tool "write" takes path and content, not command`)
		}
	case "":
		if st.Command != "" || st.Path != "" || st.Content != "" {
			return errors.New(`command, path and content need tool "shell" or "write"`)
		}
		if st.Text == "" && st.Thinking == "" {
			return errors.New("step is none of tool, text or error (set tool, text/thinking, or error)")
		}
	default:
		return fmt.Errorf(`unknown tool %q (want "shell" or "write")`, st.Tool)
	}
	return nil
}
