package sandboxagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/audit"
	"github.com/sandbox-agent/sandbox-agent/internal/boundary"
	"github.com/sandbox-agent/sandbox-agent/internal/guest"
	"github.com/sandbox-agent/sandbox-agent/internal/labels"
	"github.com/sandbox-agent/sandbox-agent/seccomp"
)

// adoptRuntime is a fake engine for adoption: forward.pl answers with the
// port it was asked for (else 4242), Inspect reports the container as a
// faithful engine would, changed by mod, or fails with err.
type adoptRuntime struct {
	*fakeRuntime
	mod     func(*ContainerState)
	err     error
	settled string // what the adoption's settle exec prints (listeners)
	settles int
}

func (r *adoptRuntime) Inspect(ctx context.Context, id string) (ContainerState, error) {
	if r.err != nil {
		return ContainerState{}, r.err
	}
	st, _ := r.fakeRuntime.Inspect(ctx, id)
	if r.mod != nil {
		r.mod(&st)
	}
	return st, nil
}

func newAdoptRuntime(out func(prompt string) (string, string, int)) *adoptRuntime {
	f := cliRuntime(out)
	inner := f.exec
	r := &adoptRuntime{fakeRuntime: f}
	f.exec = func(ctx context.Context, req RuntimeExec) (int, error) {
		if len(req.Cmd) > 3 && req.Cmd[3] == "sandbox-agent-settle" {
			r.settles++
			io.WriteString(req.Stdout, "oom 0\npids 0\n"+r.settled)
			return 0, nil
		}
		if req.Cmd[0] != "perl" {
			return inner(ctx, req)
		}
		for _, a := range req.Cmd[3:] {
			parts := strings.SplitN(a, "=", 3)
			port := "4242"
			if len(parts) == 3 {
				port = parts[2]
			}
			io.WriteString(req.Stdout, parts[0]+" "+port+"\n")
		}
		return 0, nil
	}
	f.inspect = func(spec ContainerSpec) ContainerState {
		st := recorded(spec)
		st.ID, st.Name, st.Image, st.Status = "cid", spec.Name, spec.Image, StatusRunning
		return st
	}
	return r
}

