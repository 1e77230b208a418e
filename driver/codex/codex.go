package codex

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
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

// ErrSessionNotFound: the container holds no rollout for the session id.
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
	o Options
}

var _ sandboxagent.Driver = (*Driver)(nil)

// New returns a codex driver.
func New(o Options) *Driver { return &Driver{o: o} }

// Name implements sandboxagent.Driver.
func (d *Driver) Name() string { return "codex" }

// Image implements sandboxagent.Driver.
func (d *Driver) Image() string { return d.o.Image }

// Capabilities implements sandboxagent.Driver. Codex prints whole messages
// only, so Deltas is false.
func (d *Driver) Capabilities() sandboxagent.Capabilities {
	return sandboxagent.Capabilities{
		Continue: true, Fork: true, Skills: true, Rules: true, Sessions: true,
		Thinking: true, Usage: true, Deltas: false,
	}
}

// Secrets implements sandboxagent.Driver.
func (d *Driver) Secrets() []string {
	if d.o.APIKey == "" {
		return nil
	}
	return []string{d.o.APIKey}
}

func (d *Driver) baseURL() string {
	if d.o.BaseURL == "" {
		return DefaultBaseURL
	}
	return strings.TrimRight(d.o.BaseURL, "/")
}

func (d *Driver) retries() int {
	switch {
	case d.o.Retries == 0:
		return DefaultRetries
	case d.o.Retries < 0:
		return 0
	}
	return d.o.Retries
}

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

// homeSh sets H to codex's home in the helper scripts.
const homeSh = `H="${CODEX_HOME:-$HOME/.codex}"; `

// Setup implements sandboxagent.Driver: it checks codex is installed and
// writes $CODEX_HOME/config.toml.
func (d *Driver) Setup(ctx context.Context, c sandboxagent.ContainerOps) error {
	script := `set -e; command -v codex >/dev/null 2>&1 || exit 127; ` + homeSh +
		`mkdir -p "$H"; cat > "$H/config.toml.tmp"; mv -f "$H/config.toml.tmp" "$H/config.toml"`
	res, err := d.run(ctx, c, script, []byte(d.Config()))
	if err != nil {
		return err
	}
	switch res.ExitCode {
	case 0:
		return nil
	case 127:
		return fmt.Errorf("codex: %w", sandboxagent.ErrCLIMissing)
	}
	return fmt.Errorf("codex: write config.toml: %s", oneLine(string(res.Stderr)))
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func checkID(id string) error {
	if !uuidRE.MatchString(id) {
		return fmt.Errorf("%w: codex session id %q is not a UUID", sandboxagent.ErrInvalidArgument, id)
	}
	return nil
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
		if err := checkID(t.SessionID); err != nil {
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

// NewParser implements sandboxagent.Driver.
func (d *Driver) NewParser(t sandboxagent.Turn) sandboxagent.Parser {
	return newParser(t)
}

// run runs a shell script in the container with codex's environment
// (without the key) and stdin.
func (d *Driver) run(ctx context.Context, c sandboxagent.ContainerOps, script string, stdin []byte, args ...string) (sandboxagent.ExecResult, error) {
	req := sandboxagent.ExecRequest{Cmd: append([]string{"sh", "-c", script, "sh"}, args...), Env: d.env(false)}
	if stdin != nil {
		req.Stdin = bytes.NewReader(stdin)
	}
	res, err := c.Run(ctx, req)
	if err != nil {
		return res, fmt.Errorf("codex: %w", err)
	}
	return res, nil
}

// oneLine folds s into one trimmed line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// statusRE finds an HTTP status in codex's error messages:
// "unexpected status 401 Unauthorized", "last status: 429 Too Many Requests".
var statusRE = regexp.MustCompile(`\bstatus:? ([1-5][0-9][0-9])\b`)

func httpStatus(msg string) int {
	m := statusRE.FindStringSubmatch(msg)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
