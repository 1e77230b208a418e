package pi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

// DefaultModel is the model id used when neither the turn nor
// Options.Model names one. It is the name the project's other gateway
// drivers use by default (codex: gpt-5.5), so one gateway route serves
// them all; the fake model accepts any name. It is declared in models.json,
// so pi knows it without printing its "custom model id" warning.
const DefaultModel = "gpt-5.5"

// DefaultProvider names the custom provider written into models.json when
// Options.BaseURL is set and Options.Provider is empty.
const DefaultProvider = "sandbox-agent"

// DefaultBuiltinProvider is pi's built-in provider used when
// Options.BaseURL and Options.Provider are both empty.
const DefaultBuiltinProvider = "openai"

// DefaultAPI is the wire API of the custom provider.
const DefaultAPI = "openai-completions"

// DefaultMaxRetries bounds pi's agent-level retries of a transient API
// error (429, 5xx, connection errors) when Options.MaxRetries is zero. A
// rejected key (401/403) is never retried by pi.
const DefaultMaxRetries = 2

// DefaultRetryDelay is the base of pi's exponential retry back-off, in
// milliseconds (1 s, 2 s, ...; pi's own default is 2 s).
const DefaultRetryDelay = 1000

// KeyEnv is the environment variable that carries the API key to pi for
// the custom provider (models.json names it instead of holding the key).
const KeyEnv = "SANDBOX_AGENT_PI_API_KEY"

// builtinKeyEnv is the environment variable pi reads the key of a built-in
// provider from (pi-ai's env-api-keys.js, pi 0.73.1).
var builtinKeyEnv = map[string]string{
	"anthropic":              "ANTHROPIC_API_KEY",
	"openai":                 "OPENAI_API_KEY",
	"azure-openai-responses": "AZURE_OPENAI_API_KEY",
	"deepseek":               "DEEPSEEK_API_KEY",
	"google":                 "GEMINI_API_KEY",
	"google-vertex":          "GOOGLE_CLOUD_API_KEY",
	"groq":                   "GROQ_API_KEY",
	"cerebras":               "CEREBRAS_API_KEY",
	"xai":                    "XAI_API_KEY",
	"openrouter":             "OPENROUTER_API_KEY",
	"vercel-ai-gateway":      "AI_GATEWAY_API_KEY",
	"zai":                    "ZAI_API_KEY",
	"mistral":                "MISTRAL_API_KEY",
	"minimax":                "MINIMAX_API_KEY",
	"minimax-cn":             "MINIMAX_CN_API_KEY",
	"moonshotai":             "MOONSHOT_API_KEY",
	"moonshotai-cn":          "MOONSHOT_API_KEY",
	"fireworks":              "FIREWORKS_API_KEY",
	"opencode":               "OPENCODE_API_KEY",
	"opencode-go":            "OPENCODE_API_KEY",
	"kimi-coding":            "KIMI_API_KEY",
	"cloudflare-workers-ai":  "CLOUDFLARE_API_KEY",
	"cloudflare-ai-gateway":  "CLOUDFLARE_API_KEY",
	"xiaomi":                 "XIAOMI_API_KEY",
	"xiaomi-token-plan-cn":   "XIAOMI_TOKEN_PLAN_CN_API_KEY",
	"xiaomi-token-plan-ams":  "XIAOMI_TOKEN_PLAN_AMS_API_KEY",
	"xiaomi-token-plan-sgp":  "XIAOMI_TOKEN_PLAN_SGP_API_KEY",
	"huggingface":            "HF_TOKEN",
	"github-copilot":         "COPILOT_GITHUB_TOKEN",
}

