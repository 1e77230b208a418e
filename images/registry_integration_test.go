//go:build integration

package images

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// The release flow's library half against a real registry (Debian's
// docker-registry on the loopback) and the real engine: push, compare
// digests, pull, tamper with the registry behind the engine's back,
// VerifyDigest. The images are small stand-ins under the agent images'
// tags (.ci/run's release step pushes the real ones).
func TestIntegrationRegistryDigests(t *testing.T) {
	rt := testenv.Runtime(t)
	if info := testenv.Engine(t); info.Name != "docker" {
		t.Skipf("registry digests need DistributionInspect, which %s lacks (covered by the CLI test there)", info.Name)
	}
	reg := testenv.Registry(t)
	// A repository of its own: the registry may be shared (CI's).
	rb := make([]byte, 4)
	rand.Read(rb)
	path := "digests-" + hex.EncodeToString(rb)
	repo := reg + "/" + path
	v := catalog.Versions()
	base, _ := v.Image("base", repo)
	pi, _ := v.Image("pi", repo)
	testenv.StandInImage(t, rt, base.Tag, "base")
	testenv.StandInImage(t, rt, pi.Tag, "pi")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	eng := NewEngine(rt.Client())
	var progress bytes.Buffer
	b, err := New(eng, Options{Repo: repo, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}

	// Push: the digest reported is the one the registry serves, read
	// straight from the registry's HTTP API.
	pushed, err := b.Push(ctx, "pi", "base")
	if err != nil {
		t.Fatalf("push: %v\n%s", err, progress.String())
	}
	if len(pushed) != 2 || pushed[0].Image != base || pushed[1].Image != pi || pushed[0].Already || pushed[1].Already {
		t.Fatalf("pushed %+v", pushed)
	}
	tagOf := func(img catalog.Image) string { return img.Tag[len(repo)+1:] }
	baseManifest, baseType, baseDigest := testenv.RegistryManifest(t, reg, path, tagOf(base))
	_, _, piDigest := testenv.RegistryManifest(t, reg, path, tagOf(pi))
	if pushed[0].Digest != baseDigest || pushed[1].Digest != piDigest || baseDigest == piDigest {
		t.Fatalf("push reported %s %s, the registry serves %s %s", pushed[0].Digest, pushed[1].Digest, baseDigest, piDigest)
	}

	// Check: both match. Pushing again pushes nothing.
	st, err := b.CheckRegistry(ctx, "base", "pi")
	if err != nil || len(st) != 2 || !st[0].Match() || !st[1].Match() {
		t.Fatalf("check after push: %+v, %v", st, err)
	}
	again, err := b.Push(ctx)
	if err == nil || !errors.Is(err, sandboxagent.ErrImageNotFound) {
		t.Errorf("push of all with only two images local: %v", err)
	}
	again, err = b.Push(ctx, "base", "pi")
	if err != nil || !again[0].Already || !again[1].Already || again[1].Digest != piDigest {
		t.Errorf("push again: %+v, %v", again, err)
	}

	// VerifyDigest with a recorded digest: the local image carries it.
	record := func(d string) {
		releasedDigest = func(ref string) (string, bool) { return d, ref == pi.Tag }
	}
	t.Cleanup(func() { releasedDigest = catalog.ReleasedDigest })
	strict := catalog.VerifyStrict
	record(piDigest)
	if err := VerifyDigest(ctx, eng, pi.Tag, strict); err != nil {
		t.Errorf("VerifyDigest with the pushed digest recorded: %v", err)
	}
	// After a pull too: remove the image, pull it back by tag.
	testenv.RemoveImage(t, rt, pi.Tag)
	testenv.PullImage(t, rt, pi.Tag)
	if err := VerifyDigest(ctx, eng, pi.Tag, strict); err != nil {
		t.Errorf("VerifyDigest after a pull: %v", err)
	}
	// A different digest recorded: ErrImageDigest.
	record(baseDigest)
	err = VerifyDigest(ctx, eng, pi.Tag, strict)
	var de *DigestError
	if !errors.As(err, &de) || !errors.Is(err, sandboxagent.ErrImageDigest) || de.Recorded != baseDigest || !slices.Contains(de.Local, piDigest) {
		t.Errorf("VerifyDigest with another digest recorded: %v", err)
	}
	// Nothing recorded for the tag (this binary's own digests.json).
	releasedDigest = catalog.ReleasedDigest
	if err := VerifyDigest(ctx, eng, pi.Tag, strict); !errors.Is(err, sandboxagent.ErrImageDigest) {
		t.Errorf("VerifyDigest strict with this binary's digests: %v", err)
	}
	if err := VerifyDigest(ctx, eng, pi.Tag, catalog.VerifyOff); err != nil {
		t.Errorf("VerifyDigest off: %v", err)
	}

	// Tamper: another client makes the registry serve base's manifest
	// under pi's tag. The local pi image is untouched and keeps its repo
	// digest: the check must see the remote change.
	if d := testenv.PutRegistryManifest(t, reg, path, tagOf(pi), baseManifest, baseType); d != baseDigest {
		t.Fatalf("tampered digest %s, want %s", d, baseDigest)
	}
	st, err = b.CheckRegistry(ctx, "base", "pi")
	if err != nil {
		t.Fatal(err)
	}
	if !st[0].Match() || st[1].Match() || st[1].RegistryDigest != baseDigest || !slices.Contains(st[1].LocalDigests, piDigest) {
		t.Fatalf("check after tampering: %+v", st)
	}
	if err := st[1].Err(); !errors.As(err, &de) || !errors.Is(err, sandboxagent.ErrImageDigest) || de.Registry != baseDigest {
		t.Errorf("mismatch error: %v", err)
	}

	// Push refuses to overwrite the tag now served as another image;
	// --force restores it.
	if _, err := b.Push(ctx, "pi"); !errors.Is(err, ErrImageExists) {
		t.Errorf("push over another image: %v", err)
	}
	bf, _ := New(eng, Options{Repo: repo, Force: true, Progress: &progress})
	if res, err := bf.Push(ctx, "pi"); err != nil || res[0].Digest != piDigest {
		t.Errorf("push --force: %+v, %v", res, err)
	}
	if _, _, d := testenv.RegistryManifest(t, reg, path, tagOf(pi)); d != piDigest {
		t.Errorf("after --force the registry serves %s, want %s", d, piDigest)
	}
	if has, err := eng.RegistryHas(ctx, repo+":no-such-tag"); has || err != nil {
		t.Errorf("RegistryHas(missing tag) = %v, %v", has, err)
	}
}
