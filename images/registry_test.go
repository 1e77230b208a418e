package images

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
)

// digestFake is a fakeEngine with digests: a push makes the registry serve
// a digest of the pushed image and records it on the local image, as an
// engine does.
type digestFake struct {
	*fakeEngine
	image  map[string]string   // tag -> local image ID
	repo   map[string][]string // tag -> recorded repo digests
	served map[string]string   // tag -> digest the registry serves
	regErr error
}

func newDigestFake() *digestFake {
	return &digestFake{fakeEngine: newFake(), image: map[string]string{}, repo: map[string][]string{}, served: map[string]string{}}
}

func digestOf(s string) string { return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(s))) }

// add makes tag a local image with the given content.
func (f *digestFake) add(tag, content string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.local[tag] = true
	f.image[tag] = content
}

func (f *digestFake) Push(ctx context.Context, ref string, w io.Writer) error {
	if err := f.fakeEngine.Push(ctx, ref, w); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	d := digestOf(f.image[ref])
	f.served[ref] = d
	f.repo[ref] = append(f.repo[ref], d)
	return nil
}

func (f *digestFake) RepoDigests(_ context.Context, ref string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.local[ref] {
		return nil, fmt.Errorf("%w: %s", sandboxagent.ErrImageNotFound, ref)
	}
	return append([]string(nil), f.repo[ref]...), nil
}

func (f *digestFake) RegistryDigest(_ context.Context, ref string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.served[ref], f.regErr
}

func (f *digestFake) pushed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.pushes...)
}

func digestBuilder(t *testing.T, eng Engine, force bool) *Builder {
	t.Helper()
	b, err := New(eng, Options{Force: force})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPushAllBaseFirstWithDigests(t *testing.T) {
	f := newDigestFake()
	for _, img := range catalog.Versions().Images("") {
		f.add(img.Tag, "content of "+img.CLI)
	}
	res, err := digestBuilder(t, f, false).Push(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	all := catalog.Versions().Images("")
	if len(res) != len(all) || len(f.pushed()) != len(all) {
		t.Fatalf("pushed %v, results %d, want %d", f.pushed(), len(res), len(all))
	}
	for i, r := range res {
		if r.Image != all[i] || r.Digest != digestOf("content of "+all[i].CLI) || r.Already {
			t.Errorf("result %d = %+v", i, r)
		}
	}
	// Again: the registry serves the same images; nothing is pushed.
	res, err = digestBuilder(t, f, false).Push(context.Background(), "pi")
	if err != nil || len(res) != 1 || !res[0].Already || res[0].Digest != digestOf("content of pi") {
		t.Fatalf("second push = %+v, %v", res, err)
	}
	if len(f.pushed()) != len(all) {
		t.Errorf("pushed again: %v", f.pushed())
	}
}

func TestPushRefusesMissingLocalImage(t *testing.T) {
	f := newDigestFake()
	f.add(tag(t, "base"), "base")
	_, err := digestBuilder(t, f, false).Push(context.Background(), "base", "pi", "claude")
	if !errors.Is(err, sandboxagent.ErrImageNotFound) || !strings.Contains(err.Error(), "images build claude pi") ||
		!strings.Contains(err.Error(), tag(t, "pi")) {
		t.Fatalf("err = %v", err)
	}
	if len(f.pushed()) != 0 {
		t.Errorf("pushed %v before refusing", f.pushed())
	}
}

func TestPushRefusesAnotherImageUnderTheTag(t *testing.T) {
	f := newDigestFake()
	f.add(tag(t, "base"), "base")
	f.add(tag(t, "pi"), "pi")
	f.served[tag(t, "pi")] = digestOf("someone else's pi")
	_, err := digestBuilder(t, f, false).Push(context.Background(), "base", "pi")
	if !errors.Is(err, ErrImageExists) || !strings.Contains(err.Error(), digestOf("someone else's pi")) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("err = %v", err)
	}
	if len(f.pushed()) != 0 {
		t.Errorf("pushed %v before refusing", f.pushed())
	}
	res, err := digestBuilder(t, f, true).Push(context.Background(), "base", "pi")
	if err != nil || len(res) != 2 || res[1].Digest != digestOf("pi") || res[1].Already {
		t.Fatalf("--force: %+v, %v", res, err)
	}
}

// raceFake: after each push the registry serves something else (another
// push raced ours).
type raceFake struct{ *digestFake }

func (r raceFake) Push(ctx context.Context, ref string, w io.Writer) error {
	err := r.digestFake.Push(ctx, ref, w)
	r.mu.Lock()
	r.served[ref] = digestOf("raced")
	r.mu.Unlock()
	return err
}

func TestPushChecksTheRegistryDigestAfterwards(t *testing.T) {
	f := newDigestFake()
	f.add(tag(t, "base"), "base")
	_, err := digestBuilder(t, raceFake{f}, false).Push(context.Background(), "base")
	var de *DigestError
	if !errors.As(err, &de) || !errors.Is(err, sandboxagent.ErrImageDigest) || de.Registry != digestOf("raced") {
		t.Fatalf("err = %v", err)
	}
}

func TestPushAndCheckNeedADigestEngine(t *testing.T) {
	b := digestBuilder(t, newFake(), false) // no RegistryEngine
	if _, err := b.Push(context.Background()); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("Push: %v", err)
	}
	if _, err := b.CheckRegistry(context.Background()); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("CheckRegistry: %v", err)
	}
}

