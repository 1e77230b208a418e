// Package opencode drives the opencode CLI (npm opencode-ai, tested with
// 1.18.33) inside a sandbox.
//
// # Configuration (Setup)
//
// Setup writes $HOME/.config/opencode/opencode.json (the directory where the
// image pre-installed @opencode-ai/plugin, so opencode does not npm-install
// it at start):
//
//   - with Options.BaseURL set: a custom provider named Options.Provider
//     (default "sandbox") using the bundled "@ai-sdk/openai-compatible"
//     package, options.baseURL = BaseURL, and the model DefaultModel
//     declared; "model" and "small_model" point at it;
//   - with BaseURL empty: Options.Provider is one of opencode's own providers
//     (e.g. "zhipuai-coding-plan") and only its key is configured.
//
// The key is never written into the file: options.apiKey is
// "{env:SANDBOX_AGENT_OPENCODE_API_KEY}" and each turn's Invocation carries
// that variable. Startup network traffic is off: "autoupdate": false,
// "share": "disabled", OPENCODE_DISABLE_AUTOUPDATE, OPENCODE_DISABLE_MODELS_FETCH
// (no models.dev download: the catalogue compiled into the binary is used)
// and OPENCODE_DISABLE_LSP_DOWNLOAD; "snapshot": false stops opencode keeping
// a git snapshot of the workspace after every step. The background
// `npm install @opencode-ai/plugin` opencode starts for its config dir is
// avoided by the image (the package is pre-installed there).
//
// # One turn (Command)
//
//	opencode run --format json --thinking --auto [-m PROVIDER/MODEL] [--session ID | --title]
//
// with the prompt on stdin (opencode wraps every argv word holding a space in
// double quotes, so stdin is the only way to pass a prompt verbatim; stdin
// is closed after it, as opencode reads it to EOF). --format json prints one
// JSON event per finished part (no deltas); --thinking adds reasoning parts;
// --auto approves any permission rule that says "ask" (the run keeps its own
// denials of the interactive question/plan tools) so no turn waits for a
// human; --title without a value titles a new session with its prompt,
// which saves the extra title-generation request. A model given without a
// provider prefix is taken as a model of Options.Provider; with a custom
// provider, Turn.Model "" means DefaultModel and any other model is declared
// for the turn through OPENCODE_CONFIG_CONTENT (merged over the file).
// A rejected key (HTTP 401) is not retried by opencode (one request, then
// one "error" line with statusCode 401 and exit 1), so it fails as fast as
// opencode starts. Other API errors (5xx, 429) are retried silently by
// opencode with backoff (about 70 s in all, per the reference notes;
// not re-measured) before the same "error" line.
//
// Cost: every opencode start loads a ~180 MB Bun binary and its bundle,
// about 10 CPU-seconds per turn (and 2 for `opencode --version`); on a
// loaded machine a turn takes tens of seconds, so give timeout_ask room.
//
// # Sessions
//
// opencode keeps sessions in SQLite at ~/.local/share/opencode/opencode.db,
// keyed by the directory they were started in, so a session continues only
// from the same working directory.
//
//   - Continue: --session ID (the whole history is re-sent).
//   - Fork: `opencode run --fork` only forks as part of a turn, so Fork starts
//     `opencode serve` on a loopback port (4096, or a random one if taken) with a random one-off
//     password (OPENCODE_SERVER_PASSWORD), calls POST /session/ID/fork (the
//     same operation the TUI uses: a new session holding copies of every
//     message, titled "<title> (fork #1)") and stops the server.
//   - Rules: $HOME/.config/opencode/AGENTS.md (global instructions, put into
//     the system prompt of every session).
//   - Skills: $HOME/.config/opencode/skills/NAME/ (SKILL.md with name and
//     description front matter; listed in the system prompt, loaded by the
//     skill tool).
//   - List: `opencode session list --format json` (sessions of the sandbox's
//     working directory); Delete: `opencode session delete ID`.
//   - Dump: `opencode export ID` (JSON {info, messages}) as file
//     "export.json"; Load: `opencode import FILE` in the other container,
//     which keeps the session id. The session's directory is recorded in the
//     export; continue it from the same working directory.
package opencode

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
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
)

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
}

// Driver runs opencode. It implements sandboxagent.Driver.
type Driver struct {
	o Options
}

