package sandboxagent

import (
	"context"
	"fmt"
	"io/fs"
	"strings"

	"github.com/sandbox-agent/sandbox-agent/modelproxy"
)

// ContainerOps are the only three primitives a Driver may use to touch the
// container. *Sandbox implements them; unit tests fake just these.
type ContainerOps interface {
	Run(ctx context.Context, req ExecRequest) (ExecResult, error)
	ReadFile(ctx context.Context, name string, max int64) ([]byte, error)
	WriteFile(ctx context.Context, name string, data []byte, mode fs.FileMode) error
}

// Driver adapts one agent CLI: what every CLI must do. Drivers live in
// subpackages (driver/claude, driver/codex, ...) and are configured by
// their own Options (provider, base URL, key). The optional behaviours
// (Forker, SkillInstaller, RulesInstaller, SessionStore) are interfaces a
// driver implements or not; CapabilitiesOf reads them out.
type Driver interface {
	// Name is the CLI's name as in versions.json: "claude", "codex", ...
	Name() string
	// Image is the driver's default image; "" means the built-in one
	// derived from versions.json.
	Image() string
	// Secrets are values (API keys) that must never reach logs or the
	// audit trail; the agent redacts them.
	Secrets() []string

	// Setup installs the CLI's configuration (provider, base URL, key
	// reference, settings) in a fresh sandbox, once, before the first turn.
	Setup(ctx context.Context, c ContainerOps) error
	// Command builds the command line of one headless, fully autonomous
	// turn.
	Command(t Turn) (Invocation, error)
	// NewParser returns a parser for one turn's output.
	NewParser(t Turn) Parser
	// Traits says what the CLI's turns do that no method shows: whether a
	// later turn continues the session and what the output carries. They
	// are static: the same for every turn of the driver.
	Traits() Traits
}

// Traits of a CLI's turns (see Driver.Traits).
type Traits struct {
	Continue bool // a later turn continues the session
	Thinking bool // reports reasoning text when the backend returns it
	Usage    bool // reports token usage
	// Deltas: text arrives in fragments while the model writes.
	Deltas bool
	// Abort is how a turn whose context is cancelled is stopped.
	Abort AbortMode
}

// AbortMode says how a cancelled turn stops (Traits.Abort). Either way the
// turn returns the context's error with the events so far, and the next
// turn continues the session.
type AbortMode string

const (
	// AbortKill: the CLI's process tree is killed; the next turn resumes
	// the session from what the CLI had saved (the aborted turn's prompt
	// and the model's answers so far).
	AbortKill AbortMode = "kill"
	// AbortInterrupt: the CLI's own protocol interrupts the turn and its
	// process lives on.
	AbortInterrupt AbortMode = "interrupt"
)

// Forker is a Driver that can copy a session.
type Forker interface {
	// Fork copies a session into a new, isolated one and returns its id.
	Fork(ctx context.Context, c ContainerOps, sessionID string) (string, error)
}

// SkillInstaller is a Driver whose CLI reads skills.
type SkillInstaller interface {
	// InstallSkill puts a skill where the CLI reads skills. The skill was
	// validated by Agent.InstallSkill.
	InstallSkill(ctx context.Context, c ContainerOps, s Skill) error
}

// RulesInstaller is a Driver whose CLI reads instruction text (rules).
type RulesInstaller interface {
	// InstallRules puts instruction text where the CLI reads rules.
	InstallRules(ctx context.Context, c ContainerOps, rules string) error
}

// SessionStore is a Driver that manages the sessions its CLI keeps in the
// container.
type SessionStore interface {
	ListSessions(ctx context.Context, c ContainerOps) ([]SessionInfo, error)
	DeleteSession(ctx context.Context, c ContainerOps, id string) error
	// DumpSession captures a session as a portable value; LoadSession
	// installs one (in another container) and returns its id there.
	DumpSession(ctx context.Context, c ContainerOps, id string) (SessionDump, error)
	LoadSession(ctx context.Context, c ContainerOps, d SessionDump) (string, error)
}

// Capabilities of a driver: a read-out of its Traits and of the optional
// interfaces it implements (see CapabilitiesOf).
type Capabilities struct {
	Continue bool // a later turn continues the session
	Fork     bool // Forker
	Skills   bool // SkillInstaller
	Rules    bool // RulesInstaller
	Sessions bool // SessionStore: list, delete, dump, load
	Thinking bool // reports reasoning text when the backend returns it
	Usage    bool // reports token usage
	// Deltas: text arrives in fragments while the model writes.
	Deltas bool
	// Abort is how a turn whose context is cancelled is stopped.
	Abort AbortMode
}

