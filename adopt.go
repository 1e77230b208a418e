package sandboxagent

// Adoption: a host process that died (SIGKILL, a crash) leaves its
// agents' sandboxes running; a new process holding their State takes them
// over (Adopt) and goes on with the next turn.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sandbox-agent/sandbox-agent/audit"
	"github.com/sandbox-agent/sandbox-agent/internal/boundary"
	"github.com/sandbox-agent/sandbox-agent/internal/bounded"
	"github.com/sandbox-agent/sandbox-agent/internal/guest"
	"github.com/sandbox-agent/sandbox-agent/repo"
)

// stateVersion is the format of AgentState (its Version).
const stateVersion = 1

// AgentState is what another process needs to take an agent over (Adopt)
// once the one driving it died: the sandbox, the boundary its CLI was
// configured for, the session and the turn count. What the host knows
// from its configuration (the driver's key and upstream, timeouts,
// resources) is not in it. Store it as JSON after every turn (and after
// SetSession, LoadSession, DeleteSession).
//
// ModelToken is a secret: with it, anything that reaches the model proxy
// spends the real key while the agent lives. Keep the state where you
// keep credentials. Adopt treats every field as untrusted input.
type AgentState struct {
	Version     int      `json:"version"` // 1
	Driver      string   `json:"driver"`  // the driver's Name
	Image       string   `json:"image"`
	Model       string   `json:"model,omitempty"`
	SandboxID   string   `json:"sandbox_id"`
	SandboxName string   `json:"sandbox_name"`
	User        string   `json:"user,omitempty"`    // the sandbox's user ("": the image's)
	WorkDir     string   `json:"workdir,omitempty"` // the sandbox's working directory ("": the image's)
	Egress      Egress   `json:"egress"`
	AllowHosts  []string `json:"allow_hosts,omitempty"`
	// SocketDir is the host folder of the proxies' sockets, bind-mounted
	// in the sandbox ("" on an engine without bind mounts: Kubernetes).
	SocketDir string `json:"socket_dir,omitempty"`
	// The sandbox's loopback ports of the relays to the model and egress
	// proxies (0: none), which the CLI's configuration names.
	ModelPort  int `json:"model_port,omitempty"`
	EgressPort int `json:"egress_port,omitempty"`
	// ModelBaseURL is the model proxy's URL the CLI was configured with
	// ("" when the CLI holds its own key).
	ModelBaseURL string `json:"model_base_url,omitempty"`
	ModelToken   string `json:"model_token,omitempty"` // the proxy's token: a secret
	Session      string `json:"session,omitempty"`     // the session the next turn continues
	Turns        int    `json:"turns"`                 // turns started: the next is Turns+1
	// LongLived: the CLI runs in its long-lived mode (else one per turn).
	LongLived bool      `json:"long_lived"`
	Started   time.Time `json:"started"` // the agent's start (its network audit's date folder)
	// Repo: the repository WithRepo put in and where its syncs are
	// (nil: none).
	Repo *repo.State `json:"repo,omitempty"`
}

// State is what Adopt needs to take the agent over in another process. It
// does not wait for a running turn: Turns counts that turn too.
func (a *Agent) State() AgentState {
	a.mu.Lock()
	turns, session := a.turns, a.session
	a.mu.Unlock()
	sb := a.sb
	st := AgentState{
		Version: stateVersion, Driver: a.drv.Name(), Image: a.image, Model: a.model,
		SandboxID: sb.id, SandboxName: sb.name, User: sb.user, WorkDir: sb.workdir,
		Egress: sb.egress, AllowHosts: slices.Clone(sb.allow), SocketDir: sb.sockets,
		ModelBaseURL: a.baseURL, ModelToken: a.token, Session: session, Turns: turns, Started: a.started,
	}
	_, st.LongLived = a.longLived()
	if sb.host != nil {
		st.ModelPort, st.EgressPort = sb.host.Port(boundary.ServiceModel), sb.host.Port(boundary.ServiceEgress)
	}
	if a.repo != nil {
		rs := a.repo.State()
		st.Repo = &rs
	}
	return st
}

// SandboxLostError: Adopt found the agent's sandbox gone — removed, or
// stopped and removed by the engine (Status "", and errors.Is matches
// ErrContainerNotFound) — or stopped (its keepalive or lifetime ran out,
// the OOM killer, an eviction). The agent is lost; Reason says why.
type SandboxLostError struct {
	ID, Name  string
	Status    Status // "" when the container is gone
	ExitCode  int
	OOMKilled bool
	Reason    string // the engine's words: its error, or why the container stopped
	Err       error  // the engine's error, when the container is gone
}

func (e *SandboxLostError) Error() string {
	if e.Status == "" {
		return fmt.Sprintf("sandbox %s lost: %s", e.Name, e.Reason)
	}
	msg := fmt.Sprintf("sandbox %s lost: %s (exit code %d", e.Name, e.Status, e.ExitCode)
	if e.OOMKilled {
		msg += ", OOM-killed"
	}
	if e.Reason != "" {
		msg += ", " + e.Reason
	}
	return msg + ")"
}

