package sandboxagent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/internal/boundary"
	"github.com/sandbox-agent/sandbox-agent/metering"
)

// routedDriver is a fakeDriver that can be pointed at the model proxy.
type routedDriver struct {
	fakeDriver
	upstream string
	routedTo string // the base URL Routed was given
}

func (d *routedDriver) ModelRoute() (ModelRoute, error) {
	return ModelRoute{Upstream: d.upstream, Key: d.key}, nil
}

func (d *routedDriver) Routed(baseURL, token string) Driver {
	c := &routedDriver{fakeDriver: fakeDriver{key: token}, upstream: d.upstream, routedTo: baseURL}
	return c
}

// relayRuntime answers forward.pl with a port and otherwise behaves like
// cliRuntime.
func relayRuntime(out func(prompt string) (string, string, int)) *fakeRuntime {
	f := cliRuntime(out)
	inner := f.exec
	f.exec = func(ctx context.Context, req RuntimeExec) (int, error) {
		if req.Cmd[0] == "perl" {
			if req.User != "0" || len(req.Cmd) < 4 || !strings.HasSuffix(req.Cmd[3], ".sock") {
				return 1, errors.New("relay not started as root with forward.pl")
			}
			for _, a := range req.Cmd[3:] {
				name, _, _ := strings.Cut(a, "=")
				io.WriteString(req.Stdout, name+" 4242\n")
			}
			return 0, nil
		}
		return inner(ctx, req)
	}
	return f
}

// tunnelRuntime is a fakeRuntime without bind mounts: the sandbox's
// relay is the exec tunnel.
type tunnelRuntime struct{ *fakeRuntime }

func (tunnelRuntime) Features() RuntimeFeatures { return RuntimeFeatures{} }

// A runtime that cannot mount the host's sockets gets the exec tunnel:
// no mount in the spec, tunnel.pl as one long exec of the sandbox's user
// (its ports are the sandbox's URLs) until Close; a failed exec is
// ErrNetwork with the perl hint, a refused one the runtime's error.
func TestSandboxTunnelWithoutBindMounts(t *testing.T) {
	tunnel := func(ctx context.Context, req RuntimeExec) (int, error) {
		if req.Cmd[0] != "perl" {
			return 0, nil
		}
		for _, name := range req.Cmd[3:] {
			io.WriteString(req.Stdout, name+" 4243\n")
		}
		io.Copy(io.Discard, req.Stdin) // until the tunnel closes
		return 0, nil
	}
	rt := tunnelRuntime{&fakeRuntime{exec: tunnel}}
	sb, err := NewSandbox(context.Background(), rt, SandboxOptions{Image: "img", AllowHosts: []string{"a.org"}})
	if err != nil {
		t.Fatal(err)
	}
	if m := rt.created[0].Mounts; len(m) != 0 {
		t.Errorf("mounts %v on a runtime without bind mounts", m)
	}
	if x := rt.execs[0]; x.User != "" || x.Stdin == nil || strings.Join(x.Cmd[3:], " ") != "egress" {
		t.Errorf("tunnel exec %q as %q", x.Cmd[3:], x.User)
	}
	if got := sb.env["HTTPS_PROXY"]; got != "http://127.0.0.1:4243" {
		t.Errorf("HTTPS_PROXY %q", got)
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		err  error
		is   error
		hint bool
	}{{errors.New("no exec"), ErrNetwork, true}, {ErrUnsupportedByRuntime, ErrUnsupportedByRuntime, false}} {
		rt := tunnelRuntime{&fakeRuntime{exec: func(_ context.Context, req RuntimeExec) (int, error) {
			if req.Cmd[0] != "perl" {
				return 0, nil
			}
			return -1, tc.err
		}}}
		_, err := NewSandbox(context.Background(), rt, SandboxOptions{Image: "img", AllowHosts: []string{"a.org"}})
		if !errors.Is(err, tc.is) || strings.Contains(fmt.Sprint(err), "needs perl") != tc.hint {
			t.Errorf("exec error %v: got %v", tc.err, err)
		}
	}
}

