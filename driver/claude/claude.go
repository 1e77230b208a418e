package claude

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

// DefaultModel is the model used when the agent was given none: the CLI's
// alias for its current Sonnet model (sent as e.g. claude-sonnet-5-5).
const DefaultModel = "sonnet"

// DefaultMaxRetries bounds the CLI's API retries (CLAUDE_CODE_MAX_RETRIES)
// when Options.MaxRetries is zero: a bad key then fails in a few seconds.
const DefaultMaxRetries = 2

// Options configure the driver.
type Options struct {
	// BaseURL of the Anthropic Messages API (or a compatible gateway); ""
	// is Anthropic's own endpoint.
	BaseURL string
	// APIKey for it. It reaches the CLI only through the turn's environment
	// (ANTHROPIC_API_KEY), never a file, and is redacted from logs.
	APIKey string
	// BearerAuth sends the key as "Authorization: Bearer" (the CLI's
	// ANTHROPIC_AUTH_TOKEN) instead of x-api-key, for gateways that want
	// that.
	BearerAuth bool
	// MaxRetries is the number of API retries the CLI makes (429, 5xx, and
	// also 401); zero means DefaultMaxRetries, negative means none.
	MaxRetries int
	// MaxTurns caps the model round trips of one turn (--max-turns); zero
	// means no cap.
	MaxTurns int
	// Env is extra, non-secret environment for the CLI (for instance
	// ANTHROPIC_DEFAULT_HAIKU_MODEL for a gateway). It is also written to
	// settings.json.
	Env map[string]string
	// Image overrides the image the driver asks for ("" = the built-in one
	// from versions.json).
	Image string
}

// Driver drives Claude Code. It holds no per-sandbox state, so one Driver
// may serve several agents.
type Driver struct {
	kit.Identity
	kit.Instructions
	o Options
}

var _ sandboxagent.Driver = (*Driver)(nil)

// New returns a driver.
// It runs in Options.Image ("" = the built-in claude image); its traits are everything but
// deltas (the driver does not ask the CLI for partial messages; each
// content block arrives whole). An abort interrupts the long-lived CLI's
// turn (a CLI run per turn is killed). Rules are the user-global
// ~/.claude/CLAUDE.md, skills ~/.claude/skills/<name>/.
func New(o Options) *Driver {
	return &Driver{
		Identity:     kit.NewIdentity("claude", o.Image, sandboxagent.Traits{Continue: true, Thinking: true, Usage: true, Abort: sandboxagent.AbortInterrupt}),
		Instructions: instructions(),
		o:            o,
	}
}

// Secrets returns the API key.
func (d *Driver) Secrets() []string { return kit.Secrets(d.o.APIKey) }

func (d *Driver) maxRetries() int { return kit.Retries(d.o.MaxRetries, DefaultMaxRetries) }

// settingsEnv is the non-secret environment of every turn, also written
// into settings.json.
func (d *Driver) settingsEnv() map[string]string {
	env := map[string]string{
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
		"DISABLE_TELEMETRY":                        "1",
		"DISABLE_AUTOUPDATER":                      "1",
		"DISABLE_ERROR_REPORTING":                  "1",
		"CLAUDE_CODE_MAX_RETRIES":                  strconv.Itoa(d.maxRetries()),
	}
	if d.o.BaseURL != "" {
		env["ANTHROPIC_BASE_URL"] = d.o.BaseURL
	}
	for k, v := range d.o.Env {
		env[k] = v
	}
	return env
}

// settings is the content of ~/.claude/settings.json.
func (d *Driver) settings() ([]byte, error) {
	s := map[string]any{
		"env":         d.settingsEnv(),
		"permissions": map[string]any{"defaultMode": "bypassPermissions"},
	}
	return kit.JSONFile(s)
}

// Setup writes ~/.claude/settings.json.
func (d *Driver) Setup(ctx context.Context, c sandboxagent.ContainerOps) error {
	for k := range d.o.Env {
		if isSecretEnv(k) {
			return fmt.Errorf("%w: claude: put the key in Options.APIKey, not Options.Env[%q]", sandboxagent.ErrInvalidArgument, k)
		}
	}
	b, err := d.settings()
	if err != nil {
		return err
	}
	return sh.WriteFile(ctx, c, ".claude/settings.json", b, 0o600)
}

// isSecretEnv names the variables that carry credentials.
func isSecretEnv(k string) bool {
	switch k {
	case "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN":
		return true
	}
	return false
}

// Command is the headless command line of one turn (see the package doc).
func (d *Driver) Command(t sandboxagent.Turn) (sandboxagent.Invocation, error) {
	if strings.TrimSpace(t.Prompt) == "" {
		return sandboxagent.Invocation{}, fmt.Errorf("%w: empty prompt", sandboxagent.ErrInvalidArgument)
	}
	inv, err := d.invocation(t)
	if err != nil {
		return inv, err
	}
	inv.Stdin = []byte(t.Prompt)
	return inv, nil
}

var _ sandboxagent.LongLived = (*Driver)(nil)

