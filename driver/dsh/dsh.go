package dsh

import (
	"context"
	_ "embed"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

// DefaultModel is the model used when neither the agent nor Options name
// one: dsh's own default DeepSeek model. A gateway or the fake model takes
// it as the wire "model".
const DefaultModel = "deepseek-v4-flash"

// Provider is the name of the generic OpenAI-compatible route Setup writes
// into settings.yaml (llm-pi-ai.providers); DeepSeekProvider is dsh's
// native DeepSeek adapter.
const (
	Provider         = "sandbox-agent"
	DeepSeekProvider = "deepseek-official"
)

// Environment variables of a turn.
const (
	// envKey names the credential of the generic route (apiKeyEnv).
	envKey = "SANDBOX_AGENT_DSH_API_KEY"
	// The DeepSeek adapter's own variables.
	envDeepSeekKey  = "DEEPSEEK_API_KEY"
	envDeepSeekBase = "DEEPSEEK_BASE_URL"
	// Read by runner.mjs and run.mjs.
	envSession  = "SANDBOX_AGENT_DSH_SESSION"
	envResume   = "SANDBOX_AGENT_DSH_RESUME"
	envModel    = "SANDBOX_AGENT_DSH_MODEL"
	envProvider = "SANDBOX_AGENT_DSH_PROVIDER"
)

// Files Setup installs, relative to $DSH_HOME.
const (
	settingsFile  = "settings.yaml"
	homePatchFile = "cordis.patch.yml"
	helperDir     = "sandbox-agent"
	runnerFile    = helperDir + "/runner.mjs"
	wrapperFile   = helperDir + "/run.mjs"
	rulesFile     = "AGENTS.md"
	skillsDir     = "skills"
	sessionsDir   = "sessions"
)

// homeExpr is $DSH_HOME as dsh computes it, for sh scripts.
const homeExpr = `${DSH_HOME:-$HOME/.dsh}`

//go:embed assets/runner.mjs
var runnerJS []byte

//go:embed assets/run.mjs
var wrapperJS []byte

// Options configure the driver.
type Options struct {
	// BaseURL of the model API; "" is DeepSeek's own endpoint (through the
	// DeepSeek adapter). For the generic route it is the OpenAI-compatible
	// base that /chat/completions is appended to, e.g.
	// "http://127.0.0.1:8080/v1".
	BaseURL string
	// APIKey for it. It reaches dsh only through the turn's environment,
	// never a file, and is redacted from logs.
	APIKey string
	// DeepSeek uses dsh's native DeepSeek adapter (provider
	// "deepseek-official": DEEPSEEK_BASE_URL, DEEPSEEK_API_KEY, thinking
	// and reasoning effort) instead of the generic OpenAI-compatible route.
	// It is implied when BaseURL is "".
	DeepSeek bool
	// Model is the default model when the agent sets none (default
	// DefaultModel).
	Model string
	// ContextWindow and MaxTokens describe the generic route's model to
	// dsh (defaults 128000 and 8192).
	ContextWindow int
	MaxTokens     int
	// Image overrides the image the driver asks for ("" = the built-in one
	// from versions.json).
	Image string
}

// Driver drives DeepSeek Harness (dsh). It holds no per-sandbox state, so
// one Driver may serve several agents.
type Driver struct {
	kit.Identity
	kit.Instructions
	o Options
}

var _ sandboxagent.Driver = (*Driver)(nil)

// New returns a driver.
// It runs in Options.Image ("" = the built-in dsh image); its traits are everything (deltas:
// the session log carries the model's text and reasoning fragments as
// they stream). Rules are the user-global $DSH_HOME/AGENTS.md, skills
// $DSH_HOME/skills/<name>/.
func New(o Options) *Driver {
	return &Driver{
		Identity:     kit.NewIdentity("dsh", o.Image, sandboxagent.Traits{Continue: true, Thinking: true, Usage: true, Deltas: true, Abort: sandboxagent.AbortKill}),
		Instructions: instructions(),
		o:            o,
	}
}

// Secrets returns the API key.
func (d *Driver) Secrets() []string { return kit.Secrets(d.o.APIKey) }

func (d *Driver) deepSeek() bool { return d.o.DeepSeek || d.o.BaseURL == "" }

func (d *Driver) provider() string {
	if d.deepSeek() {
		return DeepSeekProvider
	}
	return Provider
}

func (d *Driver) model() string {
	if d.o.Model != "" {
		return d.o.Model
	}
	return DefaultModel
}

// settings is $DSH_HOME/settings.yaml. It is written as JSON (which YAML
// reads as is) so that run.mjs can add a turn's model to the generic
// route's model list, which dsh insists on.
func (d *Driver) settings() ([]byte, error) {
	s := map[string]any{}
	if d.deepSeek() {
		if d.o.BaseURL != "" {
			// The adapter appends /chat/completions to it.
			s["llm-deepseek"] = map[string]any{"baseURL": d.o.BaseURL}
		}
	} else {
		if u, err := url.Parse(d.o.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%w: dsh base URL %q", sandboxagent.ErrInvalidArgument, d.o.BaseURL)
		}
		cw, mt := d.o.ContextWindow, d.o.MaxTokens
		if cw <= 0 {
			cw = 128000
		}
		if mt <= 0 {
			mt = 8192
		}
		s["llm-pi-ai"] = map[string]any{"providers": map[string]any{Provider: map[string]any{
			"displayName": "sandbox-agent",
			"apiKeyEnv":   envKey,
			"api":         "openai-completions",
			"baseURL":     d.o.BaseURL,
			"compat":      map[string]any{"supportsDeveloperRole": false, "maxTokensField": "max_tokens"},
			"models":      []any{map[string]any{"id": d.model(), "name": d.model(), "contextWindow": cw, "maxTokens": mt}},
		}}}
	}
	s["agent-default-model"] = map[string]any{"provider": d.provider(), "model": d.model()}
	return kit.JSONFile(s)
}

// homePatch is $DSH_HOME/cordis.patch.yml, the patch layer of every
// profile: session logs as plain JSONL, one event a line, flushed within
// 20 ms (so the wrapper can tail them), and the headless runner replaced by
// runner.mjs (continue, per-turn model, task on stdin).
const homePatch = `# Written by sandbox-agent (driver dsh).
- id: session-persistence-jsonl
  config:
    root: !!js dshHomePath('sessions')
    compression: none
    packChunks: false
    writeBatchMaxDelayMs: 20
`

// headlessPatch is the profile patch (passed with --patch) that replaces
// the headless runner by runner.mjs, in the $DSH_HOME named home. (A row
// patch cannot change a plugin's name: dsh skips it with "name mismatch".)
func headlessPatch(home string) string {
	return `# Written by sandbox-agent (driver dsh).
- id: headless-runner
  disabled: true
- insert:
    - id: sandbox-agent-runner
      name: ` + strconv.Quote("file://"+home+"/"+runnerFile) + `
      inject: [headlessStartup]
      config:
        task: !!js ctx.headlessStartup.task
`
}

// Setup writes settings.yaml, the patch layers and the two helper scripts
// into $DSH_HOME.
func (d *Driver) Setup(ctx context.Context, c sandboxagent.ContainerOps) error {
	s, err := d.settings()
	if err != nil {
		return err
	}
	home, err := dshHomeDir(ctx, c)
	if err != nil {
		return err
	}
	files := []struct {
		rel  string
		data []byte
	}{
		{settingsFile, s},
		{homePatchFile, []byte(homePatch)},
		{helperDir + "/headless.patch.yml", []byte(headlessPatch(home))},
		{runnerFile, runnerJS},
		{wrapperFile, wrapperJS},
	}
	for _, f := range files {
		if err := sh.WriteFile(ctx, c, f.rel, f.data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// Command is the command line of one turn: node run.mjs, the prompt on
// stdin (see the package doc).
func (d *Driver) Command(t sandboxagent.Turn) (sandboxagent.Invocation, error) {
	if strings.TrimSpace(t.Prompt) == "" {
		return sandboxagent.Invocation{}, fmt.Errorf("%w: empty prompt", sandboxagent.ErrInvalidArgument)
	}
	env := map[string]string{
		"DSH_PERMISSION_MODE":    "danger-full-access",
		"DSH_TELEMETRY_DISABLED": "1",
		"NO_COLOR":               "1",
		envProvider:              d.provider(),
	}
	if t.Model != "" {
		env[envModel] = t.Model
	}
	if t.SessionID != "" {
		if err := ids.Check(t.SessionID); err != nil {
			return sandboxagent.Invocation{}, err
		}
		env[envSession] = t.SessionID
		env[envResume] = "1"
	} else {
		id, err := newID()
		if err != nil {
			return sandboxagent.Invocation{}, err
		}
		env[envSession] = id
	}
	if d.deepSeek() {
		if d.o.BaseURL != "" {
			env[envDeepSeekBase] = d.o.BaseURL
		}
		if d.o.APIKey != "" {
			env[envDeepSeekKey] = d.o.APIKey
		}
	} else if d.o.APIKey != "" {
		env[envKey] = d.o.APIKey
	}
	return sandboxagent.Invocation{
		Cmd:     []string{"sh", "-c", `exec node "` + homeExpr + `/` + wrapperFile + `"`},
		Env:     env,
		WorkDir: t.WorkDir,
		Stdin:   []byte(t.Prompt),
	}, nil
}

// validID reports whether id is a dsh session id as the driver makes them:
// "session-" and a lower-case UUID. Only such ids reach paths and command
// lines.
func validID(id string) bool {
	u, ok := strings.CutPrefix(id, "session-")
	return ok && kit.IsUUID(u) && u == strings.ToLower(u)
}

// newID is a fresh session id, "session-" and a random (version 4) UUID,
// the form dsh uses.
func newID() (string, error) {
	u, err := kit.NewUUID()
	return "session-" + u, err
}
