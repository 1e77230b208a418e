package opencode

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"github.com/sandbox-agent/sandbox-agent/internal/lazyre"
	"path"
	"strconv"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

const (
	// DefaultProvider names the custom provider when Options.BaseURL is set
	// and Options.Provider is empty.
	DefaultProvider = "sandbox"
	// DefaultModel is the model id used with a custom provider (BaseURL set)
	// when the turn names none. It is the id the built-in fake model
	// lists; a gateway needs a real model name (WithModel).
	DefaultModel = "fake-model"
	// KeyEnv is the environment variable the API key reaches opencode in.
	KeyEnv = "SANDBOX_AGENT_OPENCODE_API_KEY"

	// contextLimit and outputLimit are declared for models of a custom
	// provider (opencode needs them; output becomes max_tokens).
	contextLimit = 128000
	outputLimit  = 8192

	// bridgeFile is the long-lived mode's bridge to `opencode serve`,
	// relative to the config home ($XDG_CONFIG_HOME or $HOME/.config).
	bridgeFile = "sandbox-agent/opencode-serve.mjs"
	// DefaultServerMemoryMB is Options.ServerMemoryMB's default.
	DefaultServerMemoryMB = 1536
)

//go:embed assets/serve.mjs
var bridgeJS []byte

// Options configure the driver.
type Options struct {
	// BaseURL of the model API; "" = the provider's real endpoint.
	BaseURL string
	// APIKey for it. It reaches opencode only through the environment of
	// each turn (never a file) and is never logged.
	APIKey string
	// Provider is the opencode provider id, e.g. "zhipuai-coding-plan" (a
	// real provider: BaseURL "" and the key go to that provider) or, when
	// BaseURL is set, a custom OpenAI-compatible provider (npm
	// "@ai-sdk/openai-compatible") named by Provider (default "sandbox").
	Provider string
	// ServerMemoryMB: the long-lived mode's `opencode serve`, which grows
	// over long runs, is restarted after a turn (the next turn continues
	// the session on a new one) once its resident memory passes this many
	// MiB. Zero means DefaultServerMemoryMB, negative never.
	ServerMemoryMB int
	// Image overrides the image the driver asks for ("" = the built-in one
	// from versions.json).
	Image string

	// routedURL is the model proxy's URL for a built-in provider (Routed).
	routedURL string
}

// Driver runs opencode. It implements sandboxagent.Driver.
type Driver struct {
	kit.Identity
	o Options
}

var (
	_ sandboxagent.Driver    = (*Driver)(nil)
	_ sandboxagent.LongLived = (*Driver)(nil)
)

// New returns an opencode driver.
func New(o Options) *Driver {
	if o.Provider == "" && o.BaseURL != "" {
		o.Provider = DefaultProvider
	}
	// Options.Image ("" = the built-in one); everything but deltas
	// (opencode's JSON output prints only finished parts).
	return &Driver{Identity: kit.NewIdentity("opencode", o.Image, sandboxagent.Traits{Continue: true, Thinking: true, Usage: true, Abort: sandboxagent.AbortInterrupt}), o: o}
}

// Secrets returns the API key.
func (d *Driver) Secrets() []string { return kit.Secrets(d.o.APIKey) }

func (d *Driver) custom() bool { return d.o.BaseURL != "" }

// modelConfig is a model entry of a custom provider.
func modelConfig(id string) map[string]any {
	return map[string]any{
		"name": id, "tool_call": true,
		"limit": map[string]any{"context": contextLimit, "output": outputLimit},
	}
}