// ServeCommand is the long-lived mode (see the package doc): a turn's
// command line reading stream-json user messages on stdin, one turn each,
// until stdin closes.
func (d *Driver) ServeCommand(t sandboxagent.Turn) (sandboxagent.Invocation, error) {
	return d.invocation(t, "--input-format", "stream-json")
}

// userMessage is one turn's stdin line in the long-lived mode.
type userMessage struct {
	Type    string `json:"type"`
	Message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"message"`
	ParentToolUseID *string `json:"parent_tool_use_id"`
	// SessionID is informational: the CLI ignores it and serves the
	// session it was started on (--resume, or the new one).
	SessionID string `json:"session_id"`
}

// TurnInput is one user message: a JSON line (the encoder escapes the
// prompt's newlines, so it stays one line).
func (d *Driver) TurnInput(t sandboxagent.Turn) ([]byte, error) {
	if strings.TrimSpace(t.Prompt) == "" {
		return nil, fmt.Errorf("%w: empty prompt", sandboxagent.ErrInvalidArgument)
	}
	if t.SessionID != "" {
		if err := ids.Check(t.SessionID); err != nil {
			return nil, err
		}
	}
	m := userMessage{Type: "user", SessionID: t.SessionID}
	m.Message.Role, m.Message.Content = "user", t.Prompt
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// AbortInput is the interrupt control request: the CLI stops the running
// tool and model call, prints the turn's result line (is_error, subtype
// error_during_execution) and reads the next message. Asked while no turn
// runs, it only answers with a control_response.
func (d *Driver) AbortInput() []byte {
	return []byte(`{"type":"control_request","request_id":"sandbox-agent-interrupt","request":{"subtype":"interrupt"}}` + "\n")
}

// invocation is the CLI for t, with extra flags after -p.
func (d *Driver) invocation(t sandboxagent.Turn, extra ...string) (sandboxagent.Invocation, error) {
	model := t.Model
	if model == "" {
		model = DefaultModel
	}
	if strings.HasPrefix(model, "-") {
		return sandboxagent.Invocation{}, fmt.Errorf("%w: model %q", sandboxagent.ErrInvalidArgument, model)
	}
	cmd := append([]string{"claude", "-p"}, extra...)
	cmd = append(cmd,
		"--output-format", "stream-json", "--verbose",
		"--dangerously-skip-permissions",
		"--model", model,
	)
	if t.SessionID != "" {
		if err := ids.Check(t.SessionID); err != nil {
			return sandboxagent.Invocation{}, err
		}
		cmd = append(cmd, "--resume", t.SessionID)
	}
	if d.o.MaxTurns > 0 {
		cmd = append(cmd, "--max-turns", strconv.Itoa(d.o.MaxTurns))
	}
	env := d.settingsEnv()
	env["IS_SANDBOX"] = "1"
	if d.o.APIKey != "" {
		if d.o.BearerAuth {
			env["ANTHROPIC_AUTH_TOKEN"] = d.o.APIKey
		} else {
			env["ANTHROPIC_API_KEY"] = d.o.APIKey
		}
	}
	return sandboxagent.Invocation{Cmd: cmd, Env: env, WorkDir: t.WorkDir}, nil
}

// NewParser returns the parser of one turn's stream-json output.
func (d *Driver) NewParser(t sandboxagent.Turn) sandboxagent.Parser {
	return &parser{driver: d.Name(), session: t.SessionID, tools: map[string]string{}}
}

// WarmSteps: the SDK's initialize control request, which the CLI answers
// once it is loaded and reading, then get_context_usage with detail
// "summary": the CLI assembles what a first prompt sends (system prompt,
// tools, skills, memory files) and counts it locally, which takes about a
// third of the first turn's CPU off it. It asks the model nothing (detail
// "full" would ask its token-count API) and leaves nothing in the
// session. A CLI that refuses it is only not warmed as far.
//
// No warm-up turn: one claude process serves one session, and /clear
// would leave its traces in the next session's context.
func (d *Driver) WarmSteps(sandboxagent.Turn) []sandboxagent.WarmStep {
	return []sandboxagent.WarmStep{
		{Input: controlRequest(warmInitID, `{"subtype":"initialize"}`), Done: controlAnswered(warmInitID)},
		{Input: controlRequest(warmContextID, `{"subtype":"get_context_usage","detail":"summary"}`), Done: controlAnswered(warmContextID)},
	}
}

const (
	warmInitID    = "sandbox-agent-warm"
	warmContextID = "sandbox-agent-warm-context"
)

// controlRequest is one control request line.
func controlRequest(id, request string) []byte {
	return []byte(`{"type":"control_request","request_id":"` + id + `","request":` + request + "}\n")
}

// controlAnswered recognises the control_response to request id, success
// or error alike.
func controlAnswered(id string) func(line []byte) (bool, error) {
	return func(line []byte) (bool, error) {
		var r struct {
			Type     string `json:"type"`
			Response struct {
				RequestID string `json:"request_id"`
			} `json:"response"`
		}
		return json.Unmarshal(line, &r) == nil && r.Type == "control_response" && r.Response.RequestID == id, nil
	}
}