// viaSocket posts to the model proxy through the socket in dir with the
// token, as the sandbox's relay would, and returns the status.
func viaSocket(t *testing.T, dir, token string) int {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(dir, "model.sock"))
	}}}
	req, _ := http.NewRequest("POST", "http://sandbox/v1/messages", strings.NewReader("{}"))
	req.Header.Set("X-Api-Key", token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// An agent taken over from its State by another "process" (its host side
// released without Close, as a dead one leaves it): no Setup, the same
// socket folder, port and token through the model proxy, the CLI left
// running stopped by its tag, the next turn numbered on and continuing
// the session, the audit appending to the same folders.
func TestAdoptContinuesTheAgent(t *testing.T) {
	const key = "sk-real-key-0123456789"
	var mu sync.Mutex
	var keys []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("X-Api-Key"))
		mu.Unlock()
		io.WriteString(w, `{}`)
	}))
	defer up.Close()
	rt := newAdoptRuntime(func(prompt string) (string, string, int) {
		return `{"session":"s1"}` + "\n" + `{"text":"reply to ` + prompt + `"}` + "\n", "", 0
	})
	cfg := DefaultConfig()
	cfg.AuditRoot = filepath.Join(t.TempDir(), "audit")
	newDriver := func() *routedDriver { return &routedDriver{fakeDriver: fakeDriver{key: key}, upstream: up.URL + "/v1"} }
	a, err := Start(context.Background(), rt, newDriver(), WithConfig(cfg), WithModel("m1"), WithOwner("server-1"))
	if err != nil {
		t.Fatal(err)
	}
	r1, err := a.Stream(context.Background(), "one", nil)
	if err != nil || r1.SessionID != "s1" {
		t.Fatalf("turn 1: %+v %v", r1, err)
	}
	st := a.State()
	dir := st.SocketDir
	t.Cleanup(func() { os.RemoveAll(dir) })
	root, _ := boundary.SocketRoot()
	if st.Version != 1 || st.Driver != "claude" || st.SandboxID != "cid" || st.Model != "m1" || st.Session != "s1" || st.Turns != 1 ||
		st.ModelPort != 4242 || st.ModelBaseURL != "http://127.0.0.1:4242/v1" || len(st.ModelToken) < 32 || filepath.Dir(dir) != root ||
		st.Egress != EgressModel || st.LongLived || st.Started.IsZero() {
		t.Fatalf("state %+v", st)
	}
	if rt.created[0].Labels[labels.Owner] != "server-1" {
		t.Errorf("owner label %q", rt.created[0].Labels[labels.Owner])
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{`"sandbox_id":"cid"`, `"socket_dir":`, `"model_port":4242`, `"model_token":"`, `"session":"s1"`, `"turns":1`, `"long_lived":false`} {
		if !strings.Contains(string(b), f) {
			t.Errorf("state JSON %s lacks %s", b, f)
		}
	}
	if strings.Contains(string(b), key) {
		t.Error("the state holds the upstream key")
	}
	a.sb.host.Release() // the host dies: its servers go, the folder stays
	var back AgentState
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}

	rt.execs = nil
	b2, err := Adopt(context.Background(), rt, newDriver(), back, WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if len(rt.created) != 1 {
		t.Errorf("Adopt created a container")
	}
	var relay, kill bool
	for _, x := range rt.execs {
		cmd := strings.Join(x.Cmd, " ")
		relay = relay || x.Cmd[0] == "perl" && strings.HasSuffix(cmd, "model.sock=4242")
		kill = kill || len(x.Cmd) == 9 && x.Cmd[3] == "sandbox-agent-settle" && x.Cmd[4] == guest.ExecKill && x.Cmd[5] == "cid" && x.Cmd[7] == turnTagVar
		if strings.Contains(cmd, "fake.json") {
			t.Errorf("Setup ran again: %s", cmd)
		}
	}
	if !relay || !kill {
		t.Errorf("relay on the same port %v, stale CLI killed %v: %+v", relay, kill, rt.execs)
	}
	if got := viaSocket(t, dir, st.ModelToken); got != 200 {
		t.Errorf("the state's token through the reopened socket: %d", got)
	}
	if got := viaSocket(t, dir, "sa-proxy-wrong-token-0123456789012345678901234"); got != http.StatusUnauthorized {
		t.Errorf("another token: %d", got)
	}
	mu.Lock()
	if len(keys) != 1 || keys[0] != key {
		t.Errorf("the upstream saw %q", keys)
	}
	mu.Unlock()

	r2, err := b2.Stream(context.Background(), "two", nil)
	if err != nil || r2.SessionID != "s1" {
		t.Fatalf("turn 2: %+v %v", r2, err)
	}
	for _, x := range rt.execs {
		if x.Cmd[0] == "fakecli" && !slices.Contains(x.Env, turnTagVar+"=cid") {
			t.Errorf("a turn's exec without the turn tag: %v", x.Env)
		}
	}
	routed := b2.Driver().(*routedDriver)
	if routed.routedTo != st.ModelBaseURL || routed.key != st.ModelToken || len(routed.turns) != 1 || routed.turns[0].SessionID != "s1" || routed.turns[0].Model != "m1" {
		t.Errorf("routed to %q, turns %+v", routed.routedTo, routed.turns)
	}
	for _, ev := range r2.Events {
		if ev.Turn != 2 || ev.Line > 0 && ev.Line <= 2 {
			t.Errorf("turn 2 event %+v: want turn 2, lines after turn 1's", ev)
		}
	}
	if r2.AuditDir != r1.AuditDir {
		t.Errorf("audit folder %s, then %s", r1.AuditDir, r2.AuditDir)
	}
	var status audit.Status
	data, _ := os.ReadFile(filepath.Join(r2.AuditDir, "status.json"))
	if err := json.Unmarshal(data, &status); err != nil || len(status.Turns) != 2 || status.Turns[1].Turn != 2 || status.Turns[1].FirstLine != 3 {
		t.Errorf("status.json %s", data)
	}
	if raw, _ := os.ReadFile(filepath.Join(r2.AuditDir, "session.jsonl")); strings.Count(string(raw), "\n") != 4 {
		t.Errorf("session.jsonl %q", raw)
	}
	if b2.NetworkAuditDir() != a.NetworkAuditDir() {
		t.Errorf("network audit %s, then %s", a.NetworkAuditDir(), b2.NetworkAuditDir())
	}
	if st2 := b2.State(); st2.Turns != 2 || st2.ModelToken != st.ModelToken || st2.SocketDir != dir || st2.ModelPort != 4242 {
		t.Errorf("state after adoption %+v", st2)
	}
	if err := b2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Close left the socket folder: %v", err)
	}
}