// Config returns the opencode.json Setup installs.
func (d *Driver) Config() ([]byte, error) {
	if d.o.Provider == "" {
		return nil, fmt.Errorf("%w: opencode: Options.Provider (or BaseURL) is required", sandboxagent.ErrInvalidArgument)
	}
	if strings.ContainsAny(d.o.Provider, "/ \t\n") {
		return nil, fmt.Errorf("%w: opencode: provider %q", sandboxagent.ErrInvalidArgument, d.o.Provider)
	}
	prov := map[string]any{
		"options": map[string]any{"apiKey": "{env:" + KeyEnv + "}"},
	}
	cfg := map[string]any{
		"$schema":    "https://opencode.ai/config.json",
		"autoupdate": false,
		"share":      "disabled",
		"snapshot":   false,
		"provider":   map[string]any{d.o.Provider: prov},
	}
	if d.o.routedURL != "" {
		prov["options"].(map[string]any)["baseURL"] = d.o.routedURL
	}
	if d.custom() {
		prov["npm"] = "@ai-sdk/openai-compatible"
		prov["name"] = d.o.Provider
		prov["options"].(map[string]any)["baseURL"] = d.o.BaseURL
		prov["models"] = map[string]any{DefaultModel: modelConfig(DefaultModel)}
		cfg["model"] = d.o.Provider + "/" + DefaultModel
		cfg["small_model"] = d.o.Provider + "/" + DefaultModel
	}
	return json.MarshalIndent(cfg, "", "  ")
}

// Setup writes $HOME/.config/opencode/opencode.json and the long-lived
// mode's bridge.
func (d *Driver) Setup(ctx context.Context, c sandboxagent.ContainerOps) error {
	cfg, err := d.Config()
	if err != nil {
		return err
	}
	dir, err := configDir(ctx, c)
	if err != nil {
		return err
	}
	if err := c.WriteFile(ctx, dir+"/opencode.json", cfg, 0o644); err != nil {
		return err
	}
	return c.WriteFile(ctx, path.Dir(dir)+"/"+bridgeFile, bridgeJS, 0o644)
}

