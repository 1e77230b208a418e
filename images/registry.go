package images

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/moby/client"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
)

// Digests. A registry names an image's manifest by its digest
// ("sha256:…"); the engine records, per repository, the digests an image
// was pushed as or pulled by (its RepoDigests). An image whose repo digests
// for a repository include the digest that repository's registry serves
// under the tag is the image the registry has: digests are content
// addresses.
//
// The registry's digest is asked through the engine (DistributionInspect),
// not with an HTTP client of our own: the engine applies the same
// credentials, insecure-registry and mirror settings and CA certificates it
// pushes and pulls with, so the digest compared is the one a pull on this
// engine would get. Podman's compatible API has no DistributionInspect: on
// Podman registry digests are an error (ErrNoDistribution), not "missing".

// ErrNoDistribution: the engine cannot look an image up in its registry
// (Podman's Docker-compatible API has no /distribution endpoint).
var ErrNoDistribution = errors.New("the engine cannot inspect registries (no DistributionInspect endpoint: Podman's compatible API lacks it; use a Docker engine)")

// RepoDigester reports the digests an engine recorded for a local image.
// ClientEngine implements it.
type RepoDigester interface {
	// RepoDigests returns the digests the engine recorded for ref's
	// repository on the local image ref names: a push to or a pull from
	// that repository records one; an image only built here has none. A
	// missing image is an error wrapping sandboxagent.ErrImageNotFound.
	RepoDigests(ctx context.Context, ref string) ([]string, error)
}

// RegistryEngine is what pushing and comparing digests need beside
// Engine. ClientEngine implements it.
type RegistryEngine interface {
	Engine
	RepoDigester
	// RegistryDigest returns the digest of the manifest ref's registry
	// serves under ref, or "" when it has none. An unreachable registry,
	// refused credentials or an engine that cannot ask (ErrNoDistribution)
	// is an error.
	RegistryDigest(ctx context.Context, ref string) (string, error)
}

// DigestError: an image is not the one it should be. Ref is the image;
// Local its repo digests for Ref's repository. Against the registry
// (Builder.CheckRegistry) Registry is what the registry serves; against
// the release (VerifyDigest) Recorded is the digest compiled in, "" when
// none is. errors.Is matches sandboxagent.ErrImageDigest.
type DigestError struct {
	Ref      string
	Local    []string
	Registry string
	Recorded string
}

func (e *DigestError) Error() string {
	local := "none (the engine recorded no digest of its repository for it: push or pull it)"
	if len(e.Local) > 0 {
		local = strings.Join(e.Local, ",")
	}
	switch {
	case e.Registry != "":
		return fmt.Sprintf("%s: image digest mismatch: local %s, registry %s", e.Ref, local, e.Registry)
	case e.Recorded == "":
		return fmt.Sprintf("%s: image digest mismatch: image_verify is strict and this binary recorded no digest for it (digests.json)", e.Ref)
	}
	return fmt.Sprintf("%s: image digest mismatch: local %s, recorded at release %s", e.Ref, local, e.Recorded)
}

func (e *DigestError) Unwrap() error { return sandboxagent.ErrImageDigest }

// VerifyDigest checks the local image ref against the digest this binary
// recorded at release for its tag (catalog.ReleasedDigest). Under
// catalog.VerifyOff (or "") it checks nothing and asks the engine nothing.
// Under catalog.VerifyStrict a tag with no recorded digest, or a local
// image that does not carry the recorded digest among its repo digests
// for ref's repository, is a *DigestError (errors.Is: sandboxagent.ErrImageDigest);
// a missing image wraps sandboxagent.ErrImageNotFound. The engine records
// repo digests when it pushes or pulls: an image built locally has none
// and fails strict verification even when its content is the same.
func VerifyDigest(ctx context.Context, eng RepoDigester, ref string, mode catalog.Verify) error {
	switch mode {
	case "", catalog.VerifyOff:
		return nil
	case catalog.VerifyStrict:
	default:
		_, err := catalog.ParseVerify(string(mode))
		return invalidArgument(err)
	}
	if eng == nil {
		return fmt.Errorf("%w: images: nil engine", sandboxagent.ErrInvalidArgument)
	}
	want, ok := releasedDigest(ref)
	if !ok {
		return &DigestError{Ref: ref}
	}
	local, err := eng.RepoDigests(ctx, ref)
	if err != nil {
		return err
	}
	if !slices.Contains(local, want) {
		return &DigestError{Ref: ref, Local: local, Recorded: want}
	}
	return nil
}

