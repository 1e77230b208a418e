// Package smoke runs the main behaviours of sandbox-agent end to end
// against real agent CLIs, per driver, in order: container I/O, ask, tool
// events, continue, fork isolation, skills and rules, delete/dump, audit,
// cross-container load and a bad key. The `smoke` command and the
// drivers' conformance test both run it.
package smoke

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
)

// Target is one driver to smoke-test.
type Target struct {
	Name string
	// New builds the driver for an endpoint.
	New drivers.Factory
	// Real is the endpoint for a run against a real model; unused with
	// the fake model.
	Real drivers.Endpoint
	// Model is passed to the agent ("" = the driver's default).
	Model string
}

// Options configures a run.
type Options struct {
	Runtime sandboxagent.Runtime
	Config  sandboxagent.Config
	// Fake runs against the built-in fake model (no key, no network).
	Fake bool
	// Image overrides every target's image (tests).
	Image string
	// Progress, when set, is called as each step ends.
	Progress func(StepResult)
}

// Status of a step.
type Status string

const (
	Pass Status = "pass"
	Fail Status = "fail"
	// NotApplicable: the driver does not support the behaviour
	// (sandboxagent.CapabilitiesOf); it is not a failure.
	NotApplicable Status = "n/a"
)

// StepResult is one step of one driver.
type StepResult struct {
	Driver   string        `json:"driver"`
	Step     string        `json:"step"`
	Status   Status        `json:"status"`
	Duration time.Duration `json:"-"`
	Seconds  float64       `json:"seconds"`
	Detail   string        `json:"detail,omitempty"`
}

// Steps, in the order they run.
var Steps = []string{
	"container_io", "ask", "tool_events", "continue", "fork_isolation",
	"skills_rules", "delete_dump", "audit", "load", "bad_key",
}

// Run smoke-tests every target in parallel (steps in order within one
// target) and returns every step's result, targets in the order given.
func Run(ctx context.Context, o Options, targets []Target) []StepResult {
	results := make([][]StepResult, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = runTarget(ctx, o, t)
		}()
	}
	wg.Wait()
	var all []StepResult
	for _, r := range results {
		all = append(all, r...)
	}
	return all
}

// errNA marks a step as not applicable.
type errNA struct{ why string }

func (e errNA) Error() string { return e.why }

func na(format string, args ...any) error { return errNA{fmt.Sprintf(format, args...)} }