// configDir is opencode's global config directory in the container.
func configDir(ctx context.Context, c sandboxagent.ContainerOps) (string, error) {
	res, err := c.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", `printf '%s' "${XDG_CONFIG_HOME:-$HOME/.config}"`}})
	if err != nil {
		return "", fmt.Errorf("opencode: find the config directory: %w", err)
	}
	dir := strings.TrimSpace(string(res.Stdout))
	if res.ExitCode != 0 || !path.IsAbs(dir) || dir == "/" {
		return "", fmt.Errorf("opencode: find the config directory: got %q (exit %d): %s", dir, res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
	return path.Clean(dir) + "/opencode", nil
}

// model resolves a turn's model to provider/model and, for a custom
// provider, the model id to declare.
func (d *Driver) model(m string) (full, declare string) {
	switch {
	case m == "" && d.custom():
		return d.o.Provider + "/" + DefaultModel, ""
	case m == "":
		return "", ""
	case !strings.Contains(m, "/"):
		full = d.o.Provider + "/" + m
	default:
		full = m
	}
	if d.custom() {
		if id, ok := strings.CutPrefix(full, d.o.Provider+"/"); ok && id != DefaultModel {
			declare = id
		}
	}
	return full, declare
}

// Command builds `opencode run` for one turn (see the package doc).
func (d *Driver) Command(t sandboxagent.Turn) (sandboxagent.Invocation, error) {
	if err := check(t); err != nil {
		return sandboxagent.Invocation{}, err
	}
	env, err := d.env(t)
	if err != nil {
		return sandboxagent.Invocation{}, err
	}
	cmd := []string{"opencode", "run", "--format", "json", "--thinking", "--auto"}
	if full, _ := d.model(t.Model); full != "" {
		cmd = append(cmd, "-m", full)
	}
	if t.SessionID != "" {
		cmd = append(cmd, "--session", t.SessionID)
	} else {
		// Last: --title without a value titles the session with the prompt
		// (and skips the title-generation request).
		cmd = append(cmd, "--title")
	}
	return sandboxagent.Invocation{Cmd: cmd, Env: env, WorkDir: t.WorkDir, Stdin: []byte(t.Prompt)}, nil
}

// ServeCommand is the long-lived mode: the bridge Setup installed, which
// runs `opencode serve` on the container's loopback and speaks JSON lines
// on stdin and stdout (see the package doc). It serves t's model; the
// session is named by each turn.
func (d *Driver) ServeCommand(t sandboxagent.Turn) (sandboxagent.Invocation, error) {
	if strings.HasPrefix(t.SessionID, "-") {
		return sandboxagent.Invocation{}, fmt.Errorf("%w: opencode: session id %q", sandboxagent.ErrInvalidArgument, t.SessionID)
	}
	env, err := d.env(t)
	if err != nil {
		return sandboxagent.Invocation{}, err
	}
	if mb := d.o.ServerMemoryMB; mb >= 0 {
		if mb == 0 {
			mb = DefaultServerMemoryMB
		}
		env["SANDBOX_AGENT_OPENCODE_MAX_RSS_MB"] = strconv.Itoa(mb)
	}
	return sandboxagent.Invocation{
		Cmd:     []string{"sh", "-c", `exec node "${XDG_CONFIG_HOME:-$HOME/.config}/` + bridgeFile + `"`},
		Env:     env,
		WorkDir: t.WorkDir,
	}, nil
}

// TurnInput is the bridge's prompt command for t.
func (d *Driver) TurnInput(t sandboxagent.Turn) ([]byte, error) {
	if err := check(t); err != nil {
		return nil, err
	}
	cmd := map[string]any{"type": "prompt", "sessionID": t.SessionID, "text": t.Prompt}
	if full, _ := d.model(t.Model); full != "" {
		provider, id, _ := strings.Cut(full, "/")
		cmd["model"] = map[string]string{"providerID": provider, "modelID": id}
	}
	b, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// AbortInput asks the bridge to abort the running turn (POST
// /session/ID/abort): the turn ends and the server lives on.
func (d *Driver) AbortInput() []byte { return []byte(`{"type":"abort"}` + "\n") }

// check refuses a turn opencode cannot run.
func check(t sandboxagent.Turn) error {
	if strings.TrimSpace(t.Prompt) == "" {
		return fmt.Errorf("%w: opencode: empty prompt", sandboxagent.ErrInvalidArgument)
	}
	if strings.HasPrefix(t.SessionID, "-") {
		return fmt.Errorf("%w: opencode: session id %q", sandboxagent.ErrInvalidArgument, t.SessionID)
	}
	return nil
}

// env is the environment of opencode for t: start-up traffic off, the key,
// and a model of the custom provider declared when t names one.
func (d *Driver) env(t sandboxagent.Turn) (map[string]string, error) {
	env := map[string]string{
		"OPENCODE_DISABLE_AUTOUPDATE":   "1",
		"OPENCODE_DISABLE_MODELS_FETCH": "1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
	}
	if d.o.APIKey != "" {
		env[KeyEnv] = d.o.APIKey
	}
	if _, declare := d.model(t.Model); declare != "" {
		extra, err := json.Marshal(map[string]any{"provider": map[string]any{
			d.o.Provider: map[string]any{"models": map[string]any{declare: modelConfig(declare)}},
		}})
		if err != nil {
			return nil, err
		}
		env["OPENCODE_CONFIG_CONTENT"] = string(extra)
	}
	return env, nil
}

// NewParser returns a parser of `opencode run --format json` output.
func (d *Driver) NewParser(t sandboxagent.Turn) sandboxagent.Parser {
	return &Parser{session: t.SessionID}
}

var ansiRe = lazyre.New("\x1b\\[[0-9;?]*[ -/]*[@-~]")

func stripANSI(s string) string { return ansiRe.Get().ReplaceAllString(s, "") }

// lastLine is the last non-empty line of s without ANSI colours, or def.
func lastLine(s, def string) string {
	lines := strings.Split(stripANSI(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return l
		}
	}
	return def
}

// WarmSteps: the bridge's warm command (the server up — the bridge reads
// no command before —, the next new session created, the providers
// loaded), then its warm_turn: a prompt on a throwaway session, deleted
// afterwards, so the server's lazy loading at its first prompt is done.
func (d *Driver) WarmSteps(t sandboxagent.Turn) []sandboxagent.WarmStep {
	done := func(want string) func([]byte) (bool, error) { return kit.BridgeDone("opencode", want) }
	// The warm-up prompt on the turn's model: the same provider's code.
	turn := []byte(`{"type":"warm_turn"}` + "\n")
	if full, _ := d.model(t.Model); full != "" {
		provider, id, _ := strings.Cut(full, "/")
		if b, err := json.Marshal(map[string]any{"type": "warm_turn", "model": map[string]string{"providerID": provider, "modelID": id}}); err == nil {
			turn = append(b, '\n')
		}
	}
	return []sandboxagent.WarmStep{
		{Input: []byte(`{"type":"warm"}` + "\n"), Done: done("warm_done")},
		{Turn: true, Input: turn, Done: done("warm_turn_done")},
	}
}
