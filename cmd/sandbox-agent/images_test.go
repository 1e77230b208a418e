package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/images"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
)

// registryFake is an images.RegistryEngine in memory: a push makes the
// registry serve the image's digest and records it on the local image.
type registryFake struct {
	content map[string]string   // local tag -> content
	repo    map[string][]string // local tag -> recorded repo digests
	served  map[string]string   // tag -> digest the registry serves
	pushes  []string
}

var _ images.RegistryEngine = (*registryFake)(nil)

func newRegistryFake() *registryFake {
	return &registryFake{content: map[string]string{}, repo: map[string][]string{}, served: map[string]string{}}
}

func fakeDigest(s string) string { return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(s))) }

func (f *registryFake) ImageExists(_ context.Context, ref string) (bool, error) {
	_, ok := f.content[ref]
	return ok, nil
}
func (f *registryFake) Build(context.Context, images.BuildRequest, io.Writer) error {
	return fmt.Errorf("registryFake does not build")
}
func (f *registryFake) Push(_ context.Context, ref string, w io.Writer) error {
	f.pushes = append(f.pushes, ref)
	d := fakeDigest(f.content[ref])
	f.served[ref] = d
	f.repo[ref] = append(f.repo[ref], d)
	fmt.Fprintf(w, "pushed %s\n", ref)
	return nil
}
func (f *registryFake) RegistryHas(_ context.Context, ref string) (bool, error) {
	return f.served[ref] != "", nil
}
func (f *registryFake) RepoDigests(_ context.Context, ref string) ([]string, error) {
	if _, ok := f.content[ref]; !ok {
		return nil, fmt.Errorf("%w: %s", sandboxagent.ErrImageNotFound, ref)
	}
	return f.repo[ref], nil
}
func (f *registryFake) RegistryDigest(_ context.Context, ref string) (string, error) {
	return f.served[ref], nil
}
func (f *registryFake) Pull(context.Context, string, func(images.PullProgress)) error {
	return errors.New("registryFake does not pull")
}

// runImagesWith runs `images ARGS...` against eng with cfg.
func runImagesWith(t *testing.T, eng images.PullEngine, cfg sandboxagent.Config, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	a := &app{cfg: cfg, stdout: &out, stderr: &errb, getenv: func(string) string { return "" },
		eng: &engine{images: eng, close: func() error { return nil }}}
	code := runImages(context.Background(), a, args)
	return code, out.String(), errb.String()
}

const fakeRepo = "127.0.0.1:5055/sandbox-agent"

func fakeTag(t *testing.T, name string) string {
	t.Helper()
	img, err := catalog.Versions().Image(name, fakeRepo)
	if err != nil {
		t.Fatal(err)
	}
	return img.Tag
}

