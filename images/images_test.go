package images

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
)

// fakeEngine records builds and pushes; images "exist" once built.
type fakeEngine struct {
	mu       sync.Mutex
	local    map[string]bool
	registry map[string]bool
	builds   []BuildRequest
	pushes   []string
	delay    time.Duration
	failTag  string
}

func newFake() *fakeEngine {
	return &fakeEngine{local: map[string]bool{}, registry: map[string]bool{}}
}

func (f *fakeEngine) ImageExists(_ context.Context, ref string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.local[ref], nil
}

func (f *fakeEngine) Build(_ context.Context, req BuildRequest, progress io.Writer) error {
	time.Sleep(f.delay)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.builds = append(f.builds, req)
	if req.Tag == f.failTag {
		return &BuildError{Message: "boom", Step: "Step 8/11 : RUN npm install"}
	}
	// A CLI build needs its base.
	if base := req.BuildArgs["BASE_IMAGE"]; base != "" && !f.local[base] {
		return errors.New("base missing: " + base)
	}
	io.WriteString(progress, "built "+req.Tag+"\n")
	f.local[req.Tag] = true
	return nil
}

func (f *fakeEngine) Push(_ context.Context, ref string, _ io.Writer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pushes = append(f.pushes, ref)
	f.registry[ref] = true
	return nil
}

func (f *fakeEngine) RegistryHas(_ context.Context, ref string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.registry[ref], nil
}

func (f *fakeEngine) builtTags() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, b := range f.builds {
		out = append(out, b.Tag)
	}
	return out
}

func tag(t *testing.T, cli string) string {
	t.Helper()
	s, err := catalog.Versions().Image(cli, "")
	if err != nil {
		t.Fatal(err)
	}
	return s.Tag
}

func untar(t *testing.T, data []byte) map[string]*tar.Header {
	t.Helper()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = h
	}
}

func tarFile(t *testing.T, data []byte, name string) string {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s not in the context: %v", name, err)
		}
		if h.Name == name {
			b, _ := io.ReadAll(tr)
			return string(b)
		}
	}
}

const testPEM = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ2VydA==\n-----END CERTIFICATE-----\n"

func TestBuildContextContents(t *testing.T) {
	ctxTar, err := BuildContext(catalog.Files(), nil)
	if err != nil {
		t.Fatal(err)
	}
	entries := untar(t, ctxTar)
	for _, name := range []string{"Dockerfile.base", "Dockerfile.opencode", "Dockerfile.codex", "Dockerfile.claude", "Dockerfile.pi", "Dockerfile.dsh", "npm-fetch.sh", "ca/", CAPath} {
		h, ok := entries[name]
		if !ok {
			t.Errorf("context lacks %s", name)
			continue
		}
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(contextTime) {
			t.Errorf("%s: uid %d gid %d time %v", name, h.Uid, h.Gid, h.ModTime)
		}
	}
	if entries[CAPath].Size != 0 {
		t.Errorf("ca.crt without a CA has size %d", entries[CAPath].Size)
	}
	for name := range entries {
		if strings.HasPrefix(name, "docker/") || strings.Contains(name, "..") || strings.HasPrefix(name, "/") {
			t.Errorf("bad context entry %q", name)
		}
	}
	// Deterministic: the same inputs give the same bytes (engine cache).
	again, _ := BuildContext(catalog.Files(), nil)
	if !bytes.Equal(ctxTar, again) {
		t.Error("build context is not deterministic")
	}
	withCA, err := BuildContext(catalog.Files(), []byte(testPEM))
	if err != nil {
		t.Fatal(err)
	}
	if got := tarFile(t, withCA, CAPath); got != testPEM {
		t.Errorf("ca.crt = %q", got)
	}
}

func TestReadCA(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.pem")
	os.WriteFile(good, []byte("junk before\n"+testPEM), 0o644)
	if data, err := ReadCA(good); err != nil || !strings.Contains(string(data), "BEGIN CERTIFICATE") {
		t.Errorf("ReadCA(good) = %q, %v", data, err)
	}
	bad := filepath.Join(dir, "bad.pem")
	os.WriteFile(bad, []byte("not a certificate"), 0o644)
	if _, err := ReadCA(bad); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("ReadCA(bad) err = %v", err)
	}
	if _, err := ReadCA(filepath.Join(dir, "missing.pem")); err == nil || !strings.Contains(err.Error(), "CA bundle") {
		t.Errorf("ReadCA(missing) err = %v", err)
	}
}