func TestCheckRegistry(t *testing.T) {
	f := newDigestFake()
	f.add(tag(t, "base"), "base")
	f.add(tag(t, "pi"), "pi")
	f.add(tag(t, "codex"), "codex") // built, never pushed
	if _, err := digestBuilder(t, f, false).Push(context.Background(), "base", "pi"); err != nil {
		t.Fatal(err)
	}
	f.served[tag(t, "pi")] = digestOf("tampered")
	f.served[tag(t, "codex")] = digestOf("codex elsewhere")
	f.served[tag(t, "claude")] = digestOf("claude") // not local
	st, err := digestBuilder(t, f, false).CheckRegistry(context.Background(), "base", "pi", "codex", "claude", "dsh")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		local, match bool
		registry     string
		errIn        string
	}{
		"base":   {true, true, digestOf("base"), ""},
		"pi":     {true, false, digestOf("tampered"), "local " + digestOf("pi") + ", registry " + digestOf("tampered")},
		"codex":  {true, false, digestOf("codex elsewhere"), "local none"},
		"claude": {false, false, digestOf("claude"), ""},
		"dsh":    {false, false, "", ""},
	}
	if len(st) != len(want) || st[0].Image.CLI != "base" {
		t.Fatalf("statuses %+v", st)
	}
	for _, s := range st {
		w := want[s.Image.CLI]
		if s.Local != w.local || s.Match() != w.match || s.RegistryDigest != w.registry {
			t.Errorf("%s: %+v match %v", s.Image.CLI, s, s.Match())
		}
		err := s.Err()
		if (err != nil) != (w.errIn != "") || (err != nil && (!strings.Contains(err.Error(), w.errIn) || !errors.Is(err, sandboxagent.ErrImageDigest))) {
			t.Errorf("%s: Err() = %v, want %q", s.Image.CLI, err, w.errIn)
		}
	}
	f.regErr = ErrNoDistribution
	if _, err := digestBuilder(t, f, false).CheckRegistry(context.Background(), "base"); !errors.Is(err, ErrNoDistribution) {
		t.Errorf("engine error: %v", err)
	}
}

func TestVerifyDigest(t *testing.T) {
	f := newDigestFake()
	pi, base := tag(t, "pi"), tag(t, "base")
	f.add(pi, "pi")
	f.add(base, "base")
	f.repo[pi] = []string{digestOf("older"), digestOf("pi")}
	f.repo[base] = []string{digestOf("older base")}
	recorded := map[string]string{"pi-" + catalog.Versions().CLIs["pi"].Version + "-" + catalog.Versions().ImageDate: digestOf("pi")}
	saved := releasedDigest
	t.Cleanup(func() { releasedDigest = saved })
	releasedDigest = func(ref string) (string, bool) {
		d, ok := recorded[ref[strings.LastIndex(ref, ":")+1:]]
		return d, ok
	}
	ctx := context.Background()
	// off (and "") checks nothing, not even that the image exists.
	for _, mode := range []catalog.Verify{"", catalog.VerifyOff} {
		if err := VerifyDigest(ctx, nil, "nothing:here", mode); err != nil {
			t.Errorf("mode %q: %v", mode, err)
		}
	}
	if err := VerifyDigest(ctx, f, pi, "loose"); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("bad mode: %v", err)
	}
	strict := catalog.VerifyStrict
	if err := VerifyDigest(ctx, f, pi, strict); err != nil {
		t.Errorf("recorded digest among the local ones: %v", err)
	}
	recorded["base-"+catalog.Versions().ImageDate] = digestOf("released base")
	err := VerifyDigest(ctx, f, base, strict)
	var de *DigestError
	if !errors.As(err, &de) || !errors.Is(err, sandboxagent.ErrImageDigest) || de.Recorded != digestOf("released base") ||
		!strings.Contains(err.Error(), "recorded at release "+digestOf("released base")) {
		t.Errorf("differing digest: %v", err)
	}
	if err := VerifyDigest(ctx, f, tag(t, "codex"), strict); !errors.Is(err, sandboxagent.ErrImageDigest) || !strings.Contains(err.Error(), "recorded no digest") {
		t.Errorf("nothing recorded: %v", err)
	}
	delete(f.local, pi)
	if err := VerifyDigest(ctx, f, pi, strict); !errors.Is(err, sandboxagent.ErrImageNotFound) {
		t.Errorf("missing image: %v", err)
	}
}

func TestRepoDigestsOfOneRepository(t *testing.T) {
	d1, d2 := digestOf("1"), digestOf("2")
	all := []string{
		"127.0.0.1:5055/sandbox-agent@" + d1,
		"127.0.0.1:5000/sandbox-agent@" + d2,
		"ghcr.io/sandbox-agent/sandbox-agent@" + d2,
		"127.0.0.1:5055/sandbox-agent@" + d1,
		"debian@" + d2,
		"not a reference",
	}
	if got := repoDigests(all, "127.0.0.1:5055/sandbox-agent"); strings.Join(got, " ") != d1 {
		t.Errorf("loopback repo: %v", got)
	}
	if got := repoDigests(all, "docker.io/library/debian"); strings.Join(got, " ") != d2 {
		t.Errorf("docker.io short name: %v", got)
	}
	if got := repoDigests(all, "ghcr.io/other/x"); len(got) != 0 {
		t.Errorf("other repo: %v", got)
	}
}

func TestRouteMissing(t *testing.T) {
	for msg, want := range map[string]bool{
		"Error response from daemon: Not Found":                                          true,
		"Error response from daemon: Path /v1.41/distribution/x:y/json is not supported": true,
		"404 page not found": true,
		"Error response from daemon: manifest unknown: manifest unknown":   false,
		"Error response from daemon: repository x not found: name unknown": false,
	} {
		if got := routeMissing(errors.New(msg)); got != want {
			t.Errorf("routeMissing(%q) = %v", msg, got)
		}
	}
}