func (e *SandboxLostError) Unwrap() error { return e.Err }

// Adopt takes over the running sandbox of an agent whose host process
// died, from its State: drv is built as for Start (the real key and
// upstream), opts are Start's (the configuration, resources, owner, ...;
// the state's image, model, egress, user and workdir win). It checks the
// container (a *SandboxLostError when it is gone or stopped; an
// ErrInvalidArgument when it is not the state's sandbox of ours; a
// *HardeningError when its hardening is not what opts ask), serves the
// model and egress proxies again where the CLI's configuration points
// (the same socket folder, ports and token), stops a CLI process the dead
// host left running, and continues: the next turn is Turns+1 and resumes
// Session, the audit appends to the same folders. drv.Setup is not run
// again. On failure the container is left as it is.
func Adopt(ctx context.Context, rt Runtime, drv Driver, st AgentState, opts ...AgentOption) (*Agent, error) {
	if drv == nil || rt == nil {
		return nil, fmt.Errorf("%w: nil driver or Runtime", ErrInvalidArgument)
	}
	o, cfg := applyOptions(opts)
	if err := o.check(); err != nil {
		return nil, err
	}
	if err := st.check(drv); err != nil {
		return nil, err
	}
	cfg.PerTurn = !st.LongLived // the mode the sandbox's CLI was in
	o.model = st.Model
	if st.Started.IsZero() {
		st.Started = time.Now()
	}
	a, sopts, err := newAgent(drv, o, cfg, st.Image, st.Egress, st.AllowHosts, st)
	if err != nil {
		return nil, err
	}
	sopts.User, sopts.WorkDir = st.User, st.WorkDir
	a.turns, a.session = st.Turns, st.Session
	if a.sb, err = adoptSandbox(ctx, rt, sopts, st); err != nil {
		return nil, err
	}
	a.route()
	if a.baseURL != st.ModelBaseURL {
		a.sb.detach()
		return nil, fmt.Errorf("%w: adopt %s: its CLI reaches the model proxy at %s, the driver's route is now %s (the upstream's path changed?)",
			ErrInvalidArgument, st.SandboxName, st.ModelBaseURL, a.baseURL)
	}
	if st.Repo != nil {
		// The agent goes on without its repository when this host cannot
		// open it (another machine's folder): Changes then says so.
		if a.repo, err = repo.Resume(ctx, *st.Repo); err != nil {
			a.log.Warn("sandbox-agent: adopt: the agent's repository cannot be opened here; its changes cannot be brought home", "agent", st.SandboxName, "err", err)
		}
	}
	a.adopted = true
	return a, nil
}

// check refuses a state Adopt cannot use for drv.
func (st AgentState) check(drv Driver) error {
	_, longLived := drv.(LongLived)
	var why string
	switch {
	case st.Version != stateVersion:
		why = fmt.Sprintf("version %d, want %d", st.Version, stateVersion)
	case st.Driver != drv.Name():
		why = fmt.Sprintf("driver %q, not %s", st.Driver, drv.Name())
	case st.SandboxID == "" || st.SandboxName == "" || st.Image == "":
		why = "no sandbox id, name or image"
	case st.Turns < 0 || st.ModelPort < 0 || st.ModelPort > 65535 || st.EgressPort < 0 || st.EgressPort > 65535:
		why = "turns or ports out of range"
	case (st.ModelToken != "") != (st.ModelPort != 0) || (len(st.AllowHosts) > 0) != (st.EgressPort != 0):
		why = "proxies and their ports do not match"
	case st.LongLived && !longLived:
		why = "a long-lived CLI, which the driver has not"
	default:
		return nil
	}
	return fmt.Errorf("%w: agent state: %s", ErrInvalidArgument, why)
}

