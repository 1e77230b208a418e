package images

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/jsonstream"
	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
)

// pullFake is fakeEngine plus a registry it pulls from: a pull of a tag
// in registry makes it local; pullErr, when set, is every pull's error.
type pullFake struct {
	*fakeEngine
	pulls     []string
	pullErr   error
	digests   map[string]string // repo digest of a local image
	pullDelay time.Duration
}

func (f *pullFake) Pull(_ context.Context, ref string, fn func(PullProgress)) error {
	time.Sleep(f.pullDelay)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pulls = append(f.pulls, ref)
	if f.pullErr != nil {
		return f.pullErr
	}
	if !f.registry[ref] {
		return ErrNotInRegistry
	}
	f.local[ref] = true
	if fn != nil {
		fn(PullProgress{Ref: ref, Layers: 2, LayersDone: 2, Current: 10, Total: 10, Done: true})
	}
	return nil
}

func TestProviderPolicies(t *testing.T) {
	pi := tag(t, "pi")
	base := tag(t, "base")
	unreachable := errors.New("dial tcp: lookup ghcr.io: no such host")
	for _, tc := range []struct {
		name      string
		policy    catalog.Policy
		ref       string
		inReg     []string
		pullErr   error
		wantErr   string // "" = success
		wantBuild []string
		wantLocal string
	}{
		{"pulled", catalog.PolicyPullOrBuild, pi, []string{pi}, nil, "", nil, pi},
		{"not in the registry: built, base first", catalog.PolicyPullOrBuild, pi, nil, nil, "", []string{base, pi}, pi},
		{"registry down: built", "", pi, nil, unreachable, "", []string{base, pi}, pi},
		{"base pulled, CLI built", catalog.PolicyPullOrBuild, pi, []string{base}, nil, "", []string{pi}, pi},
		{"not ours: no build", catalog.PolicyPullOrBuild, "example.org/mine:1", nil, nil, "not an agent image this binary can build", nil, ""},
		{"pull only: not there", catalog.PolicyPull, pi, nil, nil, "push it there (sandbox-agent images push pi)", nil, ""},
		{"pull only: down", catalog.PolicyPull, pi, nil, unreachable, "check the registry is reachable", nil, ""},
		{"never", catalog.PolicyNever, pi, []string{pi}, nil, "build it with `sandbox-agent images build pi`", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &pullFake{fakeEngine: newFake(), pullErr: tc.pullErr}
			for _, r := range tc.inReg {
				f.registry[r] = true
			}
			var log bytes.Buffer
			var seen []PullProgress
			p := &Provider{Engine: f, Policy: tc.policy, Log: &log, OnPull: func(pp PullProgress) { seen = append(seen, pp) }}
			err := p.ProvideImage(context.Background(), tc.ref)
			if tc.wantErr != "" {
				var me *MissingError
				if !errors.As(err, &me) || !errors.Is(err, sandboxagent.ErrImageNotFound) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want a MissingError saying %q", err, tc.wantErr)
				}
				if len(f.builds) != 0 {
					t.Errorf("built %v", f.builtTags())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(f.builtTags(), " ") != strings.Join(tc.wantBuild, " ") {
				t.Errorf("built %v, want %v", f.builtTags(), tc.wantBuild)
			}
			if !f.local[tc.wantLocal] {
				t.Errorf("%s not local", tc.wantLocal)
			}
			if len(tc.inReg) > 0 && tc.inReg[0] == tc.ref && (len(seen) == 0 || !seen[len(seen)-1].Done) {
				t.Errorf("no pull progress: %v", seen)
			}
			if len(tc.wantBuild) > 0 && !strings.Contains(log.String(), "building "+tc.ref) {
				t.Errorf("log %q does not say it builds", log.String())
			}
		})
	}
	if err := (&Provider{Engine: &pullFake{fakeEngine: newFake()}, Policy: "sometimes"}).ProvideImage(context.Background(), pi); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("bad policy: %v", err)
	}
}

