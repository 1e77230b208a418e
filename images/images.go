// Package images builds, checks and pushes the sandbox-agent images: a base
// image and one image per agent CLI, from the Dockerfiles and versions.json
// embedded in package images/catalog (catalog.Files), so a binary alone
// can build every image. Tags come from versions.json only:
// {repo}:{cli}-{version}-{date} and {repo}:base-{date}; never latest.
//
// Builds go through a narrow Engine (ImageExists, Build, Push, RegistryHas);
// NewEngine implements it over the Docker Engine API client with the
// classic builder, which every engine speaking API 1.41 or later supports.
package images

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
)

// ErrImageExists: a tag to build already exists (locally, or in the
// registry when pushing) and Force was not given.
var ErrImageExists = errors.New("image already exists")

// Engine is what building needs from a container engine.
type Engine interface {
	// ImageExists reports whether ref is present in the engine's store.
	ImageExists(ctx context.Context, ref string) (bool, error)
	// Build runs one image build and tags the result req.Tag. progress
	// receives the build output as it comes.
	Build(ctx context.Context, req BuildRequest, progress io.Writer) error
	// Push pushes ref to its registry.
	Push(ctx context.Context, ref string, progress io.Writer) error
	// RegistryHas reports whether ref exists in its registry.
	RegistryHas(ctx context.Context, ref string) (bool, error)
}

// BuildRequest is one image build.
type BuildRequest struct {
	Tag string
	// Dockerfile is the Dockerfile's path inside Context.
	Dockerfile string
	// Context is the build context, an uncompressed tar.
	Context   []byte
	BuildArgs map[string]string
	Labels    map[string]string
	NoCache   bool
}

// Options configure a Builder. The zero value builds the embedded
// versions.json under its own repository without an extra CA.
type Options struct {
	// Versions overrides the embedded versions.json (tests).
	Versions *catalog.VersionsFile
	// Files overrides the embedded build inputs (must hold docker/).
	Files fs.FS
	// Repo replaces the repository of every tag (Config.ImageName,
	// SANDBOX_AGENT_IMAGE_NAME); "" means versions.json's repo.
	Repo string
	// CACertFile is a PEM bundle the builds trust (TLS-intercepting
	// proxies). It goes into the build context as ca/ca.crt and is trusted
	// only while building; "" means none.
	CACertFile string
	// Force rebuilds (and re-pushes) tags that already exist.
	Force bool
	// NoCache builds without the engine's layer cache.
	NoCache bool
	// Push pushes every built target after all builds succeeded.
	Push bool
	// Progress receives build and push output; nil discards it.
	Progress io.Writer
}

// Builder builds images on one engine. It is safe for concurrent use.
type Builder struct {
	eng      Engine
	opts     Options
	versions catalog.VersionsFile
	files    fs.FS
	progress io.Writer

	ca      []byte // CA bundle for the build context, nil without one
	ctxOnce sync.Once
	ctxTar  []byte
	ctxErr  error
}

// New returns a Builder for eng.
func New(eng Engine, opts Options) (*Builder, error) {
	if eng == nil {
		return nil, fmt.Errorf("%w: images: nil engine", sandboxagent.ErrInvalidArgument)
	}
	b := &Builder{eng: eng, opts: opts, files: opts.Files, progress: opts.Progress}
	if opts.Versions != nil {
		if err := opts.Versions.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %w", sandboxagent.ErrInvalidArgument, err)
		}
		b.versions = *opts.Versions
	} else {
		b.versions = catalog.Versions()
	}
	if b.files == nil {
		b.files = catalog.Files()
	}
	if b.progress == nil {
		b.progress = io.Discard
	}
	if opts.Repo != "" {
		if err := catalog.CheckRepo(opts.Repo); err != nil {
			return nil, invalidArgument(err)
		}
	}
	if opts.CACertFile != "" {
		ca, err := ReadCA(opts.CACertFile)
		if err != nil {
			return nil, err
		}
		b.ca = ca
	}
	return b, nil
}

// Versions returns the versions the Builder works from.
func (b *Builder) Versions() catalog.VersionsFile { return b.versions }

// Plan returns the images named (CLI names, or "base"), base first then
// the CLIs in their fixed order, without duplicates. No names means all:
// the base and every CLI.
func (b *Builder) Plan(names ...string) ([]catalog.Image, error) {
	if len(names) == 0 {
		return b.versions.Images(b.opts.Repo), nil
	}
	want := map[string]bool{}
	for _, n := range names {
		if _, err := b.versions.Image(n, b.opts.Repo); err != nil {
			return nil, invalidArgument(err)
		}
		want[n] = true
	}
	var out []catalog.Image
	for _, s := range b.versions.Images(b.opts.Repo) {
		if want[s.CLI] {
			out = append(out, s)
		}
	}
	return out, nil
}

// Result says what happened to one image.
type Result struct {
	Image    catalog.Image
	Built    bool
	Pushed   bool
	Duration time.Duration // of the build
}