// Options configure the pi driver.
type Options struct {
	// BaseURL of the model API; "" = the provider's real endpoint (one of
	// pi's built-in providers, see Provider). With a BaseURL, Setup writes
	// a custom provider into ~/.pi/agent/models.json (pi appends
	// /chat/completions for the openai-completions API).
	BaseURL string
	// APIKey for it. It reaches pi only through the environment of each
	// turn (KeyEnv, or the built-in provider's variable), never a file; the
	// shell commands the model runs do not see it (settings.json's
	// shellCommandPrefix unsets it).
	APIKey string
	// Provider is the provider name. With BaseURL: the name of the custom
	// provider in models.json ("" = DefaultProvider). Without: one of pi's
	// built-in providers ("" = DefaultBuiltinProvider), e.g. "anthropic".
	Provider string
	// API is the custom provider's wire API ("" = DefaultAPI,
	// "openai-completions"; also "openai-responses", "anthropic-messages",
	// "google-generative-ai"). Ignored without BaseURL.
	API string
	// Model is the model id when a turn names none ("" = DefaultModel).
	Model string
	// Reasoning declares the custom model as reasoning-capable: pi then
	// sends reasoning_effort and the system prompt as a developer message.
	Reasoning bool
	// Thinking is pi's thinking level (--thinking: off, minimal, low,
	// medium, high, xhigh); "" leaves pi's default.
	Thinking string
	// KeyEnv overrides the environment variable the key travels in (needed
	// for a built-in provider this package does not know).
	KeyEnv string
	// MaxRetries bounds pi's retries of transient API errors (0 =
	// DefaultMaxRetries, negative = no retry).
	MaxRetries int
	// Image overrides the image ("" = the built-in one from versions.json).
	Image string
}

// Driver drives pi (@mariozechner/pi-coding-agent). It holds no
// per-sandbox state, so one Driver may serve several agents.
type Driver struct {
	kit.Identity
	kit.Instructions
	o Options
}

var _ sandboxagent.Driver = (*Driver)(nil)

// New returns a pi driver.
// It runs in Options.Image ("" = the built-in pi image); its traits are
// everything (pi streams text and thinking deltas in JSON mode and
// reports per-request usage). Rules are ~/.pi/agent/AGENTS.md, the global
// context file pi appends to its system prompt in every session; skills
// ~/.pi/agent/skills/<name>/.
func New(o Options) *Driver {
	return &Driver{
		Identity:     kit.NewIdentity("pi", o.Image, sandboxagent.Traits{Continue: true, Thinking: true, Usage: true, Deltas: true, Abort: sandboxagent.AbortInterrupt}),
		Instructions: instructions(),
		o:            o,
	}
}

// Secrets returns the API key.
func (d *Driver) Secrets() []string { return kit.Secrets(d.o.APIKey) }

func (d *Driver) custom() bool { return d.o.BaseURL != "" }

func (d *Driver) provider() string {
	switch {
	case d.o.Provider != "":
		return d.o.Provider
	case d.custom():
		return DefaultProvider
	}
	return DefaultBuiltinProvider
}

func (d *Driver) api() string {
	if d.o.API != "" {
		return d.o.API
	}
	return DefaultAPI
}

func (d *Driver) defaultModel() string {
	if d.o.Model != "" {
		return d.o.Model
	}
	return DefaultModel
}

func (d *Driver) maxRetries() int { return kit.Retries(d.o.MaxRetries, DefaultMaxRetries) }

