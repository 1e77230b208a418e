package codex

import (
	"context"
	"errors"
	"fmt"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

// DefaultModel is the model used when neither the turn nor Options name
// one: a model in codex's bundled catalogue (so codex knows its metadata
// and offers its full tool set); gateways and the fake model accept it.
const DefaultModel = "gpt-5.5"

// DefaultBaseURL is the provider's real endpoint, used when
// Options.BaseURL is empty.
const DefaultBaseURL = "https://api.openai.com/v1"

// DefaultRetries bounds codex's request and stream retries.
const DefaultRetries = 2

// KeyEnv is the environment variable that carries the API key to codex
// (the provider's env_key).
const KeyEnv = "SANDBOX_AGENT_CODEX_API_KEY"

// providerID is the custom model provider written into config.toml.
const providerID = "sandbox-agent"

// maxArgPrompt is the longest prompt passed as an argument; longer ones go
// on stdin (Linux limits one argv string to 128 KiB).
const maxArgPrompt = 64 << 10

// ErrSessionNotFound: the container holds no rollout for the session id
// (it wraps sandboxagent.ErrPathNotFound too, as every driver's missing
// session does).
var ErrSessionNotFound = errors.New("codex session not found")

// Options configure the codex driver.
type Options struct {
	// BaseURL of the model API (OpenAI Responses API; codex POSTs to
	// {BaseURL}/responses); "" = DefaultBaseURL.
	BaseURL string
	// APIKey for it. It only travels in the environment of codex's process
	// (KeyEnv), never in a file, and is hidden from the commands the model
	// runs.
	APIKey string
	// Model is the default model when a turn names none; "" = DefaultModel.
	Model string
	// Retries bounds codex's retries of a failed request or stream
	// (request_max_retries, stream_max_retries); 0 = DefaultRetries, a
	// negative value = no retry.
	Retries int
	// CodexHome, when set, is the CODEX_HOME given to codex (it must not be
	// under /tmp: codex then refuses to create its helper links); "" =
	// ~/.codex.
	CodexHome string
	// ExtraConfig is TOML inserted into config.toml after the driver's
	// top-level keys (e.g. `model_reasoning_effort = "low"`). It must not
	// redefine the driver's keys or tables.
	ExtraConfig string
	// Image overrides the image the driver asks for ("" = the built-in one
	// from versions.json).
	Image string
}

// Driver is the codex driver. It implements sandboxagent.Driver.
type Driver struct {
	kit.Identity
	kit.Instructions
	o Options
}

var _ sandboxagent.Driver = (*Driver)(nil)

// New returns a codex driver.
// It runs in Options.Image ("" = the built-in one); codex prints whole
// messages only, so its traits lack Deltas. Rules become
// $CODEX_HOME/AGENTS.md, codex's global instructions; skills
// $CODEX_HOME/skills/<name>/, a file that starts with "#!" made
// executable.
func New(o Options) *Driver {
	d := &Driver{
		Identity: kit.NewIdentity("codex", o.Image, sandboxagent.Traits{Continue: true, Thinking: true, Usage: true, Abort: sandboxagent.AbortInterrupt}),
		o:        o,
	}
	d.Instructions = d.instructions()
	return d
}

// Secrets implements sandboxagent.Driver.
func (d *Driver) Secrets() []string { return kit.Secrets(d.o.APIKey) }

func (d *Driver) baseURL() string {
	if d.o.BaseURL == "" {
		return DefaultBaseURL
	}
	return strings.TrimRight(d.o.BaseURL, "/")
}

func (d *Driver) retries() int { return kit.Retries(d.o.Retries, DefaultRetries) }

func (d *Driver) model(t sandboxagent.Turn) string {
	switch {
	case t.Model != "":
		return t.Model
	case d.o.Model != "":
		return d.o.Model
	}
	return DefaultModel
}

// env is the environment of every codex process and helper command.
func (d *Driver) env(withKey bool) map[string]string {
	env := map[string]string{}
	if withKey {
		env[KeyEnv] = d.o.APIKey
	}
	if d.o.CodexHome != "" {
		env["CODEX_HOME"] = d.o.CodexHome
	}
	return env
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Config is the config.toml Setup installs.
func (d *Driver) Config() string {
	var b strings.Builder
	b.WriteString("# Written by sandbox-agent (driver codex). The API key is not here: codex\n")
	b.WriteString("# reads it from $" + KeyEnv + ".\n")
	fmt.Fprintf(&b, "model = %s\n", tomlString(d.model(sandboxagent.Turn{})))
	fmt.Fprintf(&b, "model_provider = %s\n", tomlString(providerID))
	b.WriteString("approval_policy = \"never\"\n")
	b.WriteString("sandbox_mode = \"danger-full-access\"\n")
	b.WriteString("check_for_update_on_startup = false\n")
	if x := strings.TrimSpace(d.o.ExtraConfig); x != "" {
		b.WriteString("\n" + x + "\n")
	}
	b.WriteString("\n[analytics]\nenabled = false\n")
	b.WriteString("\n[features]\nplugins = false\n")
	b.WriteString("\n[shell_environment_policy]\n")
	fmt.Fprintf(&b, "exclude = [%s]\n", tomlString(KeyEnv))
	fmt.Fprintf(&b, "\n[model_providers.%s]\n", providerID)
	fmt.Fprintf(&b, "name = %s\n", tomlString(providerID))
	fmt.Fprintf(&b, "base_url = %s\n", tomlString(d.baseURL()))
	fmt.Fprintf(&b, "env_key = %s\n", tomlString(KeyEnv))
	b.WriteString("wire_api = \"responses\"\n")
	fmt.Fprintf(&b, "request_max_retries = %d\n", d.retries())
	fmt.Fprintf(&b, "stream_max_retries = %d\n", d.retries())
	return b.String()
}

// sh runs the helper scripts with codex's environment (without the key);
// $H is codex's home, $CODEX_HOME or ~/.codex.
func (d *Driver) sh() kit.Shell {
	return kit.Shell{Driver: "codex", Dir: `${CODEX_HOME:-$HOME/.codex}`, Env: d.env(false)}
}

// ids: codex's thread ids are UUIDs.
var ids = kit.SessionIDs{Driver: "codex", Form: "a UUID", Valid: kit.IsUUID}

// Setup implements sandboxagent.Driver: it checks codex is installed and
// writes $CODEX_HOME/config.toml and the long-lived mode's bridge.
func (d *Driver) Setup(ctx context.Context, c sandboxagent.ContainerOps) error {
	if err := d.sh().Require(ctx, c, "codex"); err != nil {
		return err
	}
	if err := d.sh().WriteFile(ctx, c, "config.toml", []byte(d.Config()), 0o644); err != nil {
		return err
	}
	return d.sh().WriteFile(ctx, c, bridgeFile, bridgeJS, 0o644)
}

// execFlags are the flags of every headless codex exec (new, resume, fork).
func execFlags() []string {
	return []string{
		"--json",                // JSONL events on stdout
		"--skip-git-repo-check", // the workdir need not be a git repo
		"--dangerously-bypass-approvals-and-sandbox", // no prompts; bwrap cannot run in a container
	}
}

// Command implements sandboxagent.Driver.
func (d *Driver) Command(t sandboxagent.Turn) (sandboxagent.Invocation, error) {
	if strings.TrimSpace(t.Prompt) == "" {
		return sandboxagent.Invocation{}, fmt.Errorf("%w: empty prompt", sandboxagent.ErrInvalidArgument)
	}
	cmd := []string{"codex", "exec"}
	if t.SessionID != "" {
		if err := ids.Check(t.SessionID); err != nil {
			return sandboxagent.Invocation{}, err
		}
		cmd = append(cmd, "resume")
	}
	cmd = append(cmd, execFlags()...)
	cmd = append(cmd, "-m", d.model(t), "--")
	if t.SessionID != "" {
		cmd = append(cmd, t.SessionID)
	}
	inv := sandboxagent.Invocation{Env: d.env(true), WorkDir: t.WorkDir}
	if t.Prompt == "-" || len(t.Prompt) > maxArgPrompt {
		cmd = append(cmd, "-")
		inv.Stdin = []byte(t.Prompt)
	} else {
		cmd = append(cmd, t.Prompt)
	}
	inv.Cmd = cmd
	return inv, nil
}

// NewParser implements sandboxagent.Driver: the parser of the turn's
// mode, which takes that mode's vocabulary only (app-server's on the
// long-lived process, `codex exec --json`'s per turn).
func (d *Driver) NewParser(t sandboxagent.Turn) sandboxagent.Parser {
	if t.LongLived {
		return newServeParser(t)
	}
	return newExecParser(t)
}