// CapabilitiesOf says which optional behaviours d supports: its Traits,
// and the optional interfaces (Forker, SkillInstaller, RulesInstaller,
// SessionStore) it implements.
func CapabilitiesOf(d Driver) Capabilities {
	t := d.Traits()
	_, fork := d.(Forker)
	_, skills := d.(SkillInstaller)
	_, rules := d.(RulesInstaller)
	_, sessions := d.(SessionStore)
	return Capabilities{
		Continue: t.Continue, Fork: fork, Skills: skills, Rules: rules, Sessions: sessions,
		Thinking: t.Thinking, Usage: t.Usage, Deltas: t.Deltas, Abort: t.Abort,
	}
}

// Turn is what a driver needs to build and parse one turn.
type Turn struct {
	Prompt string
	Model  string
	// SessionID is the session to continue; empty starts a new one.
	SessionID string
	// WorkDir is where the CLI runs (the sandbox's working directory when
	// empty).
	WorkDir string
	// LongLived is set by the agent when the turn runs on a LongLived
	// driver's long-lived process (not Command): a driver whose CLI prints
	// another vocabulary there picks its parser by it, so that a line of
	// the other mode's vocabulary is not believed.
	LongLived bool
}

// Invocation is the process the agent runs for one turn.
type Invocation struct {
	Cmd     []string
	Env     map[string]string
	WorkDir string
	// Stdin is fed to the process and then closed; nil gives it EOF at
	// once (several CLIs block on an open stdin).
	Stdin []byte
}

// Parser turns one turn's raw output into normalized events.
type Parser interface {
	// Parse handles one stdout line (without its newline). It must never
	// drop information silently: a line it does not understand becomes a
	// KindRaw event. Line, Turn and Time are filled in by the agent.
	Parse(line []byte) []Event
	// Finish is called after the process exited, with its exit code and
	// stderr. It returns the turn's outcome; a failure the CLI reported is
	// a *DriverError.
	Finish(exitCode int, stderr []byte) (TurnOutcome, error)
}

// TurnOutcome is what a parser extracted from a finished turn.
type TurnOutcome struct {
	Reply     string
	SessionID string
}

// Skill is a folder with a SKILL.md and any other files.
type Skill struct {
	Name  string
	Files map[string][]byte // relative path → content; must hold "SKILL.md"
}

// validate checks a skill's name and files.
func (s Skill) validate() error {
	if s.Name == "" || strings.ContainsAny(s.Name, "/\\\x00") || s.Name == "." || s.Name == ".." {
		return fmt.Errorf("%w: skill name %q", ErrInvalidArgument, s.Name)
	}
	if _, ok := s.Files["SKILL.md"]; !ok {
		return fmt.Errorf("%w: skill %q has no SKILL.md", ErrInvalidArgument, s.Name)
	}
	for p := range s.Files {
		if !fs.ValidPath(p) {
			return fmt.Errorf("%w: skill %q file path %q", ErrInvalidArgument, s.Name, p)
		}
	}
	return nil
}

// SessionInfo describes one session a CLI keeps.
type SessionInfo struct {
	ID      string `json:"id"`
	Title   string `json:"title,omitempty"`
	Path    string `json:"path,omitempty"`
	Updated string `json:"updated,omitempty"`
}

// SessionDump is a portable copy of a session: the CLI's own files (or
// export), as the driver understands them.
type SessionDump struct {
	Driver    string            `json:"driver"`
	SessionID string            `json:"session_id"`
	Files     map[string][]byte `json:"files"` // driver-defined names
	Meta      map[string]string `json:"meta,omitempty"`
}

// ModelRouter is a driver whose CLI can be pointed at the host's model
// proxy, so the real credential never enters the sandbox: the CLI gets the
// proxy's URL and a per-sandbox token; the proxy swaps the token for the
// key and forwards to the upstream.
type ModelRouter interface {
	// ModelRoute is where the CLI's requests really go, and with which
	// credential.
	ModelRoute() (ModelRoute, error)
	// Routed returns a copy of the driver (same type, so its optional
	// interfaces stay) that talks to baseURL with token as its key.
	Routed(baseURL, token string) Driver
}

// ModelRoute is a driver's real endpoint.
type ModelRoute struct {
	Upstream string // base URL, e.g. "https://api.anthropic.com" or "http://127.0.0.1:8080/v1"
	Key      string // "" = none
	// APIs are the wire APIs the CLI speaks there, as modelproxy names
	// them ("anthropic-messages", "openai-chat", "openai-responses"; no ""
	// entries): the proxy forwards only their routes and refuses the rest
	// of the upstream (a gateway's key or admin routes) with 403. Empty =
	// all three.
	APIs []string
}

// proxyAPIs converts APIs for modelproxy.Options.
func (r ModelRoute) proxyAPIs() []modelproxy.API {
	apis := make([]modelproxy.API, len(r.APIs))
	for i, a := range r.APIs {
		apis[i] = modelproxy.API(a)
	}
	return apis
}