func TestRequestArgs(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	os.WriteFile(ca, []byte(testPEM), 0o644)
	b, err := New(newFake(), Options{CACertFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	v := catalog.Versions()
	base := v.BaseImage("")
	req, err := b.Request(base)
	if err != nil {
		t.Fatal(err)
	}
	if req.Dockerfile != "Dockerfile.base" || req.Tag != base.Tag {
		t.Errorf("base request %s %s", req.Dockerfile, req.Tag)
	}
	for k, want := range map[string]string{
		"DEBIAN_IMAGE": v.Base.From, "NODE_VERSION": v.Base.NodeVersion, "NPM_VERSION": v.Base.NPMVersion,
		"NPM_INTEGRITY": v.Base.NPMIntegrity, "NODE_INTEGRITY_AMD64": v.Base.NodeIntegrity["amd64"],
	} {
		if req.BuildArgs[k] != want || want == "" {
			t.Errorf("base arg %s = %q, want %q", k, req.BuildArgs[k], want)
		}
	}
	if got := tarFile(t, req.Context, CAPath); got != testPEM {
		t.Errorf("context CA = %q", got)
	}
	for _, cli := range v.CLINames() {
		img, _ := v.Image(cli, "")
		req, err := b.Request(img)
		if err != nil {
			t.Fatal(err)
		}
		c := v.CLIs[cli]
		if req.Dockerfile != "Dockerfile."+cli || req.BuildArgs["CLI_VERSION"] != c.Version ||
			req.BuildArgs["CLI_PACKAGE"] != c.Package || req.BuildArgs["BASE_IMAGE"] != base.Tag {
			t.Errorf("%s request: %s %v", cli, req.Dockerfile, req.BuildArgs)
		}
		if _, ok := req.BuildArgs["NPM_OVERRIDES"]; ok != (len(c.NPMOverrides) > 0) {
			t.Errorf("%s: NPM_OVERRIDES present=%v", cli, ok)
		}
		if len(c.NPMOverrides) > 0 {
			var ov map[string]string
			if err := json.Unmarshal([]byte(req.BuildArgs["NPM_OVERRIDES"]), &ov); err != nil || len(ov) != len(c.NPMOverrides) {
				t.Errorf("%s: NPM_OVERRIDES %q", cli, req.BuildArgs["NPM_OVERRIDES"])
			}
		}
		if req.Labels["org.opencontainers.image.version"] != c.Version {
			t.Errorf("%s labels %v", cli, req.Labels)
		}
	}
	// A private repository moves the base too.
	b2, _ := New(newFake(), Options{Repo: "reg.local:5000/sa"})
	img, _ := b2.Versions().Image("pi", "reg.local:5000/sa")
	req, _ = b2.Request(img)
	if req.BuildArgs["BASE_IMAGE"] != "reg.local:5000/sa:base-"+v.ImageDate {
		t.Errorf("private BASE_IMAGE = %q", req.BuildArgs["BASE_IMAGE"])
	}
	if _, err := New(newFake(), Options{Repo: "Reg/Bad:tag"}); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("bad repo err = %v", err)
	}
	// A CA file without a certificate fails before the engine is asked.
	os.WriteFile(ca, []byte("nope"), 0o644)
	if _, err := New(newFake(), Options{CACertFile: ca}); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("bad CA err = %v", err)
	}
}

func TestBuildAllBaseFirst(t *testing.T) {
	f := newFake()
	var out bytes.Buffer
	b, _ := New(f, Options{Progress: &out})
	res, err := b.Build(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{tag(t, "base"), tag(t, "opencode"), tag(t, "codex"), tag(t, "claude"), tag(t, "pi"), tag(t, "dsh")}
	if got := f.builtTags(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("built %v, want %v", got, want)
	}
	if len(res) != 6 || len(f.pushes) != 0 {
		t.Errorf("%d results, %d pushes", len(res), len(f.pushes))
	}
	if !strings.Contains(out.String(), "==> built "+tag(t, "dsh")) {
		t.Errorf("progress: %s", out.String())
	}
}

func TestBuildOneCLIBuildsMissingBase(t *testing.T) {
	f := newFake()
	b, _ := New(f, Options{Push: true})
	res, err := b.Build(context.Background(), "claude")
	if err != nil {
		t.Fatal(err)
	}
	if got := f.builtTags(); len(got) != 2 || got[0] != tag(t, "base") || got[1] != tag(t, "claude") {
		t.Errorf("built %v", got)
	}
	// Only the target is pushed, not the dependency.
	if len(f.pushes) != 1 || f.pushes[0] != tag(t, "claude") || !res[1].Pushed || res[0].Pushed {
		t.Errorf("pushes %v results %+v", f.pushes, res)
	}
	// A second CLI reuses the existing base.
	if _, err := b.Build(context.Background(), "pi", "pi"); err != nil {
		t.Fatal(err)
	}
	if got := f.builtTags(); len(got) != 3 || got[2] != tag(t, "pi") {
		t.Errorf("built %v", got)
	}
	if _, err := b.Build(context.Background(), "nope"); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("unknown name err = %v", err)
	}
}