// emptyAuth is an X-Registry-Auth value without credentials (base64 of {}).
const emptyAuth = "e30="

// releasedDigest is catalog.ReleasedDigest (tests record digests of
// their own).
var releasedDigest = catalog.ReleasedDigest

// RepoDigests implements RepoDigester.
func (e *ClientEngine) RepoDigests(ctx context.Context, ref string) ([]string, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return nil, fmt.Errorf("%w: image reference %q: %w", sandboxagent.ErrInvalidArgument, ref, err)
	}
	res, err := e.c.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %s is not in the engine", sandboxagent.ErrImageNotFound, ref)
	}
	if err != nil {
		return nil, err
	}
	return repoDigests(res.RepoDigests, named.Name()), nil
}

// repoDigests picks the digests of repo (a normalized name) out of an
// image's RepoDigests ("name@sha256:…"), without duplicates.
func repoDigests(all []string, repo string) []string {
	var out []string
	for _, rd := range all {
		p, err := reference.ParseNormalizedNamed(rd)
		if err != nil {
			continue
		}
		c, ok := p.(reference.Canonical)
		if !ok || p.Name() != repo {
			continue
		}
		if d := c.Digest().String(); !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// RegistryDigest implements RegistryEngine through DistributionInspect,
// with the credentials of the Docker config file for ref's registry.
func (e *ClientEngine) RegistryDigest(ctx context.Context, ref string) (string, error) {
	auth, host, err := e.registryAuth(ref)
	if err != nil {
		return "", err
	}
	res, err := e.c.DistributionInspect(ctx, ref, client.DistributionInspectOptions{EncodedRegistryAuth: auth})
	if err == nil {
		d := res.Descriptor.Digest.String()
		if d == "" {
			return "", fmt.Errorf("the engine reported no digest for %s", ref)
		}
		return d, nil
	}
	if cerrdefs.IsNotFound(err) || strings.Contains(err.Error(), "manifest unknown") {
		if routeMissing(err) {
			return "", fmt.Errorf("%s: %w", ref, ErrNoDistribution)
		}
		return "", nil
	}
	return "", authHint(err, host, auth)
}

// routeMissing tells a 404 of the engine's router (no such endpoint:
// Podman 4.3 answers a bare "Not Found", or "Path … is not supported" when
// the reference has no slash) from the registry's answer relayed by the
// engine ("manifest unknown", "repository … not found").
func routeMissing(err error) bool {
	msg := strings.ToLower(strings.TrimSpace(err.Error()))
	msg = strings.TrimSpace(strings.TrimPrefix(msg, "error response from daemon:"))
	return msg == "not found" || msg == "page not found" || msg == "404 page not found" ||
		(strings.HasPrefix(msg, "path ") && strings.HasSuffix(msg, " is not supported"))
}

func (b *Builder) registryEngine() (RegistryEngine, error) {
	re, ok := b.eng.(RegistryEngine)
	if !ok {
		return nil, fmt.Errorf("%w: images: this engine cannot report image digests (it does not implement images.RegistryEngine)", sandboxagent.ErrInvalidArgument)
	}
	return re, nil
}

// Pushed is one image of Builder.Push.
type Pushed struct {
	Image catalog.Image
	// Digest is the digest its registry now serves under the tag.
	Digest string
	// Already: the registry already served this image under the tag;
	// nothing was pushed.
	Already bool
}

// Push pushes the named local images (see Plan; none = all), base first,
// under their tags (Options.Repo replaces the repository) and returns the
// digest each one's registry then serves. Before anything is pushed: an
// image missing locally is an error wrapping sandboxagent.ErrImageNotFound
// (build it first), and a tag the registry already serves as another
// image is refused with ErrImageExists unless Options.Force (tags are
// immutable: bump image_date). A tag the registry already serves as this
// image is not pushed again (Pushed.Already). After each push the
// registry's digest must be one the engine recorded for the image.
func (b *Builder) Push(ctx context.Context, names ...string) ([]Pushed, error) {
	re, err := b.registryEngine()
	if err != nil {
		return nil, err
	}
	targets, err := b.Plan(names...)
	if err != nil {
		return nil, err
	}
	var missing, missingNames []string
	for _, t := range targets {
		ok, err := re.ImageExists(ctx, t.Tag)
		if err != nil {
			return nil, fmt.Errorf("checking %s: %w", t.Tag, err)
		}
		if !ok {
			missing = append(missing, t.Tag)
			missingNames = append(missingNames, t.CLI)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: not in the engine, nothing pushed: %s; build first: sandbox-agent images build %s",
			sandboxagent.ErrImageNotFound, strings.Join(missing, ", "), strings.Join(missingNames, " "))
	}
	remote := make([]string, len(targets))
	already := make([]bool, len(targets))
	var conflicts []string
	for i, t := range targets {
		if remote[i], err = re.RegistryDigest(ctx, t.Tag); err != nil {
			return nil, fmt.Errorf("checking %s in its registry: %w", t.Tag, err)
		}
		if remote[i] == "" {
			continue
		}
		local, err := re.RepoDigests(ctx, t.Tag)
		if err != nil {
			return nil, err
		}
		already[i] = slices.Contains(local, remote[i])
		if !already[i] {
			conflicts = append(conflicts, fmt.Sprintf("%s (registry %s, local %s)", t.Tag, remote[i], orNone(local)))
		}
	}
	if len(conflicts) > 0 && !b.opts.Force {
		return nil, fmt.Errorf("%w: refusing to overwrite, nothing pushed: the registry serves another image under %s; bump image_date in versions.json, or pass --force",
			ErrImageExists, strings.Join(conflicts, ", "))
	}
	var out []Pushed
	for i, t := range targets {
		if already[i] {
			fmt.Fprintf(b.progress, "==> %s: its registry already has it (%s)\n", t.Tag, remote[i])
			out = append(out, Pushed{Image: t, Digest: remote[i], Already: true})
			continue
		}
		fmt.Fprintf(b.progress, "==> pushing %s\n", t.Tag)
		if err := re.Push(ctx, t.Tag, b.progress); err != nil {
			return out, fmt.Errorf("push %s: %w", t.Tag, err)
		}
		d, err := re.RegistryDigest(ctx, t.Tag)
		if err != nil {
			return out, fmt.Errorf("checking %s in its registry after the push: %w", t.Tag, err)
		}
		local, err := re.RepoDigests(ctx, t.Tag)
		if err != nil {
			return out, err
		}
		if d == "" {
			return out, fmt.Errorf("push %s: the engine reported success but the registry does not have it", t.Tag)
		}
		if !slices.Contains(local, d) {
			// Another push raced ours, or the engine records no digests.
			return out, fmt.Errorf("push %s: %w", t.Tag, &DigestError{Ref: t.Tag, Local: local, Registry: d})
		}
		fmt.Fprintf(b.progress, "==> pushed %s %s\n", t.Tag, d)
		out = append(out, Pushed{Image: t, Digest: d})
	}
	return out, nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}

// RegistryStatus is one image of Builder.CheckRegistry.
type RegistryStatus struct {
	Image catalog.Image
	// Local: the engine has the image.
	Local bool
	// LocalDigests are its repo digests for the tag's repository.
	LocalDigests []string
	// RegistryDigest is what its registry serves under the tag; "" when
	// the registry does not have it.
	RegistryDigest string
}

// Match reports whether the local image is the one the registry serves:
// both have it and the registry's digest is one of the local image's repo
// digests.
func (s RegistryStatus) Match() bool {
	return s.Local && s.RegistryDigest != "" && slices.Contains(s.LocalDigests, s.RegistryDigest)
}

// Err is nil when there is nothing to compare (the image is missing on
// one side) or the digests match, else a *DigestError.
func (s RegistryStatus) Err() error {
	if !s.Local || s.RegistryDigest == "" || s.Match() {
		return nil
	}
	return &DigestError{Ref: s.Image.Tag, Local: s.LocalDigests, Registry: s.RegistryDigest}
}

// CheckRegistry reports, for the named images (none = all), whether the
// engine has them, whether their registry has them, and both digests. An
// engine or registry that cannot answer is an error.
func (b *Builder) CheckRegistry(ctx context.Context, names ...string) ([]RegistryStatus, error) {
	re, err := b.registryEngine()
	if err != nil {
		return nil, err
	}
	targets, err := b.Plan(names...)
	if err != nil {
		return nil, err
	}
	out := make([]RegistryStatus, 0, len(targets))
	for _, t := range targets {
		st := RegistryStatus{Image: t}
		if st.Local, err = re.ImageExists(ctx, t.Tag); err != nil {
			return out, fmt.Errorf("checking %s: %w", t.Tag, err)
		}
		if st.Local {
			if st.LocalDigests, err = re.RepoDigests(ctx, t.Tag); err != nil {
				return out, err
			}
		}
		if st.RegistryDigest, err = re.RegistryDigest(ctx, t.Tag); err != nil {
			return out, fmt.Errorf("checking %s in its registry: %w", t.Tag, err)
		}
		out = append(out, st)
	}
	return out, nil
}