// An agent whose driver is a ModelRouter gets no network, a read-only
// mount of its socket folder, and a CLI pointed at the relay with a
// token; the model proxy behind the socket swaps the token for the key;
// Close revokes it and removes the folder.
func TestAgentRoutedThroughModelProxy(t *testing.T) {
	const key = "sk-real-key-0123456789"
	var mu sync.Mutex
	var gotKey string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		gotKey = r.Header.Get("X-Api-Key")
		mu.Unlock()
		io.WriteString(w, `{"usage":{"input_tokens":3,"output_tokens":2}}`)
	}))
	defer up.Close()
	rt := relayRuntime(func(prompt string) (string, string, int) {
		return `{"session":"s1"}` + "\n" + `{"text":"ok"}` + "\n", "", 0
	})
	drv := &routedDriver{fakeDriver: fakeDriver{key: key}, upstream: up.URL + "/v1"}
	cfg := DefaultConfig()
	cfg.AuditRoot = filepath.Join(t.TempDir(), "audit")
	a, err := Start(context.Background(), rt, drv, WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	spec := rt.created[0]
	if spec.NetworkMode != "none" || len(spec.Mounts) != 1 || !spec.Mounts[0].ReadOnly || spec.Mounts[0].Target != boundary.SocketDir {
		t.Fatalf("network %q mounts %+v", spec.NetworkMode, spec.Mounts)
	}
	routed := a.Driver().(*routedDriver)
	if routed.routedTo != "http://127.0.0.1:4242/v1" || !strings.HasPrefix(routed.key, "sa-proxy-") {
		t.Fatalf("routed to %q with %q", routed.routedTo, routed.key)
	}
	if _, err := a.Ask(context.Background(), "hi"); err != nil {
		t.Fatal(err)
	}
	for _, x := range rt.execs {
		if strings.Contains(strings.Join(append(x.Cmd, x.Env...), " "), key) {
			t.Errorf("the key reached the container: %v %v", x.Cmd, x.Env)
		}
	}

	// What the relay would do: talk HTTP over the socket with the token.
	sock := filepath.Join(spec.Mounts[0].Source, "model.sock")
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o666 {
		t.Fatalf("socket %s: %v %v", sock, fi, err)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	req, _ := http.NewRequest("POST", "http://sandbox/v1/messages", strings.NewReader("{}"))
	req.Header.Set("X-Api-Key", routed.key)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	if resp.StatusCode != 200 || gotKey != key {
		t.Errorf("through the proxy: status %d, upstream saw key %q", resp.StatusCode, gotKey)
	}
	mu.Unlock()
	// The proxy logs once its handler returns, just after the client has
	// the whole response.
	var data []byte
	for i := 0; i < 200; i++ {
		if data, err = os.ReadFile(filepath.Join(a.NetworkAuditDir(), "model.jsonl")); err == nil && len(data) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil || !strings.Contains(string(data), `"path":"/v1/messages"`) || strings.Contains(string(data), key) || strings.Contains(string(data), routed.key) {
		t.Errorf("model.jsonl: %v %s", err, data)
	}

	a.Close()
	if _, err := os.Stat(spec.Mounts[0].Source); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket folder left behind: %v", err)
	}
	req, _ = http.NewRequest("POST", "http://sandbox/v1/messages", strings.NewReader("{}"))
	req.Header.Set("X-Api-Key", routed.key)
	rec := httptest.NewRecorder()
	a.proxy.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("after Close the token gets %d, want 401", rec.Code)
	}
}

// Policies that cannot work are refused before anything starts.
func TestAgentEgressErrors(t *testing.T) {
	cfg := DefaultConfig()
	cfg.AuditEnabled = false
	for _, tc := range []struct {
		name string
		drv  Driver
		opts []AgentOption
	}{
		{"none leaves no way to the model", &routedDriver{upstream: "http://127.0.0.1:1"}, []AgentOption{WithEgress(EgressNone)}},
		{"unknown policy", &routedDriver{upstream: "http://127.0.0.1:1"}, []AgentOption{WithEgress("wide")}},
		{"bad allow host", &routedDriver{upstream: "http://127.0.0.1:1"}, []AgentOption{WithEgress(EgressModel, "http://x/")}},
		{"driver not routable under model", &fakeDriver{key: "k-1234"}, nil},
		{"bad upstream", &routedDriver{upstream: "ftp://x"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := relayRuntime(nil)
			_, err := Start(context.Background(), rt, tc.drv, append([]AgentOption{WithConfig(cfg)}, tc.opts...)...)
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("err = %v, want ErrInvalidArgument", err)
			}
			if len(rt.created) != 0 {
				t.Errorf("a container was created")
			}
		})
	}
}