func TestBuildRefusesExistingTag(t *testing.T) {
	f := newFake()
	f.local[tag(t, "base")] = true
	f.local[tag(t, "codex")] = true
	b, _ := New(f, Options{})
	_, err := b.Build(context.Background(), "codex", "pi")
	if !errors.Is(err, ErrImageExists) || !strings.Contains(err.Error(), tag(t, "codex")) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("err = %v", err)
	}
	if len(f.builds) != 0 {
		t.Errorf("built %v although refused", f.builtTags())
	}
	// With Force it rebuilds (and keeps the existing base).
	b, _ = New(f, Options{Force: true})
	if _, err := b.Build(context.Background(), "codex", "pi"); err != nil {
		t.Fatal(err)
	}
	if got := f.builtTags(); len(got) != 2 || got[0] != tag(t, "codex") {
		t.Errorf("built %v", got)
	}
}

func TestBuildRefusesTagInRegistryWhenPushing(t *testing.T) {
	f := newFake()
	f.registry[tag(t, "dsh")] = true
	b, _ := New(f, Options{Push: true})
	_, err := b.Build(context.Background(), "dsh")
	if !errors.Is(err, ErrImageExists) || !strings.Contains(err.Error(), "(registry)") {
		t.Fatalf("err = %v", err)
	}
	// Without --push the registry is not consulted.
	b, _ = New(f, Options{})
	if _, err := b.Build(context.Background(), "dsh"); err != nil {
		t.Fatal(err)
	}
}

func TestBuildFailureStops(t *testing.T) {
	f := newFake()
	f.failTag = tag(t, "codex")
	b, _ := New(f, Options{Push: true})
	res, err := b.Build(context.Background())
	var be *BuildError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), tag(t, "codex")) {
		t.Fatalf("err = %v", err)
	}
	if len(res) != 2 || len(f.pushes) != 0 {
		t.Errorf("results %d, pushes %v (nothing may be pushed after a failure)", len(res), f.pushes)
	}
}

func TestEnsureSingleflight(t *testing.T) {
	f := newFake()
	f.delay = 50 * time.Millisecond
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	tags := make([]string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			tags[i], errs[i] = Ensure(context.Background(), f, "opencode", io.Discard)
		}(i)
	}
	wg.Wait()
	for i := range errs {
		if errs[i] != nil || tags[i] != tag(t, "opencode") {
			t.Fatalf("call %d: %q, %v", i, tags[i], errs[i])
		}
	}
	got := f.builtTags()
	if len(got) != 2 || got[0] != tag(t, "base") || got[1] != tag(t, "opencode") {
		t.Errorf("built %v, want base then opencode once", got)
	}
	// Present now: no build at all.
	if _, err := Ensure(context.Background(), f, "opencode", nil); err != nil || len(f.builtTags()) != 2 {
		t.Errorf("second Ensure: %v, builds %v", err, f.builtTags())
	}
}

func TestEnsureDifferentCLIsShareBase(t *testing.T) {
	f := newFake()
	f.delay = 30 * time.Millisecond
	var wg sync.WaitGroup
	for _, cli := range []string{"pi", "codex", "claude", "pi", "codex"} {
		wg.Add(1)
		go func(cli string) {
			defer wg.Done()
			if _, err := Ensure(context.Background(), f, cli, nil); err != nil {
				t.Error(err)
			}
		}(cli)
	}
	wg.Wait()
	count := map[string]int{}
	for _, tg := range f.builtTags() {
		count[tg]++
	}
	for tg, c := range count {
		if c != 1 {
			t.Errorf("%s built %d times", tg, c)
		}
	}
	if len(count) != 4 {
		t.Errorf("built %v", count)
	}
}

func TestEnsureErrors(t *testing.T) {
	f := newFake()
	f.failTag = tag(t, "dsh")
	_, err := Ensure(context.Background(), f, "dsh", nil)
	if !errors.Is(err, sandboxagent.ErrImageNotFound) || !strings.Contains(err.Error(), "boom") {
		t.Errorf("err = %v", err)
	}
	if _, err := Ensure(context.Background(), f, "nope", nil); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("unknown CLI err = %v", err)
	}
}