// run is the state of one target's run.
type run struct {
	o      Options
	t      Target
	ctx    context.Context
	fake   *fakemodel.Server
	ep     drivers.Endpoint
	caps   sandboxagent.Capabilities
	agent  *sandboxagent.Agent
	audit  string
	marker string // unique text of this run

	firstPrompt string
	firstTurn   sandboxagent.TurnResult
	origSession string
	forkSession string
	dump        sandboxagent.SessionDump
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func runTarget(ctx context.Context, o Options, t Target) []StepResult {
	r := &run{o: o, t: t, ctx: ctx, marker: strings.ToUpper(randHex(4))}
	var out []StepResult
	setupErr := r.setup()
	defer r.close()
	for _, name := range Steps {
		start := time.Now()
		var err error
		if setupErr != nil {
			err = fmt.Errorf("set-up failed: %w", setupErr)
		} else {
			err = r.step(name)
		}
		d := time.Since(start)
		res := StepResult{Driver: t.Name, Step: name, Status: Pass, Duration: d, Seconds: d.Round(time.Millisecond).Seconds()}
		var notApp errNA
		switch {
		case errors.As(err, &notApp):
			res.Status, res.Detail = NotApplicable, notApp.why
		case err != nil:
			res.Status, res.Detail = Fail, err.Error()
		}
		if o.Progress != nil {
			o.Progress(res)
		}
		out = append(out, res)
	}
	return out
}

func (r *run) setup() error {
	dir, err := os.MkdirTemp("", "sandbox-agent-smoke-")
	if err != nil {
		return err
	}
	r.audit = filepath.Join(dir, "audit")
	if r.o.Fake {
		srv, err := fakemodel.New(fakemodel.Script{}, fakemodel.Options{})
		if err != nil {
			return err
		}
		if err := srv.Start("127.0.0.1:0"); err != nil {
			return err
		}
		r.fake = srv
		r.ep = drivers.Endpoint{BaseURL: srv.URL() + "/v1", APIKey: "sk-smoke-" + randHex(16), Provider: "sandbox"}
		if err := r.script(fakemodel.Script{}); err != nil {
			return err
		}
	} else {
		r.ep = r.t.Real
	}
	a, err := r.start(r.ep)
	if err != nil {
		return err
	}
	r.agent = a
	r.caps = sandboxagent.CapabilitiesOf(a.Driver())
	return nil
}

// script replaces the fake model's script (keeping the expected key).
func (r *run) script(s fakemodel.Script) error {
	if r.fake == nil {
		return nil
	}
	s.ExpectKey = r.ep.APIKey
	return r.fake.Reset(s)
}

// start starts an agent (its own container) for an endpoint.
func (r *run) start(ep drivers.Endpoint) (*sandboxagent.Agent, error) {
	cfg := r.o.Config
	cfg.AuditRoot = r.audit
	cfg.AuditEnabled = true
	opts := []sandboxagent.AgentOption{sandboxagent.WithConfig(cfg), sandboxagent.WithModel(r.t.Model)}
	if r.o.Image != "" {
		opts = append(opts, sandboxagent.WithImage(r.o.Image))
	}
	if r.fake != nil || LoopbackURL(ep.BaseURL) {
		opts = append(opts, sandboxagent.WithNetwork("host"))
	}
	ctx, cancel := context.WithTimeout(r.ctx, cfg.Timeouts.Start+time.Minute)
	defer cancel()
	return sandboxagent.Start(ctx, r.o.Runtime, r.t.New(ep), opts...)
}

// LoopbackURL reports whether u points at the host's loopback (the fake
// model, a local gateway): a sandbox reaches it only on the host network.
func LoopbackURL(u string) bool {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return false
	}
	h := p.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

func (r *run) close() {
	if r.agent != nil {
		r.agent.Close()
	}
	if r.fake != nil {
		r.fake.Close()
	}
	if r.audit != "" {
		os.RemoveAll(filepath.Dir(r.audit))
	}
}

func (r *run) step(name string) error {
	ctx, cancel := context.WithTimeout(r.ctx, r.o.Config.Timeouts.Ask+2*time.Minute)
	defer cancel()
	switch name {
	case "container_io":
		return r.containerIO(ctx)
	case "ask":
		return r.ask(ctx)
	case "tool_events":
		return r.toolEvents()
	case "continue":
		return r.continueStep(ctx)
	case "fork_isolation":
		return r.forkIsolation(ctx)
	case "skills_rules":
		return r.skillsRules(ctx)
	case "delete_dump":
		return r.deleteDump(ctx)
	case "audit":
		return r.auditStep()
	case "load":
		return r.load(ctx)
	case "bad_key":
		return r.badKey(ctx)
	}
	return fmt.Errorf("unknown step %q", name)
}

func (r *run) containerIO(ctx context.Context) error {
	sb := r.agent.Container()
	res, err := sb.Exec(ctx, []string{"sh", "-c", "echo out; echo err >&2; exit 7"})
	if err != nil {
		return err
	}
	if res.ExitCode != 7 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
		return fmt.Errorf("exec: code %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	content := []byte("smoke \"quoted\"\nünïcode " + r.marker + "\n")
	if err := sb.WriteFile(ctx, "/tmp/smoke/io.txt", content, 0o644); err != nil {
		return err
	}
	got, err := sb.ReadFile(ctx, "/tmp/smoke/io.txt", 0)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, content) {
		return fmt.Errorf("read back %q", got)
	}
	dst, err := os.MkdirTemp("", "sandbox-agent-smoke-dl-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dst)
	if _, err := sb.Download(ctx, "/tmp/smoke", dst); err != nil {
		return err
	}
	if b, err := os.ReadFile(filepath.Join(dst, "smoke", "io.txt")); err != nil || !bytes.Equal(b, content) {
		return fmt.Errorf("downloaded %q (%v)", b, err)
	}
	res, err = sb.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", "sleep 60 & sleep 60"}, Timeout: time.Second})
	if err != nil {
		return err
	}
	if !res.TimedOut || res.ExitCode != sandboxagent.ExitCodeTimeout {
		return fmt.Errorf("timeout: %+v", res)
	}
	return nil
}

const smokeFile = "/tmp/smoke-out.txt"

func (r *run) ask(ctx context.Context) error {
	if err := r.script(fakemodel.Script{Responses: []fakemodel.Step{
		{Tool: fakemodel.ToolShell, Command: "echo hi > " + smokeFile},
		{Text: "DONE"},
	}}); err != nil {
		return err
	}
	r.firstPrompt = "Smoke test " + r.marker + ": run the shell command `echo hi > " + smokeFile + "`, then answer with the single word DONE."
	res, err := r.agent.Stream(ctx, r.firstPrompt, nil)
	r.firstTurn = res
	r.origSession = res.SessionID
	if err != nil {
		return err
	}
	if r.fake != nil && res.Reply != "DONE" {
		return fmt.Errorf("reply %q, want DONE", res.Reply)
	}
	if strings.TrimSpace(res.Reply) == "" {
		return errors.New("empty reply")
	}
	b, err := r.agent.Container().ReadFile(ctx, smokeFile, 0)
	if err != nil {
		return fmt.Errorf("the tool's file: %w", err)
	}
	if string(b) != "hi\n" {
		return fmt.Errorf("%s holds %q", smokeFile, b)
	}
	return nil
}

func (r *run) toolEvents() error {
	if r.firstTurn.Events == nil {
		return errors.New("no turn to inspect (ask failed)")
	}
	var call *sandboxagent.Event
	for i, e := range r.firstTurn.Events {
		if e.Kind == sandboxagent.KindToolCall && strings.Contains(e.Payload.Command, "echo hi > "+smokeFile) {
			call = &r.firstTurn.Events[i]
			for _, later := range r.firstTurn.Events[i+1:] {
				if later.Kind == sandboxagent.KindToolResult && (call.Payload.CallID == "" || later.Payload.CallID == call.Payload.CallID) {
					return nil
				}
			}
			return fmt.Errorf("tool_call %s has no tool_result after it", call.Payload.CallID)
		}
	}
	return fmt.Errorf("no tool_call carrying the command among %d events", len(r.firstTurn.Events))
}

// requestsSince returns the bodies of the fake model's requests after n.
func (r *run) requestsSince(n int) string {
	var b strings.Builder
	for _, q := range r.fake.Requests()[n:] {
		b.Write(q.Body)
		b.WriteByte('\n')
	}
	return b.String()
}

// sawInRequests reports whether text reached the model after request n.
func (r *run) sawInRequests(n int, text string) bool {
	return strings.Contains(r.requestsSince(n), text)
}

func (r *run) continueStep(ctx context.Context) error {
	if !r.caps.Continue {
		return na("driver declares no continue")
	}
	if r.origSession == "" {
		return errors.New("no session from the first turn")
	}
	if r.fake == nil {
		reply, err := r.agent.Ask(ctx, "What was the code word in my first message? Answer with the word only.")
		if err != nil {
			return err
		}
		if !strings.Contains(reply, r.marker) {
			return fmt.Errorf("reply %q does not recall %s", reply, r.marker)
		}
		return nil
	}
	if err := r.script(fakemodel.Script{Responses: []fakemodel.Step{{Text: "SECOND"}}}); err != nil {
		return err
	}
	n := len(r.fake.Requests())
	res, err := r.agent.Stream(ctx, "Second turn "+r.marker+"-2", nil)
	if err != nil {
		return err
	}
	if res.SessionID != r.origSession {
		return fmt.Errorf("session changed: %s → %s", r.origSession, res.SessionID)
	}
	if !r.sawInRequests(n, "Smoke test "+r.marker) {
		return errors.New("the model did not see the first turn")
	}
	return nil
}

// sessionText is the dump of a session as one string.
func sessionText(d sandboxagent.SessionDump) string {
	var b strings.Builder
	for _, f := range d.Files {
		b.Write(f)
	}
	return b.String()
}

func (r *run) forkIsolation(ctx context.Context) error {
	if !r.caps.Fork {
		return na("driver declares no fork")
	}
	if r.origSession == "" {
		return errors.New("no session to fork")
	}
	var before sandboxagent.SessionDump
	var err error
	if r.caps.Sessions {
		if before, err = r.agent.DumpSession(ctx, r.origSession); err != nil {
			return fmt.Errorf("dump before fork: %w", err)
		}
	}
	fork, err := r.agent.Fork(ctx, r.origSession)
	if err != nil {
		return err
	}
	if fork == "" || fork == r.origSession {
		return fmt.Errorf("fork id %q", fork)
	}
	r.forkSession = fork
	forkMarker := "FORK-" + r.marker
	if err := r.script(fakemodel.Script{Responses: []fakemodel.Step{{Text: "FORKED"}, {Text: "ORIGINAL"}}}); err != nil {
		return err
	}
	r.agent.SetSession(fork)
	n := 0
	if r.fake != nil {
		n = len(r.fake.Requests())
	}
	res, err := r.agent.Stream(ctx, "On the fork: "+forkMarker, nil)
	if err != nil {
		return fmt.Errorf("turn on the fork: %w", err)
	}
	if res.SessionID != fork {
		return fmt.Errorf("turn on the fork ran in session %s", res.SessionID)
	}
	if r.fake != nil && !r.sawInRequests(n, "Smoke test "+r.marker) {
		return errors.New("the fork does not carry the original history")
	}
	if r.caps.Sessions {
		after, err := r.agent.DumpSession(ctx, r.origSession)
		if err != nil {
			return fmt.Errorf("dump after fork: %w", err)
		}
		if strings.Contains(sessionText(after), forkMarker) {
			return errors.New("the fork's turn appears in the original session's files")
		}
		if sessionText(after) != sessionText(before) {
			return errors.New("the original session's files changed while the fork ran")
		}
		forkDump, err := r.agent.DumpSession(ctx, fork)
		if err != nil {
			return fmt.Errorf("dump fork: %w", err)
		}
		if !strings.Contains(sessionText(forkDump), forkMarker) {
			return errors.New("the fork's own files lack its turn")
		}
	}
	// The original can still be continued, without the fork's turn.
	r.agent.SetSession(r.origSession)
	if r.fake != nil {
		n = len(r.fake.Requests())
	}
	res, err = r.agent.Stream(ctx, "Back on the original "+r.marker, nil)
	if err != nil {
		return fmt.Errorf("continue the original: %w", err)
	}
	if res.SessionID != r.origSession {
		return fmt.Errorf("original continued in session %s", res.SessionID)
	}
	if r.fake != nil && r.sawInRequests(n, forkMarker) {
		return errors.New("the original session saw the fork's turn")
	}
	return nil
}

func (r *run) skillsRules(ctx context.Context) error {
	if !r.caps.Rules && !r.caps.Skills {
		return na("driver declares neither skills nor rules")
	}
	rule := "RULE-" + r.marker
	skillDesc := "SKILL-" + r.marker
	if r.caps.Rules {
		if err := r.agent.InstallRules(ctx, "Smoke rule "+rule+": keep answers short.\n"); err != nil {
			return fmt.Errorf("rules: %w", err)
		}
	}
	if r.caps.Skills {
		skill := sandboxagent.Skill{Name: "smoke-skill", Files: map[string][]byte{
			"SKILL.md":  []byte("---\nname: smoke-skill\ndescription: " + skillDesc + " a smoke-test skill\n---\n\nSay hello.\n"),
			"notes.txt": []byte("extra file\n"),
		}}
		if err := r.agent.InstallSkill(ctx, skill); err != nil {
			return fmt.Errorf("skill: %w", err)
		}
	}
	if r.fake == nil {
		return nil // a real model gives no reliable way to see its prompt
	}
	if err := r.script(fakemodel.Script{Responses: []fakemodel.Step{{Text: "RULES"}}}); err != nil {
		return err
	}
	// A fresh session: CLIs read rules and skills when a session starts.
	prev := r.agent.SessionID()
	r.agent.SetSession("")
	defer r.agent.SetSession(prev)
	n := len(r.fake.Requests())
	if _, err := r.agent.Ask(ctx, "Rules check "+r.marker); err != nil {
		return err
	}
	if r.caps.Rules && !r.sawInRequests(n, rule) {
		return errors.New("the rules text did not reach the model")
	}
	if r.caps.Skills && !r.sawInRequests(n, skillDesc) && !r.sawInRequests(n, "smoke-skill") {
		return errors.New("the skill did not reach the model")
	}
	return nil
}

func (r *run) deleteDump(ctx context.Context) error {
	if !r.caps.Sessions {
		return na("driver declares no session list/delete/dump/load")
	}
	list, err := r.agent.ListSessions(ctx)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	if !hasSession(list, r.origSession) {
		return fmt.Errorf("list lacks %s: %+v", r.origSession, list)
	}
	d, err := r.agent.DumpSession(ctx, r.origSession)
	if err != nil {
		return fmt.Errorf("dump: %w", err)
	}
	if len(d.Files) == 0 || !strings.Contains(sessionText(d), r.marker) {
		return errors.New("the dump does not hold the session's turns")
	}
	r.dump = d
	victim := r.forkSession
	if victim == "" {
		victim = r.origSession
	}
	if err := r.agent.DeleteSession(ctx, victim); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	list, err = r.agent.ListSessions(ctx)
	if err != nil {
		return fmt.Errorf("list after delete: %w", err)
	}
	if hasSession(list, victim) {
		return fmt.Errorf("%s still listed after delete", victim)
	}
	return nil
}

func hasSession(list []sandboxagent.SessionInfo, id string) bool {
	for _, s := range list {
		if s.ID == id {
			return true
		}
	}
	return false
}

func (r *run) auditStep() error {
	dir := r.firstTurn.AuditDir
	if dir == "" {
		return errors.New("the first turn has no audit folder")
	}
	raw, err := os.ReadFile(filepath.Join(dir, "session.jsonl"))
	if err != nil {
		return err
	}
	events, err := os.ReadFile(filepath.Join(dir, "events.jsonl"))
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "status.json")); err != nil {
		return err
	}
	maxLine := 0
	for _, e := range r.firstTurn.Events {
		maxLine = max(maxLine, e.Line)
	}
	if lines := bytes.Count(raw, []byte("\n")); lines < maxLine || maxLine == 0 {
		return fmt.Errorf("session.jsonl has %d lines, events point to line %d", lines, maxLine)
	}
	if bytes.Count(events, []byte("\n")) < len(r.firstTurn.Events) {
		return errors.New("events.jsonl has fewer lines than the turn's events")
	}
	key := r.ep.APIKey
	if len(key) < 4 {
		return nil
	}
	return filepath.WalkDir(r.audit, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(key)) {
			return fmt.Errorf("the API key appears in %s", p)
		}
		return nil
	})
}