// Build builds the named images (see Plan; none = all), base first. A
// missing base is built even when not named. Without Force, a target that
// already exists locally (or, with Push, in the registry) is refused with
// ErrImageExists before anything is built. With Push, every target is
// pushed once all builds succeeded.
func (b *Builder) Build(ctx context.Context, names ...string) ([]Result, error) {
	targets, err := b.Plan(names...)
	if err != nil {
		return nil, err
	}
	if !b.opts.Force {
		if err := b.refuseExisting(ctx, targets); err != nil {
			return nil, err
		}
	}
	base := b.versions.BaseImage(b.opts.Repo)
	var results []Result
	if targets[0].CLI != catalog.BaseName {
		ok, err := b.eng.ImageExists(ctx, base.Tag)
		if err != nil {
			return nil, fmt.Errorf("checking %s: %w", base.Tag, err)
		}
		if !ok {
			fmt.Fprintf(b.progress, "==> base image %s is missing: building it first\n", base.Tag)
			r, err := b.buildOne(ctx, base)
			if err != nil {
				return results, err
			}
			results = append(results, r)
		}
	}
	for _, t := range targets {
		r, err := b.buildOne(ctx, t)
		if err != nil {
			return results, err
		}
		results = append(results, r)
	}
	if b.opts.Push {
		for i := range results {
			if !slices.Contains(targets, results[i].Image) {
				continue // a base built only as a dependency
			}
			tag := results[i].Image.Tag
			fmt.Fprintf(b.progress, "==> pushing %s\n", tag)
			if err := b.eng.Push(ctx, tag, b.progress); err != nil {
				return results, fmt.Errorf("push %s: %w", tag, err)
			}
			results[i].Pushed = true
		}
	}
	return results, nil
}

func (b *Builder) refuseExisting(ctx context.Context, targets []catalog.Image) error {
	var found []string
	for _, t := range targets {
		ok, err := b.eng.ImageExists(ctx, t.Tag)
		if err != nil {
			return fmt.Errorf("checking %s: %w", t.Tag, err)
		}
		if ok {
			found = append(found, t.Tag+" (local)")
			continue
		}
		if b.opts.Push {
			ok, err := b.eng.RegistryHas(ctx, t.Tag)
			if err != nil {
				return fmt.Errorf("checking %s in its registry: %w", t.Tag, err)
			}
			if ok {
				found = append(found, t.Tag+" (registry)")
			}
		}
	}
	if len(found) > 0 {
		return fmt.Errorf("%w: refusing to overwrite %s; bump image_date in versions.json, or pass --force to rebuild", ErrImageExists, strings.Join(found, ", "))
	}
	return nil
}

func (b *Builder) buildOne(ctx context.Context, img catalog.Image) (Result, error) {
	req, err := b.Request(img)
	if err != nil {
		return Result{}, err
	}
	fmt.Fprintf(b.progress, "==> building %s (%s)\n", img.Tag, req.Dockerfile)
	start := time.Now()
	if err := b.eng.Build(ctx, req, b.progress); err != nil {
		return Result{}, fmt.Errorf("build %s: %w", img.Tag, err)
	}
	d := time.Since(start)
	fmt.Fprintf(b.progress, "==> built %s in %s\n", img.Tag, d.Round(time.Second))
	return Result{Image: img, Built: true, Duration: d}, nil
}

// Request returns the build request of one image: the shared build
// context, its Dockerfile, build args and labels.
func (b *Builder) Request(img catalog.Image) (BuildRequest, error) {
	b.ctxOnce.Do(func() {
		b.ctxTar, b.ctxErr = BuildContext(b.files, b.ca)
	})
	if b.ctxErr != nil {
		return BuildRequest{}, b.ctxErr
	}
	v := b.versions
	req := BuildRequest{
		Tag:        img.Tag,
		Dockerfile: "Dockerfile." + img.CLI,
		Context:    b.ctxTar,
		NoCache:    b.opts.NoCache,
		Labels: map[string]string{
			"org.opencontainers.image.source": "https://github.com/sandbox-agent/sandbox-agent",
			"io.github.sandbox-agent.image":   img.CLI,
			"io.github.sandbox-agent.date":    v.ImageDate,
		},
	}
	if _, err := fs.Stat(b.files, "docker/"+req.Dockerfile); err != nil {
		return BuildRequest{}, fmt.Errorf("no docker/%s in the image files: %w", req.Dockerfile, err)
	}
	if img.CLI == catalog.BaseName {
		req.BuildArgs = map[string]string{
			"DEBIAN_IMAGE":  v.Base.From,
			"NODE_VERSION":  v.Base.NodeVersion,
			"NPM_VERSION":   v.Base.NPMVersion,
			"NPM_INTEGRITY": v.Base.NPMIntegrity,
		}
		for arch, sri := range v.Base.NodeIntegrity {
			req.BuildArgs["NODE_INTEGRITY_"+strings.ToUpper(arch)] = sri
		}
		req.Labels["io.github.sandbox-agent.node-version"] = v.Base.NodeVersion
		return req, nil
	}
	c := v.CLIs[img.CLI]
	req.BuildArgs = map[string]string{
		"BASE_IMAGE":  v.BaseImage(b.opts.Repo).Tag,
		"CLI_PACKAGE": c.Package,
		"CLI_VERSION": c.Version,
	}
	if len(c.NPMAllowScripts) > 0 {
		req.BuildArgs["NPM_ALLOW_SCRIPTS"] = strings.Join(c.NPMAllowScripts, ",")
	}
	if len(c.NPMOverrides) > 0 {
		ov, err := json.Marshal(c.NPMOverrides) // keys sorted: stable cache key
		if err != nil {
			return BuildRequest{}, err
		}
		req.BuildArgs["NPM_OVERRIDES"] = string(ov)
	}
	req.Labels["io.github.sandbox-agent.cli-package"] = c.Package
	req.Labels["io.github.sandbox-agent.cli-version"] = c.Version
	req.Labels["org.opencontainers.image.version"] = c.Version
	return req, nil
}