// Adopt reports a sandbox that is gone or stopped as lost, refuses a
// container that is not the state's (or not ours, or no longer hardened
// as asked) and a state that does not fit the driver; none of it touches
// the container or the socket folder.
func TestAdoptRefuses(t *testing.T) {
	rt := newAdoptRuntime(func(string) (string, string, int) { return `{"session":"s1"}`, "", 0 })
	cfg := DefaultConfig()
	cfg.AuditRoot = filepath.Join(t.TempDir(), "audit")
	drv := &routedDriver{fakeDriver: fakeDriver{key: "sk-real-key-0123456789"}, upstream: "http://127.0.0.1:1/v1"}
	a, err := Start(context.Background(), rt, drv, WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	st := a.State()
	t.Cleanup(func() { os.RemoveAll(st.SocketDir) })
	a.sb.host.Release()

	adopt := func(rt Runtime, st AgentState, opts ...AgentOption) error {
		b, err := Adopt(context.Background(), rt, drv, st, append([]AgentOption{WithConfig(cfg)}, opts...)...)
		if err == nil {
			b.sb.detach()
		}
		return err
	}
	gone := &adoptRuntime{fakeRuntime: rt.fakeRuntime, err: fmt.Errorf("inspect container: %w: No such container: cid", ErrContainerNotFound)}
	err = adopt(gone, st)
	var lost *SandboxLostError
	if !errors.Is(err, ErrContainerNotFound) || !errors.As(err, &lost) || lost.Status != "" || !strings.Contains(lost.Error(), "No such container") {
		t.Errorf("gone: %v", err)
	}
	exited := &adoptRuntime{fakeRuntime: rt.fakeRuntime, mod: func(s *ContainerState) {
		s.Running, s.Status, s.ExitCode, s.OOMKilled, s.Reason = false, StatusExited, 137, true, "OOMKilled"
	}}
	err = adopt(exited, st)
	if !errors.As(err, &lost) || errors.Is(err, ErrContainerNotFound) || lost.Status != StatusExited || lost.ExitCode != 137 ||
		lost.Error() != "sandbox "+st.SandboxName+" lost: exited (exit code 137, OOM-killed, OOMKilled)" {
		t.Errorf("exited: %v", err)
	}
	for name, mod := range map[string]func(*ContainerState){
		"not ours":    func(s *ContainerState) { s.Labels = map[string]string{} },
		"other name":  func(s *ContainerState) { s.Name = "other" },
		"other image": func(s *ContainerState) { s.Image = "other" },
		"other mount": func(s *ContainerState) {
			s.Mounts = []Mount{{Source: "/tmp", Target: boundary.SocketDir, ReadOnly: true}}
		},
	} {
		if err := adopt(&adoptRuntime{fakeRuntime: rt.fakeRuntime, mod: mod}, st); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	var he *HardeningError
	if err := adopt(&adoptRuntime{fakeRuntime: rt.fakeRuntime, mod: func(s *ContainerState) { s.Privileged = true }}, st); !errors.As(err, &he) || he.Setting != "privileged" {
		t.Errorf("privileged: %v", err)
	}
	// A sandbox of an older sandbox-agent: its own profile, named by the
	// label set at its creation, adopts; the engine's default or a profile
	// the label does not name is refused.
	older := seccomp.Digest([]byte(`{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[]}`))
	if err := adopt(&adoptRuntime{fakeRuntime: rt.fakeRuntime, mod: func(s *ContainerState) {
		s.Seccomp, s.Labels = older, maps.Clone(s.Labels)
		s.Labels[labels.Seccomp] = older
	}}, st); err != nil {
		t.Errorf("an older profile of ours: %v", err)
	}
	for name, mod := range map[string]func(*ContainerState){
		"no profile":      func(s *ContainerState) { s.Seccomp = "" },
		"profile unnamed": func(s *ContainerState) { s.Seccomp = older },
		// A label naming what is not a digest (a Kubernetes Localhost path
		// other than ours) proves nothing.
		"not a digest": func(s *ContainerState) {
			s.Seccomp, s.Labels = "localhost/other.json", maps.Clone(s.Labels)
			s.Labels[labels.Seccomp] = "localhost/other.json"
		},
	} {
		if err := adopt(&adoptRuntime{fakeRuntime: rt.fakeRuntime, mod: mod}, st); !errors.As(err, &he) || he.Setting != "seccomp" {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := adopt(rt, st, WithResources(8<<30, 0)); !errors.As(err, &he) || he.Setting != "memory" {
		t.Errorf("other memory asked: %v", err)
	}
	for name, f := range map[string]func(*AgentState){
		"version":       func(s *AgentState) { s.Version = 2 },
		"driver":        func(s *AgentState) { s.Driver = "pi" },
		"no id":         func(s *AgentState) { s.SandboxID = "" },
		"port":          func(s *AgentState) { s.ModelPort = 70000 },
		"token no port": func(s *AgentState) { s.ModelPort = 0 },
		"egress none":   func(s *AgentState) { s.Egress = EgressNone },
		"long-lived":    func(s *AgentState) { s.LongLived = true },
		"short token":   func(s *AgentState) { s.ModelToken = "short" },
		"base URL":      func(s *AgentState) { s.ModelBaseURL = "http://127.0.0.1:4242/elsewhere" },
		"socket folder": func(s *AgentState) { s.SocketDir = "/tmp" },
		"bad allow":     func(s *AgentState) { s.AllowHosts, s.EgressPort = []string{"no such/host"}, 1 },
	} {
		bad := st
		f(&bad)
		if err := adopt(rt, bad); err == nil {
			t.Errorf("%s: adopted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	if _, err := os.Stat(st.SocketDir); err != nil {
		t.Errorf("a refused adoption removed the socket folder: %v", err)
	}
	if len(rt.removed) != 0 {
		t.Errorf("a refused adoption removed the container: %v", rt.removed)
	}
	// And after all that the state still adopts.
	if err := adopt(rt, st); err != nil {
		t.Errorf("adopt after refusals: %v", err)
	}
}

// An owner must be a plain name (it becomes a label; package gc keeps
// the sandboxes it owns).
func TestOwnerChecked(t *testing.T) {
	if err := (&agentOptions{owner: "bad owner!"}).check(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("owner with a blank: %v", err)
	}
}

// The relay the dead host started outlives it: when root still listens on
// the state's port, the adoption runs one exec (the settle) and no relay;
// a port free, or held by the sandbox's user, gets the relay, which
// judges it.
func TestAdoptRelay(t *testing.T) {
	for _, tc := range []struct {
		name, listeners string
		relay           bool
	}{
		{"alive", "listen 1092 0\nlisten 0016 1000\n", false}, // 4242 = 0x1092
		{"dead", "listen 0016 0\n", true},
		{"squatted", "listen 1092 1000\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := newAdoptRuntime(func(prompt string) (string, string, int) {
				return `{"session":"s1"}` + "\n" + `{"text":"ok"}` + "\n", "", 0
			})
			cfg := DefaultConfig()
			cfg.AuditRoot = filepath.Join(t.TempDir(), "audit")
			drv := func() *routedDriver {
				return &routedDriver{fakeDriver: fakeDriver{key: "sk-k"}, upstream: "http://127.0.0.1:9/v1"}
			}
			a, err := Start(context.Background(), rt, drv(), WithConfig(cfg))
			if err != nil {
				t.Fatal(err)
			}
			st := a.State()
			t.Cleanup(func() { os.RemoveAll(st.SocketDir) })
			a.sb.host.Release()
			rt.execs, rt.settled = nil, tc.listeners
			b, err := Adopt(context.Background(), rt, drv(), st, WithConfig(cfg))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			relay := false
			for _, x := range rt.execs {
				relay = relay || x.Cmd[0] == "perl"
			}
			if relay != tc.relay || rt.settles != 1 || len(rt.execs) != 1+btoi(tc.relay) {
				t.Errorf("relay ran %v (want %v), settles %d, execs %d", relay, tc.relay, rt.settles, len(rt.execs))
			}
			if got := b.State(); got.ModelPort != 4242 || got.ModelBaseURL != st.ModelBaseURL {
				t.Errorf("adopted state: port %d, base %s", got.ModelPort, got.ModelBaseURL)
			}
			if got := viaSocket(t, st.SocketDir, st.ModelToken); got == http.StatusUnauthorized {
				t.Errorf("the state's token through the reopened socket: %d", got)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
