package sandboxagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/internal/guest"
	"github.com/sandbox-agent/sandbox-agent/internal/hardening"
	"github.com/sandbox-agent/sandbox-agent/seccomp"
)

// fakeRuntime records calls; exec behaviour is scripted per test.
type fakeRuntime struct {
	mu      sync.Mutex
	created []ContainerSpec
	removed []string
	execs   []RuntimeExec
	inspect func(spec ContainerSpec) ContainerState
	exec    func(ctx context.Context, req RuntimeExec) (int, error)
	list    []ContainerState
	// createErr, when set, may fail Create.
	createErr func(spec ContainerSpec) error
	lines     []string // stdin lines a long-lived fake CLI read (llRuntime)
}

func (f *fakeRuntime) Info(context.Context) (EngineInfo, error) { return EngineInfo{Name: "fake"}, nil }
func (f *fakeRuntime) Create(_ context.Context, spec ContainerSpec) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.createErr != nil {
		if err := f.createErr(spec); err != nil {
			return "", err
		}
	}
	f.created = append(f.created, spec)
	return "cid", nil
}
func (f *fakeRuntime) Start(context.Context, string) error { return nil }
func (f *fakeRuntime) Inspect(context.Context, string) (ContainerState, error) {
	f.mu.Lock()
	spec := f.created[len(f.created)-1]
	f.mu.Unlock()
	if f.inspect != nil {
		return f.inspect(spec), nil
	}
	return recorded(spec), nil
}
func (f *fakeRuntime) Exec(ctx context.Context, _ string, req RuntimeExec) (int, error) {
	f.mu.Lock()
	f.execs = append(f.execs, req)
	f.mu.Unlock()
	return f.exec(ctx, req)
}
func (f *fakeRuntime) CopyTo(context.Context, string, string, io.Reader) error { return nil }
func (f *fakeRuntime) CopyFrom(context.Context, string, string) (io.ReadCloser, error) {
	return nil, ErrPathNotFound
}
func (f *fakeRuntime) Kill(context.Context, string) error { return nil }
func (f *fakeRuntime) Remove(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, id)
	return nil
}
func (f *fakeRuntime) List(context.Context, map[string]string) ([]ContainerState, error) {
	return f.list, nil
}

// recorded is what a faithful engine reports for spec.
func recorded(s ContainerSpec) ContainerState {
	return ContainerState{
		Running: true, Privileged: s.Privileged, CapDrop: s.CapDrop, CapAdd: s.CapAdd, NoNewPrivileges: s.NoNewPrivileges,
		ReadonlyRootfs: s.ReadonlyRootfs, Init: s.Init, PidsLimit: s.PidsLimit, MemoryBytes: s.MemoryBytes,
		MemorySwap: s.MemorySwap, NanoCPUs: s.NanoCPUs, NetworkMode: s.NetworkMode, Labels: s.Labels, Mounts: s.Mounts, Seccomp: seccomp.Digest(s.Seccomp),
		Runtime: s.Runtime, DiskBytes: s.DiskBytes,
	}
}