func TestImagesPushCommand(t *testing.T) {
	cfg := sandboxagent.DefaultConfig()
	cfg.ImageName = fakeRepo
	f := newRegistryFake()
	f.content[fakeTag(t, "base")] = "base"
	f.content[fakeTag(t, "pi")] = "pi"

	code, stdout, stderr := runImagesWith(t, f, cfg, "push", "pi", "base")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := fakeTag(t, "base") + "\t" + fakeDigest("base") + "\n" + fakeTag(t, "pi") + "\t" + fakeDigest("pi") + "\n"
	if stdout != want {
		t.Errorf("stdout %q, want %q (base first)", stdout, want)
	}
	if !strings.Contains(stderr, "pushed "+fakeTag(t, "pi")) || !strings.Contains(stderr, "==> pushed in") {
		t.Errorf("no progress on stderr: %q", stderr)
	}

	// A missing local image: 125, naming images build; nothing pushed.
	f.pushes = nil
	code, _, stderr = runImagesWith(t, f, cfg, "push")
	if code != exitError || !strings.Contains(stderr, "image not found") || !strings.Contains(stderr, "sandbox-agent images build opencode codex claude dsh") || len(f.pushes) != 0 {
		t.Errorf("push all with images missing: exit %d, stderr %q, pushes %v", code, stderr, f.pushes)
	}

	// Another image under the tag: refused (125) unless --force.
	f.served[fakeTag(t, "pi")] = fakeDigest("someone else's")
	code, _, stderr = runImagesWith(t, f, cfg, "push", "pi")
	if code != exitError || !strings.Contains(stderr, "refusing to overwrite") || len(f.pushes) != 0 {
		t.Errorf("overwrite: exit %d, stderr %q", code, stderr)
	}
	code, stdout, stderr = runImagesWith(t, f, cfg, "push", "--force", "pi")
	if code != exitOK || stdout != fakeTag(t, "pi")+"\t"+fakeDigest("pi")+"\n" {
		t.Errorf("--force: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	for _, args := range [][]string{{"push", "--nope"}, {"push", "nosuchcli"}} {
		if code, _, stderr := runImagesWith(t, f, cfg, args...); code != exitError {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
}

func TestImagesCheckRegistryCommand(t *testing.T) {
	cfg := sandboxagent.DefaultConfig()
	cfg.ImageName = fakeRepo
	f := newRegistryFake()
	base, pi := fakeTag(t, "base"), fakeTag(t, "pi")
	f.content[base], f.content[pi] = "base", "pi"
	if code, _, stderr := runImagesWith(t, f, cfg, "push", "base", "pi"); code != exitOK {
		t.Fatal(stderr)
	}

	code, stdout, stderr := runImagesWith(t, f, cfg, "check", "--registry", "base", "pi")
	want := base + "\tlocal,registry\tdigest ok " + fakeDigest("base") + "\n" + pi + "\tlocal,registry\tdigest ok " + fakeDigest("pi") + "\n"
	if code != exitOK || stdout != want {
		t.Errorf("ok: exit %d, stdout %q, want %q; stderr %q", code, stdout, want, stderr)
	}

	// The registry serves another image under pi's tag: exit 3.
	f.served[pi] = fakeDigest("tampered")
	code, stdout, stderr = runImagesWith(t, f, cfg, "check", "--registry", "base", "pi")
	if code != exitDigest || !strings.Contains(stdout, pi+"\tlocal,registry\tdigest MISMATCH local "+fakeDigest("pi")+" registry "+fakeDigest("tampered")+"\n") ||
		!strings.Contains(stderr, "image digest mismatch") {
		t.Errorf("mismatch: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	// Missing in the registry wins over a mismatch: 125. Not local alone
	// is no failure.
	delete(f.content, base)
	code, stdout, stderr = runImagesWith(t, f, cfg, "check", "--registry", "base", "pi", "dsh")
	if code != exitError || !strings.Contains(stdout, base+"\tnot-local,registry\t-\n") ||
		!strings.Contains(stdout, fakeTag(t, "dsh")+"\tnot-local,not-in-registry\t-\n") || !strings.Contains(stderr, "missing in the registry: "+fakeTag(t, "dsh")) {
		t.Errorf("missing: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, _ := runImagesWith(t, f, cfg, "check", "--registry", "base"); code != exitOK {
		t.Errorf("only missing locally: exit %d, want 0", code)
	}
}

func TestImagesCheckStrictVerify(t *testing.T) {
	cfg := sandboxagent.DefaultConfig()
	cfg.ImageName = fakeRepo
	f := newRegistryFake()
	f.content[fakeTag(t, "pi")] = "pi"
	code, stdout, _ := runImagesWith(t, f, cfg, "check", "pi")
	if code != exitOK || stdout != fakeTag(t, "pi")+"\tlocal\n" {
		t.Errorf("off: exit %d, stdout %q", code, stdout)
	}
	cfg.ImageVerify = catalog.VerifyStrict
	// The fake's image is never the released one: nothing is recorded (a
	// development build), or what is recorded differs.
	verdict := "digest MISMATCH nothing recorded at release for this tag"
	if d, ok := catalog.ReleasedDigest(fakeTag(t, "pi")); ok {
		verdict = "digest MISMATCH local none recorded " + d
	}
	code, stdout, stderr := runImagesWith(t, f, cfg, "check", "pi")
	if code != exitDigest || stdout != fakeTag(t, "pi")+"\tlocal\t"+verdict+"\n" || !strings.Contains(stderr, "image digest mismatch") {
		t.Errorf("strict, nothing recorded: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, _, stderr = runImagesWith(t, f, cfg, "check", "pi", "dsh")
	if code != exitError || !strings.Contains(stderr, "missing in the engine") {
		t.Errorf("strict, one missing: exit %d, stderr %q", code, stderr)
	}
}

func TestImagesUsageNamesPush(t *testing.T) {
	code, stdout, _ := runCLI(t, nil, "images", "--help")
	for _, w := range []string{"push [--force] [NAME...]", "check [--registry] [NAME...]", "digest MISMATCH", "3 when a digest differs"} {
		if code != exitOK || !strings.Contains(stdout, w) {
			t.Errorf("images --help lacks %q (exit %d)", w, code)
		}
	}
}

// The usage is built when asked (not at init), from versions.json: it names
// every CLI of the catalog.
func TestImagesUsageNamesEveryCLI(t *testing.T) {
	code, stdout, _ := runCLI(t, nil, "images", "--help")
	want := "NAME is a CLI (" + strings.Join(catalog.Versions().CLINames(), ", ") + `) or "base"`
	if code != exitOK || !strings.Contains(stdout, want) {
		t.Errorf("images --help (exit %d) lacks %q:\n%s", code, want, stdout)
	}
	if n := len(catalog.Versions().CLINames()); n < 5 {
		t.Errorf("the catalog names %d CLIs, want opencode, codex, claude, pi, dsh at least", n)
	}
}