func TestCheck(t *testing.T) {
	f := newFake()
	f.local[tag(t, "pi")] = true
	f.registry[tag(t, "pi")] = true
	b, _ := New(f, Options{})
	st, err := b.Check(context.Background(), true)
	if err != nil || len(st) != 6 {
		t.Fatalf("%v %v", st, err)
	}
	for _, s := range st {
		want := s.Image.CLI == "pi"
		if s.Local != want || s.Registry != want {
			t.Errorf("%+v", s)
		}
	}
}

func TestDecodeStream(t *testing.T) {
	stream := `{"stream":"Step 1/3 : FROM base\n"}
{"stream":" ---\u003e abc\n"}
{"stream":"Step 2/3 : RUN npm install x\n"}
{"stream":" ---\u003e Running in 123\n"}
{"stream":"npm error code ETARGET\n"}
{"stream":"npm error notarget No matching version found for y@^1\n"}
{"status":"Pushing","progressDetail":{"current":1},"progress":"[==>  ]","id":"aa"}
{"errorDetail":{"code":1,"message":"The command '/bin/sh -c npm install x' returned a non-zero code: 1"},"error":"The command '/bin/sh -c npm install x' returned a non-zero code: 1"}
`
	var out bytes.Buffer
	err := decodeStream(strings.NewReader(stream), &out)
	var be *BuildError
	if !errors.As(err, &be) {
		t.Fatalf("err = %v", err)
	}
	if be.Step != "Step 2/3 : RUN npm install x" || !strings.Contains(be.Output, "No matching version") || strings.Contains(be.Output, "FROM base") {
		t.Errorf("BuildError %+v", be)
	}
	if !strings.Contains(err.Error(), "returned a non-zero code: 1") || !strings.Contains(err.Error(), "failing step: Step 2/3") {
		t.Errorf("message: %s", err)
	}
	if !strings.Contains(out.String(), "npm error code ETARGET") || strings.Contains(out.String(), "[==>") {
		t.Errorf("progress output: %s", out.String())
	}
	if strings.Contains(be.Message, "npm install x'") {
		t.Errorf("message repeats the command: %q", be.Message)
	}
	// Colour escapes and the builder's own lines stay out of the tail.
	colour := `{"stream":"Step 3/3 : RUN curl x\n"}
{"stream":"\u001b[91mcurl: (60) SSL\n\u001b[0m"}
{"stream":"Removing intermediate container 1\n"}
{"error":"The command '/bin/sh -c curl x' returned a non-zero code: 60"}`
	err = decodeStream(strings.NewReader(colour), io.Discard)
	if !errors.As(err, &be) || be.Output != "curl: (60) SSL" || be.Message != "the step's command returned a non-zero code: 60" {
		t.Errorf("colour: %+v", be)
	}
	// Old-style error only; status lines; clean EOF.
	if err := decodeStream(strings.NewReader(`{"error":"no space left"}`), io.Discard); err == nil || err.Error() != "no space left" {
		t.Errorf("err = %v", err)
	}
	out.Reset()
	if err := decodeStream(strings.NewReader(`{"status":"Pushed","id":"l1"}`+"\n"+`{"aux":{"ID":"sha256:1"}}`), &out); err != nil || out.String() != "l1: Pushed\n" {
		t.Errorf("%q %v", out.String(), err)
	}
	if err := decodeStream(strings.NewReader(`{"stream":`), io.Discard); err == nil {
		t.Error("truncated stream accepted")
	}
}

func TestFlightGroupContextCancel(t *testing.T) {
	var g flightGroup
	release := make(chan struct{})
	started := make(chan struct{})
	go g.do(context.Background(), "k", func() error { close(started); <-release; return nil })
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.do(ctx, "k", func() error { t.Error("second fn ran"); return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v", err)
	}
	close(release)
}

func TestRegistryAuth(t *testing.T) {
	dir := t.TempDir()
	e := &ClientEngine{DockerConfig: dir}
	auth, host, err := e.registryAuth("ghcr.io/sandbox-agent/sandbox-agent:pi-1-20260101")
	if err != nil || auth != "" || host != "ghcr.io" {
		t.Fatalf("no config: %q %q %v", auth, host, err)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"auths":{"ghcr.io":{"auth":"dXNlcjpwYXNz"}}}`), 0o600)
	auth, _, err = e.registryAuth("ghcr.io/sandbox-agent/sandbox-agent:pi-1-20260101")
	if err != nil || auth == "" {
		t.Fatalf("%q %v", auth, err)
	}
	if strings.Contains(auth, "pass") {
		t.Error("auth not encoded")
	}
	if _, _, err := e.registryAuth("Not A Ref"); err == nil {
		t.Error("bad reference accepted")
	}
}