// adoptSandbox takes over the running container of st: it checks it
// against opts (ours, the state's, running, hardened as asked, mounting
// the state's socket folder), serves the proxies again in that folder
// (without bind mounts: through a new tunnel) on the ports the CLI knows,
// and stops what the dead host left running of its turns. On failure the
// container is left as it is.
func adoptSandbox(ctx context.Context, rt Runtime, opts SandboxOptions, st AgentState) (*Sandbox, error) {
	cfg := opts.Config.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeouts.Start)
	defer cancel()
	fail := func(err error) (*Sandbox, error) { return nil, fmt.Errorf("adopt sandbox %s: %w", st.SandboxName, err) }
	got, err := rt.Inspect(ctx, st.SandboxID)
	if errors.Is(err, ErrContainerNotFound) {
		return nil, &SandboxLostError{ID: st.SandboxID, Name: st.SandboxName, Reason: err.Error(), Err: err}
	}
	if err != nil {
		return fail(err)
	}
	// An engine may name the image in full (docker.io/library/..., localhost/...).
	image := got.Image == "" || got.Image == st.Image || strings.HasSuffix(got.Image, "/"+st.Image)
	if got.Labels[LabelManaged] != "true" || got.ID != st.SandboxID || got.Name != st.SandboxName || !image {
		return fail(fmt.Errorf("%w: container %s (%s, image %s) is not the state's sandbox of sandbox-agent", ErrInvalidArgument, got.ID, got.Name, got.Image))
	}
	if !got.Running {
		return nil, &SandboxLostError{ID: st.SandboxID, Name: st.SandboxName, Status: got.Status, ExitCode: got.ExitCode, OOMKilled: got.OOMKilled, Reason: got.Reason}
	}
	spec, err := containerSpec(opts, cfg)
	if err != nil {
		return nil, err
	}
	if !FeaturesOf(rt).Seccomp {
		spec.Seccomp = nil
	}
	mounts := FeaturesOf(rt).BindMounts
	if mounts && st.SocketDir != "" {
		mountSockets(&spec, st.SocketDir)
	}
	if err := checkHardening(spec, got); err != nil {
		return fail(err)
	}
	for _, m := range got.Mounts { // checkHardening looked at the targets only
		if m.Target == boundary.SocketDir && m.Source != st.SocketDir {
			return fail(fmt.Errorf("%w: the sandbox mounts %s, not the state's socket folder", ErrInvalidArgument, m.Source))
		}
	}
	open := boundary.Open
	if mounts { // the sandbox sees the folder it mounts, not a new one
		open = func(s map[string]http.Handler) (*boundary.Host, error) { return boundary.Reopen(st.SocketDir, s) }
	}
	host, err := openBoundary(opts, open)
	if err != nil {
		return fail(err)
	}
	s := newSandbox(rt, st.SandboxID, spec, opts, cfg, host)
	s.pidsLimit, s.diskBytes = got.PidsLimit, got.DiskBytes
	if host != nil {
		host.UsePorts(map[string]int{boundary.ServiceModel: st.ModelPort, boundary.ServiceEgress: st.EgressPort})
	}
	listeners, err := s.settle(ctx)
	switch {
	case err != nil:
	case mounts && host != nil && host.Relayed(listeners):
		s.useProxies()
	default: // the relay died, or the tunnel (no bind mounts) with its host
		err = s.relay(ctx)
	}
	if err != nil {
		s.detach()
		return fail(err)
	}
	return s, nil
}

// maxSettleOutput bounds what the settle exec may print (a listener line
// per socket the sandbox opened, among them).
const maxSettleOutput = 1 << 20

// settle is the one exec of an adoption, as the sandbox's user (execs are
// what an adoption costs): it stops what the dead host left running of
// its turns (a CLI process would share the session with the next turn),
// reads the cgroup counters (earlier OOM kills are not the next
// command's) and returns the TCP listeners, port → uid (whether the dead
// host's relay still serves).
func (s *Sandbox) settle(ctx context.Context) (map[int]int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out := &bounded.Buffer{Max: maxSettleOutput}
	errb := &bounded.Buffer{Max: 4 << 10}
	code, err := s.rt.Exec(ctx, s.id, RuntimeExec{
		Cmd: []string{"/bin/sh", "-c", guest.AdoptSettle, "sandbox-agent-settle",
			guest.ExecKill, s.id, killGraceTicks(), turnTagVar, guest.Counters},
		User: s.user, Stdout: out, Stderr: errb,
	})
	if err != nil {
		return nil, fmt.Errorf("stop the dead host's turns: %w", err)
	}
	if code != 0 {
		return nil, fmt.Errorf("stop the dead host's turns: kill script exited %d: %s", code, bytes.TrimSpace(errb.Bytes()))
	}
	c := guest.ParseCounters(out.Bytes())
	s.seen = ResourceEvents{OOMKills: c.OOMKills, PidsLimit: c.PidsLimit}
	return guest.Listeners(out.Bytes()), nil
}

// detach stops serving the proxies of an adoption that failed, leaving
// the container and the socket folder it mounts as they were.
func (s *Sandbox) detach() {
	switch {
	case s.host == nil:
	case s.sockets != "":
		s.host.Release()
	default:
		s.host.Close() // a folder of its own (no bind mounts)
	}
}

// maxStatusBytes bounds the status.json an adopted agent reads back.
const maxStatusBytes = 64 << 20

// resumeAudit picks up the audit of a session an adopted agent continues
// (the state's, or another it is set to): its folder (of the day it
// began), its raw line count (the events' line numbers go on from it)
// and the turns status.json lists.
func (a *Agent) resumeAudit(session string) {
	r, err := audit.Resume(a.cfg.AuditRoot, session, maxStatusBytes)
	if err != nil {
		a.log.Warn("sandbox-agent: the adopted session's audit starts afresh", "err", err)
	}
	if r == nil {
		return
	}
	st := &sessionState{created: r.Date, lines: r.Lines}
	if r.Status != nil {
		st.status = *r.Status
	}
	a.sessions[session] = st
}