func TestContainerSpecDefaultsAreHardened(t *testing.T) {
	spec, err := containerSpec(SandboxOptions{Image: "img"}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if spec.Privileged || !spec.Init || !spec.AutoRemove || spec.NetworkMode != "none" ||
		spec.PidsLimit != defaultPidsLimit || spec.MemoryBytes != defaultMemoryBytes || spec.MemorySwap != spec.MemoryBytes ||
		spec.NanoCPUs != int64(defaultCPUs*1e9) {
		t.Errorf("spec not hardened: %+v", spec)
	}
	if strings.Join(spec.CapDrop, ",") != "ALL" || hardening.NormCaps(spec.CapAdd) != hardening.NormCaps(DefaultCaps) {
		t.Errorf("caps: drop %v add %v", spec.CapDrop, spec.CapAdd)
	}
	if !spec.NoNewPrivileges || len(spec.Files) != 0 {
		t.Errorf("no-new-privileges %v, files %v", spec.NoNewPrivileges, spec.Files)
	}
	if !bytes.Equal(spec.Seccomp, seccomp.Profile()) {
		t.Errorf("seccomp profile: %.80s…, want sandbox-agent's", spec.Seccomp)
	}
	for _, o := range []SandboxOptions{{Image: "img", EngineSeccomp: true}, {Image: "img", Privileged: true}} {
		if spec, err := containerSpec(o, DefaultConfig()); err != nil || spec.Seccomp != nil {
			t.Errorf("%+v: seccomp %.40s… %v, want the engine's", o, spec.Seccomp, err)
		}
	}
	if _, err := strconv.ParseInt(spec.Labels[LabelCreated], 10, 64); err != nil {
		t.Errorf("created label %q is not Unix seconds", spec.Labels[LabelCreated])
	}
	for _, l := range []string{LabelManaged, LabelCreated, LabelKeepalive, LabelHost, LabelPID} {
		if spec.Labels[l] == "" {
			t.Errorf("label %s missing", l)
		}
	}
	if spec.Labels[LabelKeepalive] != "3600" || strings.Join(spec.Cmd[len(spec.Cmd)-3:], " ") != "3600 5 86400" {
		t.Errorf("keepalive: label %s cmd %v", spec.Labels[LabelKeepalive], spec.Cmd[len(spec.Cmd)-3:])
	}
	if spec.Labels[LabelMaxLifetime] != "86400" {
		t.Errorf("max lifetime label %q, want the default 24 h", spec.Labels[LabelMaxLifetime])
	}
	if !strings.HasPrefix(spec.Name, "sandbox-agent-") || len(spec.Name) != len("sandbox-agent-")+16 {
		t.Errorf("name %q", spec.Name)
	}
}

// The watchdog's third argument and the label are the lifetime in
// seconds: the sandbox's own, else the Config's; 0 is none.
func TestContainerSpecMaxLifetime(t *testing.T) {
	cfg := DefaultConfig()
	for _, c := range []struct {
		sandbox, config time.Duration
		want            string
	}{
		{0, 24 * time.Hour, "86400"},
		{6 * time.Second, 24 * time.Hour, "6"},
		{-1, 24 * time.Hour, "0"},
		{0, 0, "0"},
		{300 * time.Millisecond, 0, "1"},
	} {
		cfg.MaxLifetime = c.config
		spec, err := containerSpec(SandboxOptions{Image: "img", MaxLifetime: c.sandbox}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := spec.Cmd[len(spec.Cmd)-1]; got != c.want || spec.Labels[LabelMaxLifetime] != c.want {
			t.Errorf("sandbox %v, config %v: argument %s, label %s; want %s", c.sandbox, c.config, got, spec.Labels[LabelMaxLifetime], c.want)
		}
	}
}

func TestContainerSpecLoosening(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte("PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	spec, err := containerSpec(SandboxOptions{
		Image: "img", Privileged: true, AllowNewPrivileges: true, NoInit: true, Caps: []string{},
		Network: "host", CPUs: 0.5, MemoryBytes: 1 << 20, PidsLimit: 10, Keepalive: 3 * time.Second,
		Env: map[string]string{"A": "1"}, TrustCACert: ca,
	}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if !spec.Privileged || spec.Init || spec.NoNewPrivileges || len(spec.CapAdd) != 0 || spec.NetworkMode != "host" ||
		spec.NanoCPUs != 5e8 || spec.PidsLimit != 10 || spec.MemorySwap != 1<<20 || spec.Labels[LabelKeepalive] != "3" {
		t.Errorf("spec %+v", spec)
	}
	if strings.Join(spec.Env, " ") != "A=1 NODE_EXTRA_CA_CERTS="+caPath+" SSL_CERT_FILE="+caPath {
		t.Errorf("env %v", spec.Env)
	}
	if len(spec.Files) != 1 || spec.Files[0].Path != caPath || string(spec.Files[0].Data) != "PEM" || spec.Files[0].Mode != 0o644 {
		t.Errorf("files %+v: want the CA bundle at %s", spec.Files, caPath)
	}
	if _, err := containerSpec(SandboxOptions{Image: "img", TrustCACert: "/nonexistent/ca.pem"}, DefaultConfig()); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("unreadable CA: %v", err)
	}
	if _, err := containerSpec(SandboxOptions{Image: "img", Env: map[string]string{"A=B": "1"}}, DefaultConfig()); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("bad env name: %v", err)
	}
}