// keyEnv is the variable the key travels in.
func (d *Driver) keyEnv() (string, error) {
	if d.o.KeyEnv != "" {
		if !validEnvName(d.o.KeyEnv) {
			return "", fmt.Errorf("%w: pi: KeyEnv %q", sandboxagent.ErrInvalidArgument, d.o.KeyEnv)
		}
		return d.o.KeyEnv, nil
	}
	if d.custom() {
		return KeyEnv, nil
	}
	if v, ok := builtinKeyEnv[d.provider()]; ok {
		return v, nil
	}
	return "", fmt.Errorf("%w: pi: no known key variable for built-in provider %q (set Options.KeyEnv or Options.BaseURL)", sandboxagent.ErrInvalidArgument, d.provider())
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// validName: provider names and thinking levels that are safe in JSON and
// on a command line (no leading "-").
func validName(s string) bool {
	if s == "" || s[0] == '-' {
		return false
	}
	for _, r := range s {
		if !(r == '-' || r == '_' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func (d *Driver) check() error {
	if !validName(d.provider()) {
		return fmt.Errorf("%w: pi: provider %q", sandboxagent.ErrInvalidArgument, d.provider())
	}
	if d.o.Thinking != "" && !validName(d.o.Thinking) {
		return fmt.Errorf("%w: pi: thinking level %q", sandboxagent.ErrInvalidArgument, d.o.Thinking)
	}
	if _, err := d.keyEnv(); err != nil && (d.o.APIKey != "" || d.o.KeyEnv != "") {
		return err
	}
	return nil
}

// ModelsJSON is the ~/.pi/agent/models.json Setup writes; nil when the
// driver uses a built-in provider at its real endpoint (then no file is
// needed). It names the key's environment variable, never the key.
func (d *Driver) ModelsJSON() ([]byte, error) {
	if !d.custom() {
		return nil, nil
	}
	keyRef := "sandbox-agent-no-key" // a literal: an endpoint without auth
	if d.o.APIKey != "" {
		env, err := d.keyEnv()
		if err != nil {
			return nil, err
		}
		keyRef = env
	}
	model := map[string]any{
		"id":            d.defaultModel(),
		"name":          d.defaultModel(),
		"reasoning":     d.o.Reasoning,
		"input":         []string{"text"},
		"contextWindow": 128000,
		"maxTokens":     16384,
	}
	m := map[string]any{
		"providers": map[string]any{
			d.provider(): map[string]any{
				"baseUrl": d.o.BaseURL,
				"api":     d.api(),
				"apiKey":  keyRef,
				"models":  []any{model},
			},
		},
	}
	return kit.JSONFile(m)
}

// SettingsJSON is the ~/.pi/agent/settings.json Setup writes.
func (d *Driver) SettingsJSON() ([]byte, error) {
	env, err := d.keyEnv()
	if err != nil && d.o.APIKey != "" {
		return nil, err
	}
	retries := d.maxRetries()
	s := map[string]any{
		"defaultProvider":        d.provider(),
		"defaultModel":           d.defaultModel(),
		"enableInstallTelemetry": false,
		"quietStartup":           true,
		"collapseChangelog":      true,
		"retry": map[string]any{
			"enabled":     retries > 0,
			"maxRetries":  retries,
			"baseDelayMs": DefaultRetryDelay,
			// One HTTP request per pi attempt (the OpenAI SDK would
			// otherwise retry each one twice more on its own).
			"provider": map[string]any{"maxRetries": 0},
		},
	}
	if env != "" {
		// The commands the model runs do not inherit the key.
		s["shellCommandPrefix"] = "unset " + env
	}
	if d.o.Thinking != "" {
		s["defaultThinkingLevel"] = d.o.Thinking
	}
	return kit.JSONFile(s)
}

// Setup checks pi is installed and writes ~/.pi/agent/models.json (custom
// provider only) and ~/.pi/agent/settings.json.
func (d *Driver) Setup(ctx context.Context, c sandboxagent.ContainerOps) error {
	if err := d.check(); err != nil {
		return err
	}
	if err := sh.Require(ctx, c, "pi"); err != nil {
		return err
	}
	models, err := d.ModelsJSON()
	if err != nil {
		return err
	}
	if models != nil {
		if err := sh.WriteFile(ctx, c, agentDir+"/models.json", models, 0o600); err != nil {
			return err
		}
	}
	settings, err := d.SettingsJSON()
	if err != nil {
		return err
	}
	return sh.WriteFile(ctx, c, agentDir+"/settings.json", settings, 0o600)
}

// model splits the turn's model into pi's --provider and --model: a
// leading "PROVIDER/" of the driver's provider is dropped; anything else
// is the model id as the API knows it (gateway ids may contain "/").
func (d *Driver) model(t sandboxagent.Turn) (string, error) {
	m := t.Model
	if m == "" {
		m = d.defaultModel()
	}
	m = strings.TrimPrefix(m, d.provider()+"/")
	if m == "" || strings.HasPrefix(m, "-") || strings.ContainsAny(m, "\x00\n\r") {
		return "", fmt.Errorf("%w: pi: model %q", sandboxagent.ErrInvalidArgument, t.Model)
	}
	return m, nil
}

// Command is the command line of one turn (see the package doc).
func (d *Driver) Command(t sandboxagent.Turn) (sandboxagent.Invocation, error) {
	if strings.TrimSpace(t.Prompt) == "" {
		return sandboxagent.Invocation{}, fmt.Errorf("%w: empty prompt", sandboxagent.ErrInvalidArgument)
	}
	inv, err := d.invocation("json", t)
	if err != nil {
		return inv, err
	}
	inv.Stdin = []byte(t.Prompt)
	return inv, nil
}

// ServeCommand is pi's long-lived mode: `pi --mode rpc` with the same
// options as a turn's, serving t's session (a new one when it has none).
// It reads JSON commands on stdin and exits when stdin closes.
func (d *Driver) ServeCommand(t sandboxagent.Turn) (sandboxagent.Invocation, error) {
	return d.invocation("rpc", t)
}

// TurnInput is a prompt command, then get_state (whose answer names the
// session: rpc mode prints no session line).
func (d *Driver) TurnInput(t sandboxagent.Turn) ([]byte, error) {
	if strings.TrimSpace(t.Prompt) == "" {
		return nil, fmt.Errorf("%w: empty prompt", sandboxagent.ErrInvalidArgument)
	}
	prompt, err := json.Marshal(map[string]string{"id": "sandbox-agent-prompt", "type": "prompt", "message": t.Prompt})
	if err != nil {
		return nil, err
	}
	return append(append(prompt, '\n'), `{"id":"sandbox-agent-state","type":"get_state"}`+"\n"...), nil
}

// AbortInput is rpc mode's abort: the agent run ends (stopReason
// "aborted") and pi lives on.
func (d *Driver) AbortInput() []byte { return []byte(`{"type":"abort"}` + "\n") }

// invocation is pi in mode (json: one turn; rpc: long-lived) for t.
func (d *Driver) invocation(mode string, t sandboxagent.Turn) (sandboxagent.Invocation, error) {
	if err := d.check(); err != nil {
		return sandboxagent.Invocation{}, err
	}
	model, err := d.model(t)
	if err != nil {
		return sandboxagent.Invocation{}, err
	}
	cmd := []string{"pi", "--mode", mode, "--offline", "--provider", d.provider(), "--model", model}
	if d.o.Thinking != "" {
		cmd = append(cmd, "--thinking", d.o.Thinking)
	}
	if t.SessionID != "" {
		if err := ids.Check(t.SessionID); err != nil {
			return sandboxagent.Invocation{}, err
		}
		cmd = append(cmd, "--session", t.SessionID)
	}
	env := map[string]string{
		"PI_OFFLINE":            "1",
		"PI_SKIP_VERSION_CHECK": "1",
		"PI_TELEMETRY":          "0",
	}
	if d.o.APIKey != "" {
		k, _ := d.keyEnv() // checked above
		env[k] = d.o.APIKey
	}
	return sandboxagent.Invocation{Cmd: cmd, Env: env, WorkDir: t.WorkDir}, nil
}

// NewParser returns the parser of one turn's --mode json output.
func (d *Driver) NewParser(t sandboxagent.Turn) sandboxagent.Parser {
	return &parser{session: t.SessionID}
}

// WarmSteps: get_state (pi answers once its session is open and it reads
// commands), then a warm-up turn — a prompt (pi loads its provider's code
// at its first prompt: about 0.4 s) and new_session, which leaves pi on a
// fresh session with nothing of the prompt in it.
func (d *Driver) WarmSteps(sandboxagent.Turn) []sandboxagent.WarmStep {
	type answer struct {
		ID, Type string
		Success  bool
		Data     struct{ Cancelled bool }
	}
	parse := func(line []byte) (r answer) {
		_ = json.Unmarshal(line, &r)
		return r
	}
	return []sandboxagent.WarmStep{
		{
			Input: []byte(`{"id":"sandbox-agent-warm","type":"get_state"}` + "\n"),
			Done: func(line []byte) (bool, error) {
				r := parse(line)
				return r.Type == "response" && r.ID == "sandbox-agent-warm", nil
			},
		},
		{
			Turn:  true,
			Input: []byte(`{"id":"sandbox-agent-warm-prompt","type":"prompt","message":"sandbox-agent warm-up: reply DONE"}` + "\n"),
			Done: func(line []byte) (bool, error) {
				r := parse(line)
				if r.Type == "response" && r.ID == "sandbox-agent-warm-prompt" && !r.Success {
					return false, errors.New("pi refused the warm-up prompt")
				}
				return r.Type == "agent_end", nil
			},
		},
		{
			Turn: true,
			// Warm fails unless pi moved to a new session: the first
			// turn must not continue the warm-up's.
			Input: []byte(`{"id":"sandbox-agent-warm-new","type":"new_session"}` + "\n"),
			Done: func(line []byte) (bool, error) {
				r := parse(line)
				if r.Type != "response" || r.ID != "sandbox-agent-warm-new" {
					return false, nil
				}
				if !r.Success || r.Data.Cancelled {
					return false, errors.New("pi did not start a new session after the warm-up")
				}
				return true, nil
			},
		},
	}
}
