package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
)

// PullEngine is an Engine that can also pull (ClientEngine).
type PullEngine interface {
	Engine
	Pull(ctx context.Context, ref string, fn func(PullProgress)) error
}

// Provider makes a sandbox's missing image present, by policy: it pulls
// it from its registry and, under catalog.PolicyPullOrBuild, builds an
// agent image from the Dockerfiles embedded in the binary when no registry
// has it (or none answers) — the same tag a release produces. It implements
// sandboxagent.ImageSource; concurrent calls for one tag share one build.
type Provider struct {
	Engine PullEngine
	Policy catalog.Policy // "" = catalog.PolicyPullOrBuild
	// Builder options for the fallback (Repo must be Config.ImageName, so
	// tags match; CACertFile the build's extra CA).
	Build Options
	// OnPull receives pull progress (a ProgressWriter's Pull for a person).
	OnPull func(PullProgress)
	// Log receives one line per decision ("not in the registry: building
	// it"); nil discards them.
	Log io.Writer
	// Verify is image_verify: under catalog.VerifyStrict an image is used
	// only when its digest is the one recorded at release (digests.json),
	// whether the engine had it or it was just pulled (a built image has
	// no digest: refused).
	Verify catalog.Verify
}

var (
	_ sandboxagent.ImageSource = (*Provider)(nil)
	_ interface {
		CheckImage(context.Context, string) error
	} = (*Provider)(nil) // NewSandbox vets images with it
)

// CheckImage vets an image the engine has (NewSandbox calls it): under strict
// verification a present image must carry its released digest; a missing
// one is left to ProvideImage.
func (p *Provider) CheckImage(ctx context.Context, ref string) error {
	if p.Verify != catalog.VerifyStrict {
		return nil
	}
	if ok, err := p.Engine.ImageExists(ctx, ref); err != nil || !ok {
		return err
	}
	return p.verify(ctx, ref)
}

func (p *Provider) verify(ctx context.Context, ref string) error {
	if p.Verify != catalog.VerifyStrict {
		return nil
	}
	rd, ok := p.Engine.(RepoDigester)
	if !ok {
		return fmt.Errorf("%w: image_verify strict: this engine cannot report image digests", sandboxagent.ErrImageDigest)
	}
	return VerifyDigest(ctx, rd, ref, p.Verify)
}

// MissingError is an image the policy could not make present. It matches
// sandboxagent.ErrImageNotFound; Hint says what to do.
type MissingError struct {
	Ref    string
	Policy catalog.Policy
	Reason string
	Hint   string
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("%v: %s is not in the engine and image_policy %s could not provide it: %s; %s", sandboxagent.ErrImageNotFound, e.Ref, e.Policy, e.Reason, e.Hint)
}

func (e *MissingError) Unwrap() error { return sandboxagent.ErrImageNotFound }

// provideGroup makes concurrent starts that miss the same image share one
// pull (or build): 50 agents starting at once pull once.
var provideGroup flightGroup

// ProvideImage implements sandboxagent.ImageSource.
func (p *Provider) ProvideImage(ctx context.Context, ref string) error {
	err := provideGroup.do(ctx, ref, func() error { return p.provide(ctx, ref) })
	if err != nil && ctx.Err() == nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// The call we waited for was cancelled by its own caller, not us.
		return p.provide(ctx, ref)
	}
	return err
}

func (p *Provider) provide(ctx context.Context, ref string) error {
	policy := p.Policy
	if policy == "" {
		policy = catalog.PolicyPullOrBuild
	}
	name, ours := p.agentImage(ref)
	buildHint := "build it with `sandbox-agent images build`"
	if ours {
		buildHint = "build it with `sandbox-agent images build " + name + "`"
	}
	missing := func(reason, hint string) error {
		return &MissingError{Ref: ref, Policy: policy, Reason: reason, Hint: hint}
	}
	if _, err := catalog.ParsePolicy(string(policy)); err != nil {
		return invalidArgument(err)
	}
	if policy == catalog.PolicyNever {
		return missing("pulling and building are off", "pull it (docker pull "+ref+"), "+buildHint+", or set image_policy to pull-or-build")
	}
	p.logf("sandbox-agent: %s is not in the engine: pulling it", ref)
	err := p.Engine.Pull(ctx, ref, p.OnPull)
	if err == nil {
		return p.verify(ctx, ref)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	notThere := errors.Is(err, ErrNotInRegistry)
	if policy == catalog.PolicyPull {
		if notThere {
			return missing("its registry does not have it (or refused it without a login)", "push it there (sandbox-agent images push "+name+"), log in if it is private (docker login), or set image_policy to pull-or-build to build it from the Dockerfiles in this binary")
		}
		return missing("pull failed: "+err.Error(), "check the registry is reachable and that you are logged in (docker login)")
	}
	if !ours {
		return missing("pull failed: "+err.Error(), "it is not an agent image this binary can build: pull or build it yourself")
	}
	if p.Verify == catalog.VerifyStrict {
		// A built image has no released digest: strict would refuse it.
		return missing("pull failed: "+err.Error(), "image_verify is strict, so it is not built here: make its registry reachable (docker login), or set image_verify to off to build it")
	}
	why := "its registry does not have it"
	if !notThere {
		why = "its registry did not answer (" + firstLine(err.Error()) + ")"
	}
	p.logf("sandbox-agent: %s: building %s from the Dockerfiles in this binary", why, ref)
	b, err := New(p.Engine, p.Build)
	if err != nil {
		return err
	}
	if name != catalog.BaseName && notThere {
		// The registry answers: the base may well be there; pull it rather
		// than build (not when the registry did not answer: another wait).
		base := b.Versions().BaseImage(p.Build.Repo).Tag
		if ok, err := p.Engine.ImageExists(ctx, base); err == nil && !ok {
			_ = p.Engine.Pull(ctx, base, p.OnPull)
		}
	}
	if _, err := b.Ensure(ctx, name); err != nil {
		return err // wraps ErrImageNotFound, with the build's output
	}
	return p.verify(ctx, ref)
}

// agentImage finds which of the embedded images ref is under the
// configured repository.
func (p *Provider) agentImage(ref string) (string, bool) {
	v := catalog.Versions()
	if p.Build.Versions != nil {
		v = *p.Build.Versions
	}
	for _, n := range append([]string{catalog.BaseName}, v.CLINames()...) {
		img, err := v.Image(n, p.Build.Repo)
		if err == nil && img.Tag == ref {
			return n, true
		}
	}
	return "", false
}

func (p *Provider) logf(format string, args ...any) {
	if p.Log != nil {
		fmt.Fprintf(p.Log, format+"\n", args...)
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return truncate(s, 200)
}