func (r *run) load(ctx context.Context) error {
	if !r.caps.Sessions {
		return na("driver declares no session dump/load")
	}
	if r.dump.Files == nil {
		return errors.New("no dump from the previous step")
	}
	other, err := r.start(r.ep)
	if err != nil {
		return fmt.Errorf("second container: %w", err)
	}
	defer other.Close()
	id, err := other.LoadSession(ctx, r.dump)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	if err := r.script(fakemodel.Script{Responses: []fakemodel.Step{{Text: "LOADED"}}}); err != nil {
		return err
	}
	n := 0
	if r.fake != nil {
		n = len(r.fake.Requests())
	}
	res, err := other.Stream(ctx, "Continue in another container "+r.marker, nil)
	if err != nil {
		return fmt.Errorf("continue the loaded session: %w", err)
	}
	if res.SessionID != id {
		return fmt.Errorf("loaded session %s, turn ran in %s", id, res.SessionID)
	}
	if r.fake != nil && !r.sawInRequests(n, "Smoke test "+r.marker) {
		return errors.New("the model did not see the loaded history")
	}
	return nil
}

func (r *run) badKey(ctx context.Context) error {
	bad := r.ep
	bad.APIKey = "sk-invalid-" + randHex(12)
	a, err := r.start(bad)
	if err != nil {
		return err
	}
	defer a.Close()
	if err := r.script(fakemodel.Script{Responses: []fakemodel.Step{{Text: "SHOULD NOT HAPPEN"}}}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	start := time.Now()
	_, err = a.Ask(ctx, "Say hello.")
	var de *sandboxagent.DriverError
	if !errors.As(err, &de) {
		return fmt.Errorf("want a DriverError, got %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		return fmt.Errorf("DriverError after %v (want < 30s)", d.Round(time.Second))
	}
	return nil
}