// Egress maps onto the engine's network; an explicit Network wins; an
// allow-list adds the egress relay and proxy variables to every exec.
func TestSandboxEgressNetwork(t *testing.T) {
	for _, tc := range []struct {
		egress  Egress
		network string
		want    string
	}{
		{"", "", "none"}, {EgressNone, "", "none"}, {EgressModel, "", "none"}, {EgressOpen, "", "bridge"}, {EgressModel, "host", "host"},
	} {
		spec, err := containerSpec(SandboxOptions{Image: "i", Egress: tc.egress, Network: tc.network}, DefaultConfig())
		if err != nil || spec.NetworkMode != tc.want {
			t.Errorf("egress %q network %q: %q %v, want %q", tc.egress, tc.network, spec.NetworkMode, err, tc.want)
		}
	}
	rt := relayRuntime(nil)
	sb, err := NewSandbox(context.Background(), rt, SandboxOptions{Image: "i", AllowHosts: []string{"registry.npmjs.org"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if _, err := sb.Run(context.Background(), ExecRequest{Cmd: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	last := rt.execs[len(rt.execs)-1]
	if !strings.Contains(strings.Join(last.Env, " "), "HTTPS_PROXY=http://127.0.0.1:4242") {
		t.Errorf("exec env %v lacks the proxy variables", last.Env)
	}
	if _, err := NewSandbox(context.Background(), rt, SandboxOptions{Image: "i", AllowHosts: []string{"*"}}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("allow host *: %v", err)
	}
}

// A bind mount the engine did not record read-only (or dropped) is a
// hardening failure: the sandbox could write into a host folder. Nothing
// is left behind.
func TestSandboxMountMustStayReadOnly(t *testing.T) {
	for name, mutate := range map[string]func(*ContainerState){
		"writable": func(s *ContainerState) { s.Mounts[0].ReadOnly = false },
		"dropped":  func(s *ContainerState) { s.Mounts = nil },
	} {
		t.Run(name, func(t *testing.T) {
			f := relayRuntime(nil)
			f.inspect = func(spec ContainerSpec) ContainerState {
				st := recorded(spec)
				st.Mounts = append([]Mount(nil), spec.Mounts...)
				mutate(&st)
				return st
			}
			_, err := NewSandbox(context.Background(), f, SandboxOptions{Image: "img", AllowHosts: []string{"a.org"}})
			var he *HardeningError
			if !errors.As(err, &he) || he.Setting != "mount" {
				t.Fatalf("err = %v, want a HardeningError on mount", err)
			}
			if _, err := os.Stat(f.created[0].Mounts[0].Source); !errors.Is(err, os.ErrNotExist) || len(f.removed) != 1 {
				t.Errorf("left behind: socket folder %v, removed %v", err, f.removed)
			}
		})
	}
}

// unroutable is a ModelRouter whose endpoint is unknown (a built-in
// provider): under open it runs with its own key, under model it fails.
type unroutable struct{ routedDriver }

func (d *unroutable) ModelRoute() (ModelRoute, error) {
	return ModelRoute{}, fmt.Errorf("%w: endpoint unknown", ErrInvalidArgument)
}

func TestAgentUnknownRouteFallsBackOnlyUnderOpen(t *testing.T) {
	cfg := DefaultConfig()
	cfg.AuditEnabled = false
	drv := &unroutable{routedDriver{fakeDriver: fakeDriver{key: "sk-own-key-1234"}}}
	if _, err := Start(context.Background(), relayRuntime(nil), drv, WithConfig(cfg)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("model: %v, want ErrInvalidArgument", err)
	}
	rt := relayRuntime(nil)
	a, err := Start(context.Background(), rt, drv, WithConfig(cfg), WithEgress(EgressOpen))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Driver() != Driver(drv) || rt.created[0].NetworkMode != "bridge" || len(rt.created[0].Mounts) != 0 {
		t.Errorf("open: driver %T, network %q, mounts %v", a.Driver(), rt.created[0].NetworkMode, rt.created[0].Mounts)
	}
}

// A denial during a turn is an egress_denied event of that turn, and a
// callback may close the agent on it without a deadlock; the real key a
// routed CLI might echo is still redacted from the audit.
func TestAgentEgressDeniedEventAndClose(t *testing.T) {
	const key = "sk-real-key-0123456789"
	var a *Agent
	var rt *fakeRuntime
	rt = relayRuntime(func(prompt string) (string, string, int) {
		// What the relay would carry: a CONNECT to the egress proxy.
		c, err := net.Dial("unix", filepath.Join(rt.created[0].Mounts[0].Source, "egress.sock"))
		if err != nil {
			return "", err.Error(), 1
		}
		io.WriteString(c, "CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n")
		status, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if !strings.Contains(status, " 403 ") {
			return "", "egress proxy said " + status, 1
		}
		return `{"session":"s1"}` + "\n" + `echoed ` + key + "\n" + `{"text":"ok"}` + "\n", "", 0
	})
	cfg := DefaultConfig()
	cfg.AuditRoot = filepath.Join(t.TempDir(), "audit")
	var err error
	a, err = Start(context.Background(), rt, &routedDriver{fakeDriver: fakeDriver{key: key}, upstream: "http://127.0.0.1:1"},
		WithConfig(cfg), WithEgress(EgressModel, "allowed.example"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var denied []Event
	var turnErr error
	go func() {
		defer close(done)
		_, turnErr = a.Stream(context.Background(), "go", func(e Event) {
			if e.Kind == KindEgressDenied {
				denied = append(denied, e)
				a.Close()
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("deadlock: the turn did not return after a callback closed the agent")
	}
	if turnErr != nil {
		t.Fatal(turnErr)
	}
	if len(denied) != 1 || denied[0].Payload.Host != "evil.example:443" || denied[0].Turn != 1 {
		t.Fatalf("denied events %+v", denied)
	}
	filepath.Walk(cfg.AuditRoot, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), key) {
				t.Errorf("%s holds the real key", p)
			}
		}
		return nil
	})
	data, _ := os.ReadFile(filepath.Join(a.NetworkAuditDir(), "egress.jsonl"))
	if !strings.Contains(string(data), `"host":"evil.example"`) {
		t.Errorf("egress.jsonl: %s", data)
	}
}

// A turn's model requests are counted on its result, as the proxy measured
// them; a meter's budget stops the turn with metering.ErrBudgetExceeded
// once spent (the upstream never sees the refused request), and raising
// it lets the next turn through.
func TestAgentTurnUsageAndBudget(t *testing.T) {
	var forwarded atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		forwarded.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"model":"m-20260101","usage":{"input_tokens":30,"output_tokens":20,"cache_read_input_tokens":10}}`)
	}))
	defer up.Close()
	var client *http.Client
	var token string
	var codes []int
	// The fake CLI makes two model requests per turn through the relay's
	// socket, as a real one would, and reports the last status it got.
	rt := relayRuntime(func(prompt string) (string, string, int) {
		codes = codes[:0]
		for range 2 {
			req, _ := http.NewRequest("POST", "http://sandbox/v1/messages", strings.NewReader("{}"))
			req.Header.Set("X-Api-Key", token)
			resp, err := client.Do(req)
			if err != nil {
				return "", err.Error(), 1
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes = append(codes, resp.StatusCode)
		}
		return `{"session":"s1"}` + "\n" + `{"text":"ok"}` + "\n", "", 0
	})
	drv := &routedDriver{fakeDriver: fakeDriver{key: "sk-real-key-0123456789"}, upstream: up.URL + "/v1"}
	meter, err := metering.NewMeter(metering.MeterOptions{Prices: metering.Prices{"m": {Input: 1, Output: 2, CacheRead: 0.5}}, Budget: metering.Budget{Tokens: 150}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.AuditRoot = filepath.Join(t.TempDir(), "audit")
	a, err := Start(context.Background(), rt, drv, WithConfig(cfg), WithMeter(meter))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	sock := filepath.Join(rt.created[0].Mounts[0].Source, "model.sock")
	client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	token = a.Driver().(*routedDriver).key

	// Turn 1: two requests of 50 tokens each, 40 uncached input.
	res, err := a.Stream(context.Background(), "one", nil)
	want := metering.Spent{Usage: metering.Usage{InputTokens: 80, OutputTokens: 40, CacheReadTokens: 20}, CostUSD: (60*1 + 40*2 + 20*0.5) / 1e6, Requests: 2}
	if err != nil || res.Usage == nil || *res.Usage != want {
		t.Fatalf("turn 1: %v, usage %+v, want %+v", err, res.Usage, want)
	}
	// Turn 2: the first request reaches 150 tokens, the second is refused.
	res, err = a.Stream(context.Background(), "two", nil)
	if !errors.Is(err, metering.ErrBudgetExceeded) || len(codes) != 2 || codes[1] != http.StatusPaymentRequired || forwarded.Load() != 3 {
		t.Fatalf("turn 2: %v, statuses %v, upstream saw %d; want ErrBudgetExceeded after one forwarded request", err, codes, forwarded.Load())
	}
	if res.Usage == nil || res.Usage.Requests != 1 {
		t.Errorf("turn 2 usage %+v", res.Usage)
	}
	data, _ := os.ReadFile(filepath.Join(a.NetworkAuditDir(), "model.jsonl"))
	if !strings.Contains(string(data), `"budget":true`) {
		t.Errorf("no budget refusal in model.jsonl: %s", data)
	}
	// Raised: the agent goes on.
	if err := meter.SetBudget(metering.Budget{Tokens: 1000}); err != nil {
		t.Fatal(err)
	}
	if res, err = a.Stream(context.Background(), "three", nil); err != nil || res.Usage.Requests != 2 {
		t.Fatalf("after raising the budget: %v %+v", err, res.Usage)
	}
}