// Ensure returns the tag of cli's image, building it (and the base first,
// when missing) if the engine does not have it. Concurrent calls for the
// same tag build it once; the others wait for that build. A failed build
// is an error wrapping sandboxagent.ErrImageNotFound.
func (b *Builder) Ensure(ctx context.Context, cli string) (string, error) {
	img, err := b.versions.Image(cli, b.opts.Repo)
	if err != nil {
		return "", invalidArgument(err)
	}
	ok, err := b.eng.ImageExists(ctx, img.Tag)
	if err != nil {
		return "", fmt.Errorf("checking %s: %w", img.Tag, err)
	}
	if ok {
		return img.Tag, nil
	}
	err = ensureGroup.do(ctx, img.Tag, func() error {
		// Another caller may have built it between our check and now.
		if ok, err := b.eng.ImageExists(ctx, img.Tag); err == nil && ok {
			return nil
		}
		base := b.versions.BaseImage(b.opts.Repo)
		if img.CLI != catalog.BaseName {
			if err := ensureGroup.do(ctx, base.Tag, func() error {
				ok, err := b.eng.ImageExists(ctx, base.Tag)
				if err != nil || ok {
					return err
				}
				_, err = b.buildOne(ctx, base)
				return err
			}); err != nil {
				return err
			}
		}
		_, err := b.buildOne(ctx, img)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("%w: %s is not in the engine and building it failed: %w", sandboxagent.ErrImageNotFound, img.Tag, err)
	}
	return img.Tag, nil
}

// Ensure is Builder.Ensure with the embedded versions, the default
// repository and $SSL_CERT_FILE as the CA bundle when it names a readable
// PEM bundle (otherwise builds trust no extra CA).
func Ensure(ctx context.Context, eng Engine, cli string, progress io.Writer) (string, error) {
	opts := Options{Progress: progress}
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		if _, err := ReadCA(f); err == nil {
			opts.CACertFile = f
		}
	}
	b, err := New(eng, opts)
	if err != nil {
		return "", err
	}
	return b.Ensure(ctx, cli)
}

// Status is where one image was found.
type Status struct {
	Image    catalog.Image
	Local    bool
	Registry bool // only checked when asked
}

// Check reports, for the named images (none = all), whether the engine
// has them and, with registry, whether their registry has them. An engine
// or registry that cannot answer is an error.
func (b *Builder) Check(ctx context.Context, registry bool, names ...string) ([]Status, error) {
	targets, err := b.Plan(names...)
	if err != nil {
		return nil, err
	}
	out := make([]Status, 0, len(targets))
	for _, t := range targets {
		st := Status{Image: t}
		if st.Local, err = b.eng.ImageExists(ctx, t.Tag); err != nil {
			return out, fmt.Errorf("checking %s: %w", t.Tag, err)
		}
		if registry {
			if st.Registry, err = b.eng.RegistryHas(ctx, t.Tag); err != nil {
				return out, fmt.Errorf("checking %s in its registry: %w", t.Tag, err)
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// ensureGroup makes concurrent Ensure calls for one tag share one build.
var ensureGroup flightGroup

// flightGroup is a minimal singleflight: calls with the same key while one
// is running wait for it and share its error.
type flightGroup struct {
	mu    sync.Mutex
	calls map[string]*flight
}

type flight struct {
	done chan struct{}
	err  error
}

func (g *flightGroup) do(ctx context.Context, key string, fn func() error) error {
	g.mu.Lock()
	if g.calls == nil {
		g.calls = map[string]*flight{}
	}
	if f, ok := g.calls[key]; ok {
		g.mu.Unlock()
		select {
		case <-f.done:
			return f.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f := &flight{done: make(chan struct{})}
	g.calls[key] = f
	g.mu.Unlock()

	defer func() {
		g.mu.Lock()
		delete(g.calls, key)
		g.mu.Unlock()
		close(f.done)
	}()
	f.err = fn()
	return f.err
}

// invalidArgument adds sandboxagent.ErrInvalidArgument to the chain of an
// error of package catalog (which wraps its own ErrInvalidArgument),
// keeping its message: this package's callers test for the library's.
func invalidArgument(err error) error { return argumentError{err} }

type argumentError struct{ error }

func (e argumentError) Unwrap() []error {
	return []error{e.error, sandboxagent.ErrInvalidArgument}
}