func TestNewSandboxRejectsSettingThatDidNotStick(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*ContainerState)
		setting string
	}{
		{"privileged", func(s *ContainerState) { s.Privileged = true }, "privileged"},
		{"caps", func(s *ContainerState) { s.CapDrop = nil }, "cap_drop"},
		{"extra cap", func(s *ContainerState) { s.CapAdd = append(s.CapAdd, "SYS_ADMIN") }, "cap_add"},
		{"nnp", func(s *ContainerState) { s.NoNewPrivileges = false }, "no_new_privileges"},
		{"pids", func(s *ContainerState) { s.PidsLimit = 0 }, "pids_limit"},
		{"pids looser", func(s *ContainerState) { s.PidsLimit++ }, "pids_limit"},
		{"memory", func(s *ContainerState) { s.MemoryBytes = 0 }, "memory"},
		{"swap", func(s *ContainerState) { s.MemorySwap = -1 }, "memory_swap"},
		{"cpus", func(s *ContainerState) { s.NanoCPUs = 0 }, "nano_cpus"},
		{"init", func(s *ContainerState) { s.Init = false }, "init"},
		{"network", func(s *ContainerState) { s.NetworkMode = "bridge" }, "network_mode"},
		{"seccomp dropped", func(s *ContainerState) { s.Seccomp = "" }, "seccomp"},
		{"seccomp other", func(s *ContainerState) { s.Seccomp = seccomp.Digest([]byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`)) }, "seccomp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeRuntime{inspect: func(spec ContainerSpec) ContainerState {
				st := recorded(spec)
				tt.mutate(&st)
				return st
			}}
			_, err := NewSandbox(context.Background(), f, SandboxOptions{Image: "img"})
			var he *HardeningError
			if !errors.As(err, &he) || !errors.Is(err, ErrHardening) || he.Setting != tt.setting {
				t.Fatalf("err = %v, want HardeningError on %s", err, tt.setting)
			}
			if len(f.removed) != 1 {
				t.Errorf("container not removed after failed start: %v", f.removed)
			}
		})
	}
	// Engines spell capabilities differently; that is not a failure.
	f := &fakeRuntime{inspect: func(spec ContainerSpec) ContainerState {
		st := recorded(spec)
		st.CapAdd = []string{"CAP_SETUID", "cap_chown", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID"}
		return st
	}}
	if _, err := NewSandbox(context.Background(), f, SandboxOptions{Image: "img"}); err != nil {
		t.Fatalf("CAP_ spelling: %v", err)
	}
}

// The OCI runtime comes from the options, else the config; the engine
// must report it back; a name that is no runtime's is refused.
func TestOCIRuntime(t *testing.T) {
	cfg := DefaultConfig()
	cfg.OCIRuntime = "runsc"
	for _, tc := range []struct {
		opts SandboxOptions
		cfg  Config
		want string
	}{
		{SandboxOptions{Image: "img"}, DefaultConfig(), ""},
		{SandboxOptions{Image: "img"}, cfg, "runsc"},
		{SandboxOptions{Image: "img", OCIRuntime: "kata"}, cfg, "kata"},
	} {
		spec, err := containerSpec(tc.opts, tc.cfg)
		if err != nil || spec.Runtime != tc.want {
			t.Errorf("%+v with config %q: runtime %q %v, want %q", tc.opts, tc.cfg.OCIRuntime, spec.Runtime, err, tc.want)
		}
	}
	for _, bad := range []string{"-x", "../runsc", "run sc", "/usr/bin/runsc", strings.Repeat("a", 64)} {
		if _, err := containerSpec(SandboxOptions{Image: "img", OCIRuntime: bad}, DefaultConfig()); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%q: %v, want ErrInvalidArgument", bad, err)
		}
	}
	f := &fakeRuntime{inspect: func(spec ContainerSpec) ContainerState {
		st := recorded(spec)
		st.Runtime = "runc"
		return st
	}}
	var he *HardeningError
	if _, err := NewSandbox(context.Background(), f, SandboxOptions{Image: "img", OCIRuntime: "runsc"}); !errors.As(err, &he) || he.Setting != "oci_runtime" {
		t.Errorf("engine ran runc for runsc: %v", err)
	}
	if _, err := NewSandbox(context.Background(), f, SandboxOptions{Image: "img"}); err != nil {
		t.Errorf("no runtime asked, the engine's default recorded: %v", err)
	}
}

func TestExecTimeoutKillsTaggedTree(t *testing.T) {
	f := &fakeRuntime{}
	release := make(chan struct{})
	var mu sync.Mutex
	var tag string
	f.exec = func(ctx context.Context, req RuntimeExec) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if req.Cmd[0] == "/bin/sh" && len(req.Cmd) == 3 { // the limit counters: none hit
			return 0, nil
		}
		if req.Cmd[0] == "/bin/sh" && req.Cmd[3] == "sandbox-agent-kill" {
			if req.Cmd[4] != tag {
				t.Errorf("kill script got tag %q, command had %q", req.Cmd[4], tag)
			}
			close(release)
			return 0, nil
		}
		for _, e := range req.Env {
			if v, ok := strings.CutPrefix(e, execTagVar+"="); ok {
				tag = v
			}
		}
		mu.Unlock()
		defer mu.Lock()
		io.WriteString(req.Stdout, "partial")
		select {
		case <-release: // killed: the stream ends
			return 137, nil
		case <-ctx.Done():
			return -1, ctx.Err()
		}
	}
	sb, err := NewSandbox(context.Background(), f, SandboxOptions{Image: "img"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := sb.Run(context.Background(), ExecRequest{Cmd: []string{"sleep", "100"}, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !res.TimedOut || res.ExitCode != exitCodeTimeout || string(res.Stdout) != "partial" || tag == "" {
		t.Fatalf("res %+v tag %q", res, tag)
	}
}

// After a fork bomb the engine may fail to start the kill script at all
// (exit 126) or the script cannot fork to list the processes (exit 2)
// until the bomb's processes are reaped: the second try waits for one
// that works instead of reporting survivors.
func TestExecTimeoutKillRetriesUnstartedScript(t *testing.T) {
	for _, tc := range []struct {
		name string
		code int
		out  string
	}{
		{"setns", 126, "OCI runtime exec failed: error executing setns process"},
		{"no fork to list", killNoFork, "sandbox-agent-kill: 16: Cannot fork\ncannot list the processes (no pid to fork?)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeRuntime{}
			release := make(chan struct{})
			var mu sync.Mutex
			kills := 0
			f.exec = func(ctx context.Context, req RuntimeExec) (int, error) {
				mu.Lock()
				defer mu.Unlock()
				switch {
				case req.Cmd[0] == "/bin/sh" && len(req.Cmd) == 3: // the limit counters: none hit
					return 0, nil
				case len(req.Cmd) > 3 && req.Cmd[3] == "sandbox-agent-scan": // no bomb to find
					io.WriteString(req.Stdout, "self 9\ncurrent 2\nrefused 0\n")
					return 0, nil
				case len(req.Cmd) > 3 && req.Cmd[3] == "sandbox-agent-kill":
					if kills++; kills <= 3 {
						io.WriteString(req.Stdout, tc.out)
						return tc.code, nil
					}
					close(release)
					return 0, nil
				}
				mu.Unlock()
				defer mu.Lock()
				select {
				case <-release:
					return 137, nil
				case <-ctx.Done():
					return -1, ctx.Err()
				}
			}
			sb, err := NewSandbox(context.Background(), f, SandboxOptions{Image: "img", PidsLimit: 64})
			if err != nil {
				t.Fatal(err)
			}
			res, err := sb.Run(context.Background(), ExecRequest{Cmd: []string{"sleep", "100"}, Timeout: 50 * time.Millisecond})
			mu.Lock()
			defer mu.Unlock()
			if err != nil || !res.TimedOut || kills != 4 {
				t.Fatalf("err %v, res %+v, kill attempts %d; want no error after 4 attempts", err, res, kills)
			}
		})
	}
}

// A kill that fails for good while the counters show refused forks is
// reported as the pids limit too: that is why the processes survived.
func TestExecTimeoutKillFailureReportsPidsLimit(t *testing.T) {
	f := &fakeRuntime{}
	var mu sync.Mutex
	f.exec = func(ctx context.Context, req RuntimeExec) (int, error) {
		mu.Lock()
		switch {
		case req.Cmd[0] == "/bin/sh" && len(req.Cmd) == 3: // the counters: refused forks
			io.WriteString(req.Stdout, "oom 0\npids 40\n")
			mu.Unlock()
			return 0, nil
		case len(req.Cmd) > 3 && req.Cmd[3] == "sandbox-agent-scan": // no bomb to find
			io.WriteString(req.Stdout, "self 9\ncurrent 2\nrefused 0\n")
			mu.Unlock()
			return 0, nil
		case len(req.Cmd) > 3 && req.Cmd[3] == "sandbox-agent-kill":
			io.WriteString(req.Stdout, "some survive")
			mu.Unlock()
			return 1, nil
		}
		mu.Unlock()
		<-ctx.Done()
		return -1, ctx.Err()
	}
	sb, err := NewSandbox(context.Background(), f, SandboxOptions{Image: "img", PidsLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	res, err := sb.Run(context.Background(), ExecRequest{Cmd: []string{"sh", "-c", "bomb"}, Timeout: 50 * time.Millisecond})
	var re *ResourceError
	if !errors.Is(err, ErrPidsLimit) || !errors.As(err, &re) || re.Events != 40 || !strings.Contains(err.Error(), "could not all be killed") || !res.TimedOut {
		t.Fatalf("err %v, res %+v: want the pids limit and the failed kill", err, res)
	}
}

func TestExecValidation(t *testing.T) {
	f := &fakeRuntime{exec: func(context.Context, RuntimeExec) (int, error) { return 0, nil }}
	sb, err := NewSandbox(context.Background(), f, SandboxOptions{Image: "img"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Run(context.Background(), ExecRequest{}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("empty cmd: %v", err)
	}
	if _, err := sb.Run(context.Background(), ExecRequest{Cmd: []string{"x"}, Env: map[string]string{execTagVar: "spoof"}}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("spoofed tag: %v", err)
	}
	for _, p := range []string{"", "relative", "/"} {
		if _, err := sb.Download(context.Background(), p, t.TempDir()); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("download %q: %v", p, err)
		}
	}
	sb.Close()
	if _, err := sb.Exec(context.Background(), []string{"true"}); !errors.Is(err, ErrClosed) {
		t.Errorf("after close: %v", err)
	}
	// Copies check their arguments first, then find the sandbox closed.
	ctx := context.Background()
	if err := sb.Upload(ctx, "/nonexistent-source", "/x"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("upload of a missing source after close: %v", err)
	}
	if _, err := sb.UploadTar(ctx, "/x", strings.NewReader("not a tar")); !errors.Is(err, ErrUnsafeArchive) { // read before the closed sandbox is seen
		t.Errorf("upload of a broken tar after close: %v", err)
	}
	if _, err := sb.ReadFile(ctx, "relative", 0); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("read of a relative path after close: %v", err)
	}
	for name, err := range map[string]error{
		"upload":   sb.Upload(ctx, t.TempDir(), "/x"),
		"write":    sb.WriteFile(ctx, "/x", nil, 0o644),
		"download": func() error { _, err := sb.Download(ctx, "/x", t.TempDir()); return err }(),
		"read":     func() error { _, err := sb.ReadFile(ctx, "/x", 0); return err }(),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after close: %v", name, err)
		}
	}
	if err := sb.Close(); err != nil || len(f.removed) != 1 {
		t.Errorf("second close: %v, removed %v", err, f.removed)
	}
}

// imageSourceFunc adapts a function to ImageSource.
type imageSourceFunc func(ctx context.Context, ref string) error

func (f imageSourceFunc) ProvideImage(ctx context.Context, ref string) error { return f(ctx, ref) }

// A missing image goes to SandboxOptions.Images, then the container is
// created again; the source's error is the start's error.
func TestNewSandboxProvidesMissingImage(t *testing.T) {
	missing := true
	f := &fakeRuntime{}
	f.createErr = func(spec ContainerSpec) error {
		if missing {
			return fmt.Errorf("create container: %w: %s", ErrImageNotFound, spec.Image)
		}
		return nil
	}
	var asked []string
	src := imageSourceFunc(func(_ context.Context, ref string) error {
		asked = append(asked, ref)
		missing = false
		return nil
	})
	sb, err := NewSandbox(context.Background(), f, SandboxOptions{Image: "img:1", Images: src})
	if err != nil {
		t.Fatal(err)
	}
	sb.Close()
	if strings.Join(asked, ",") != "img:1" {
		t.Errorf("asked for %v", asked)
	}
	missing = true
	boom := errors.New("no registry has it: push it")
	_, err = NewSandbox(context.Background(), f, SandboxOptions{Image: "img:1", Images: imageSourceFunc(func(context.Context, string) error { return boom })})
	if !errors.Is(err, boom) {
		t.Errorf("err = %v, want the source's", err)
	}
	if _, err := NewSandbox(context.Background(), f, SandboxOptions{Image: "img:1"}); !errors.Is(err, ErrImageNotFound) {
		t.Errorf("without a source: %v", err)
	}
}

// The exec kill script looks for the variable Run sets on every exec.
func TestExecKillFindsTheTag(t *testing.T) {
	if !strings.Contains(guest.ExecKill, `tag="${3:-`+execTagVar+`}=$1"`) {
		t.Errorf("exec-kill.sh does not look for %s", execTagVar)
	}
}