var _ sandboxagent.Driver = (*Driver)(nil)

// New returns an opencode driver.
func New(o Options) *Driver {
	if o.Provider == "" && o.BaseURL != "" {
		o.Provider = DefaultProvider
	}
	return &Driver{o: o}
}

// Name is "opencode".
func (d *Driver) Name() string { return "opencode" }

// Image is "": the tag from versions.json.
func (d *Driver) Image() string { return "" }

// Capabilities: everything but deltas (opencode's JSON output prints only
// finished parts).
func (d *Driver) Capabilities() sandboxagent.Capabilities {
	return sandboxagent.Capabilities{
		Continue: true, Fork: true, Skills: true, Rules: true, Sessions: true,
		Thinking: true, Usage: true, Deltas: false,
	}
}

// Secrets returns the API key.
func (d *Driver) Secrets() []string {
	if d.o.APIKey == "" {
		return nil
	}
	return []string{d.o.APIKey}
}

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

// Setup writes $HOME/.config/opencode/opencode.json.
func (d *Driver) Setup(ctx context.Context, c sandboxagent.ContainerOps) error {
	cfg, err := d.Config()
	if err != nil {
		return err
	}
	dir, err := configDir(ctx, c)
	if err != nil {
		return err
	}
	return c.WriteFile(ctx, dir+"/opencode.json", cfg, 0o644)
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
	if strings.TrimSpace(t.Prompt) == "" {
		return sandboxagent.Invocation{}, fmt.Errorf("%w: opencode: empty prompt", sandboxagent.ErrInvalidArgument)
	}
	if strings.HasPrefix(t.SessionID, "-") {
		return sandboxagent.Invocation{}, fmt.Errorf("%w: opencode: session id %q", sandboxagent.ErrInvalidArgument, t.SessionID)
	}
	cmd := []string{"opencode", "run", "--format", "json", "--thinking", "--auto"}
	env := map[string]string{
		"OPENCODE_DISABLE_AUTOUPDATE":   "1",
		"OPENCODE_DISABLE_MODELS_FETCH": "1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
	}
	if d.o.APIKey != "" {
		env[KeyEnv] = d.o.APIKey
	}
	full, declare := d.model(t.Model)
	if full != "" {
		cmd = append(cmd, "-m", full)
	}
	if declare != "" {
		extra, err := json.Marshal(map[string]any{"provider": map[string]any{
			d.o.Provider: map[string]any{"models": map[string]any{declare: modelConfig(declare)}},
		}})
		if err != nil {
			return sandboxagent.Invocation{}, err
		}
		env["OPENCODE_CONFIG_CONTENT"] = string(extra)
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

// NewParser returns a parser of `opencode run --format json` output.
func (d *Driver) NewParser(t sandboxagent.Turn) sandboxagent.Parser {
	return &Parser{session: t.SessionID}
}

// ---- session members ----

// run runs argv in the container and fails on a non-zero exit.
func run(ctx context.Context, c sandboxagent.ContainerOps, req sandboxagent.ExecRequest) (sandboxagent.ExecResult, error) {
	res, err := c.Run(ctx, req)
	if err != nil {
		return res, fmt.Errorf("opencode: %s: %w", strings.Join(req.Cmd[:min(len(req.Cmd), 3)], " "), err)
	}
	if res.TimedOut {
		return res, fmt.Errorf("opencode: %s: %w", strings.Join(req.Cmd[:min(len(req.Cmd), 3)], " "), sandboxagent.ErrTimeout)
	}
	if res.ExitCode != 0 {
		return res, &sandboxagent.DriverError{
			Driver: "opencode", Message: lastLine(string(res.Stderr), fmt.Sprintf("%s failed", strings.Join(req.Cmd[:min(len(req.Cmd), 3)], " "))),
			ExitCode: res.ExitCode, Stderr: strings.TrimSpace(stripANSI(string(res.Stderr))),
		}
	}
	return res, nil
}

var sessionIDRe = regexp.MustCompile(`^ses_[A-Za-z0-9]+$`)

func checkID(id string) error {
	if !sessionIDRe.MatchString(id) {
		return fmt.Errorf("%w: opencode session id %q", sandboxagent.ErrInvalidArgument, id)
	}
	return nil
}

func quietEnv() map[string]string {
	return map[string]string{"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1"}
}

// forkScript starts `opencode serve` on a loopback port, forks session $1
// through its HTTP API, prints the new session as JSON and stops the
// server. OPENCODE_SERVER_PASSWORD comes from the environment.
const forkScript = `set -u
log=$(mktemp); out=$(mktemp)
opencode serve --hostname 127.0.0.1 --port 0 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log" "$out"' EXIT
url=
i=0
while [ $i -lt 1800 ]; do
  url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$log" | head -n 1)
  [ -n "$url" ] && break
  kill -0 $pid 2>/dev/null || { cat "$log" >&2; exit 3; }
  sleep 0.1; i=$((i+1))
done
[ -n "$url" ] || { echo "opencode serve did not start" >&2; cat "$log" >&2; exit 3; }
code=$(curl -sS -o "$out" -w '%{http_code}' -u "opencode:$OPENCODE_SERVER_PASSWORD" -X POST \
  -H 'content-type: application/json' -d '{}' "$url/session/$1/fork") || { echo "fork request failed" >&2; exit 4; }
if [ "$code" != 200 ]; then echo "fork: HTTP $code: $(head -c 2000 "$out")" >&2; exit 5; fi
cat "$out"
`

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Fork copies a session into a new one through opencode's server API.
func (d *Driver) Fork(ctx context.Context, c sandboxagent.ContainerOps, sessionID string) (string, error) {
	if err := checkID(sessionID); err != nil {
		return "", err
	}
	env := quietEnv()
	env["OPENCODE_SERVER_PASSWORD"] = randHex(16)
	// --port 0: opencode takes 4096, or a random free port when 4096 is
	// taken (several host-network sandboxes share the loopback).
	res, err := run(ctx, c, sandboxagent.ExecRequest{
		Cmd: []string{"sh", "-c", forkScript, "opencode-fork", sessionID},
		Env: env,
	})
	if err != nil {
		return "", fmt.Errorf("opencode: fork %s: %w", sessionID, err)
	}
	var info struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(res.Stdout, &info); err != nil || checkID(info.ID) != nil {
		return "", fmt.Errorf("opencode: fork %s: unexpected answer %q", sessionID, truncate(string(res.Stdout), 300))
	}
	return info.ID, nil
}

// InstallRules writes the global AGENTS.md.
func (d *Driver) InstallRules(ctx context.Context, c sandboxagent.ContainerOps, rules string) error {
	dir, err := configDir(ctx, c)
	if err != nil {
		return err
	}
	return c.WriteFile(ctx, dir+"/AGENTS.md", []byte(rules), 0o644)
}

// InstallSkill writes a skill under the global skills directory,
// replacing one of the same name.
func (d *Driver) InstallSkill(ctx context.Context, c sandboxagent.ContainerOps, s sandboxagent.Skill) error {
	if err := s.Validate(); err != nil {
		return err
	}
	dir, err := configDir(ctx, c)
	if err != nil {
		return err
	}
	sdir := dir + "/skills/" + s.Name
	if _, err := run(ctx, c, sandboxagent.ExecRequest{Cmd: []string{"rm", "-rf", "--", sdir}}); err != nil {
		return err
	}
	names := make([]string, 0, len(s.Files))
	for n := range s.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := c.WriteFile(ctx, sdir+"/"+n, s.Files[n], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// ListSessions lists the sessions of the sandbox's working directory,
// newest first.
func (d *Driver) ListSessions(ctx context.Context, c sandboxagent.ContainerOps) ([]sandboxagent.SessionInfo, error) {
	res, err := run(ctx, c, sandboxagent.ExecRequest{Cmd: []string{"opencode", "session", "list", "--format", "json"}, Env: quietEnv()})
	if err != nil {
		return nil, err
	}
	return parseSessionList(res.Stdout)
}

func parseSessionList(out []byte) ([]sandboxagent.SessionInfo, error) {
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return []sandboxagent.SessionInfo{}, nil
	}
	var list []struct {
		ID        string `json:"id"`
		Title     string `json:"title"`
		Updated   int64  `json:"updated"`
		Directory string `json:"directory"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, fmt.Errorf("opencode: session list: %w: %q", err, truncate(string(out), 300))
	}
	infos := make([]sandboxagent.SessionInfo, 0, len(list))
	for _, s := range list {
		info := sandboxagent.SessionInfo{ID: s.ID, Title: strings.TrimSpace(s.Title)}
		if s.Updated > 0 {
			info.Updated = time.UnixMilli(s.Updated).UTC().Format(time.RFC3339)
		}
		infos = append(infos, info)
	}
	return infos, nil
}

// DeleteSession deletes a session (and its messages).
func (d *Driver) DeleteSession(ctx context.Context, c sandboxagent.ContainerOps, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	_, err := run(ctx, c, sandboxagent.ExecRequest{Cmd: []string{"opencode", "session", "delete", id}, Env: quietEnv()})
	return err
}

// dumpFile is the SessionDump file holding `opencode export` output.
const dumpFile = "export.json"

// DumpSession exports a session (`opencode export`).
func (d *Driver) DumpSession(ctx context.Context, c sandboxagent.ContainerOps, id string) (sandboxagent.SessionDump, error) {
	if err := checkID(id); err != nil {
		return sandboxagent.SessionDump{}, err
	}
	res, err := run(ctx, c, sandboxagent.ExecRequest{Cmd: []string{"opencode", "export", id}, Env: quietEnv(), MaxOutputBytes: 256 << 20})
	if err != nil {
		return sandboxagent.SessionDump{}, err
	}
	if res.Truncated {
		return sandboxagent.SessionDump{}, fmt.Errorf("opencode: export %s: %w: output too large", id, sandboxagent.ErrLimitExceeded)
	}
	var exp struct {
		Info struct {
			ID        string `json:"id"`
			Directory string `json:"directory"`
			Title     string `json:"title"`
		} `json:"info"`
	}
	if err := json.Unmarshal(res.Stdout, &exp); err != nil || exp.Info.ID != id {
		return sandboxagent.SessionDump{}, fmt.Errorf("opencode: export %s: unexpected output %q", id, truncate(string(res.Stdout), 300))
	}
	return sandboxagent.SessionDump{
		Driver: d.Name(), SessionID: id,
		Files: map[string][]byte{dumpFile: res.Stdout},
		Meta:  map[string]string{"format": "opencode export", "directory": exp.Info.Directory, "title": exp.Info.Title},
	}, nil
}

var importedRe = regexp.MustCompile(`Imported session: (ses_[A-Za-z0-9]+)`)

// LoadSession imports a dumped session (`opencode import`); the id is kept.
func (d *Driver) LoadSession(ctx context.Context, c sandboxagent.ContainerOps, dump sandboxagent.SessionDump) (string, error) {
	if dump.Driver != "" && dump.Driver != d.Name() {
		return "", fmt.Errorf("%w: opencode: a %s session dump", sandboxagent.ErrInvalidArgument, dump.Driver)
	}
	data, ok := dump.Files[dumpFile]
	if !ok {
		return "", fmt.Errorf("%w: opencode: session dump has no %s", sandboxagent.ErrInvalidArgument, dumpFile)
	}
	var exp struct {
		Info struct {
			ID string `json:"id"`
		} `json:"info"`
	}
	if err := json.Unmarshal(data, &exp); err != nil || checkID(exp.Info.ID) != nil {
		return "", fmt.Errorf("%w: opencode: session dump %s is not an opencode export", sandboxagent.ErrInvalidArgument, dumpFile)
	}
	tmp := "/tmp/sandbox-agent-opencode-import-" + randHex(8) + ".json"
	if err := c.WriteFile(ctx, tmp, data, 0o644); err != nil {
		return "", err
	}
	res, err := run(ctx, c, sandboxagent.ExecRequest{Cmd: []string{"opencode", "import", tmp}, Env: quietEnv()})
	_, _ = c.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"rm", "-f", "--", tmp}})
	if err != nil {
		return "", err
	}
	if m := importedRe.FindSubmatch(append(res.Stdout, res.Stderr...)); m != nil {
		return string(m[1]), nil
	}
	return exp.Info.ID, nil
}

// ---- helpers ----

var ansiRe = regexp.MustCompile("\x1b\\[[0-9;?]*[ -/]*[@-~]")

func stripANSI(s string) string { return ansiRe.ReplaceAllString(s, "") }

// lastLine is the last non-empty line of s without ANSI colours, or def.
func lastLine(s, def string) string {
	lines := strings.Split(stripANSI(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return truncate(l, 500)
		}
	}
	return def
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