// The engine's pull messages become layer and byte counts.
func TestPullTracker(t *testing.T) {
	var last PullProgress
	tr := newPullTracker("r:1", func(p PullProgress) { last = p })
	for _, m := range []struct {
		id, status string
		p          *jsonstream.Progress
	}{
		{"1", "Pulling from sandbox-agent", nil},
		{"a", "Pulling fs layer", nil},
		{"b", "Pulling fs layer", nil},
		{"c", "Already exists", nil},
		{"a", "Downloading", &jsonstream.Progress{Current: 5, Total: 20}},
		{"b", "Downloading", &jsonstream.Progress{Current: 1, Total: 10}},
		{"a", "Download complete", nil},
		{"", "Digest: sha256:00", nil},
	} {
		tr.update(m.id, m.status, m.p)
	}
	if last != (PullProgress{Ref: "r:1", Layers: 3, LayersDone: 2, Current: 21, Total: 30}) {
		t.Errorf("progress %+v", last)
	}
	tr.finish()
	if !last.Done {
		t.Error("finish did not report Done")
	}
}

// On a terminal one line is redrawn with a bar; elsewhere plain lines.
func TestProgressWriter(t *testing.T) {
	var tty, plain bytes.Buffer
	for _, w := range []*ProgressWriter{NewProgressWriter(&tty, true), NewProgressWriter(&plain, false)} {
		w.Pull(PullProgress{Ref: "r:1", Layers: 2, LayersDone: 1, Current: 5e6, Total: 10e6})
		w.Pull(PullProgress{Ref: "r:1", Layers: 2, LayersDone: 2, Current: 10e6, Total: 10e6, Done: true})
	}
	if !strings.Contains(tty.String(), "\r\x1b[Kpulling r:1: 1/2 layers, 5.0 MB/10.0 MB [############------------]") ||
		!strings.HasSuffix(tty.String(), "pulled r:1: 2 layers, 10.0 MB\n") {
		t.Errorf("tty: %q", tty.String())
	}
	if plain.String() != "pulling r:1: 1/2 layers, 5.0 MB/10.0 MB\npulled r:1: 2 layers, 10.0 MB\n" {
		t.Errorf("plain: %q", plain.String())
	}
}

func (f *pullFake) RepoDigests(_ context.Context, ref string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.local[ref] {
		return nil, sandboxagent.ErrImageNotFound
	}
	if d := f.digests[ref]; d != "" {
		return []string{d}, nil
	}
	return nil, nil
}

// Under image_verify strict the provider uses an image only with its
// released digest: one the engine had (CheckImage), one just pulled, and
// never one just built.
func TestProviderStrictVerify(t *testing.T) {
	pi := tag(t, "pi")
	const good, bad = "sha256:" + "aa", "sha256:" + "bb"
	old := releasedDigest
	releasedDigest = func(ref string) (string, bool) { return good, ref == pi }
	defer func() { releasedDigest = old }()
	for _, tc := range []struct {
		name              string
		local, registry   bool
		digest            string
		wantCheck, wantPv bool // errors expected from CheckImage, ProvideImage
	}{
		{"present, released digest", true, false, good, false, false},
		{"present, another digest", true, false, bad, true, false},
		{"pulled, released digest", false, true, good, false, false},
		{"pulled, another digest", false, true, bad, false, true},
		{"not built under strict", false, false, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &pullFake{fakeEngine: newFake(), digests: map[string]string{pi: tc.digest}}
			f.local[pi], f.registry[pi] = tc.local, tc.registry
			p := &Provider{Engine: f, Verify: catalog.VerifyStrict}
			err := p.CheckImage(context.Background(), pi)
			if (err != nil) != tc.wantCheck || (err != nil && !errors.Is(err, sandboxagent.ErrImageDigest)) {
				t.Errorf("CheckImage: %v", err)
			}
			if tc.local {
				return
			}
			err = p.ProvideImage(context.Background(), pi)
			want := sandboxagent.ErrImageDigest
			if !tc.registry {
				want = sandboxagent.ErrImageNotFound // nothing to pull, and no build: it could not pass
			}
			if (err != nil) != tc.wantPv || (err != nil && !errors.Is(err, want)) {
				t.Errorf("ProvideImage: %v", err)
			}
			if len(f.builds) != 0 {
				t.Errorf("built under strict: %v", f.builtTags())
			}
		})
	}
}

// Fifty starts that miss the same image pull it once.
func TestProviderPullsOnceForConcurrentStarts(t *testing.T) {
	pi := tag(t, "pi")
	f := &pullFake{fakeEngine: newFake(), pullDelay: 50 * time.Millisecond}
	f.registry[pi] = true
	p := &Provider{Engine: f}
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- p.ProvideImage(context.Background(), pi)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(f.pulls) != 1 {
		t.Errorf("%d pulls, want 1", len(f.pulls))
	}
}
