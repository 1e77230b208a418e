package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/images"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
)

// imagesUsage is the help of `images`; the CLI names come from versions.json,
// read when asked rather than at init: a package-level string would parse and
// validate versions.json at every start of every command.
func imagesUsage() string {
	return `usage: sandbox-agent images COMMAND [ARGS...]

commands:
  names                     print every image name (base first, then each CLI), one per line
  list                      print every image tag (base first), one per line
  which CLI                 print the image CLI runs in
  build [flags] [NAME...]   build images (default: base and every CLI; base first)
      --push                push every built image (after all builds succeeded)
      --force               rebuild tags that already exist (locally or, with --push, in the registry)
      --no-cache            build without the engine's layer cache
      --ca-cert FILE        PEM bundle trusted during the build (default: ca_cert_file / $SSL_CERT_FILE;
                            --ca-cert "" for none)
  push [--force] [NAME...]  push the local images (default: all; base first) and print
                            "TAG<TAB>sha256:DIGEST" per image, the digest the registry now has;
                            a missing local image is an error (build it first); a tag the
                            registry serves as another image is refused unless --force
  check [--registry] [NAME...]
                            check the images exist locally; with --registry also in their
                            registry, and compare the local image's digest with the registry's
                            ("digest ok" or "digest MISMATCH local ... registry ..."); with
                            image_verify=strict, compare each local image with the digest
                            recorded at release. Exit 125 when an image is missing (with
                            --registry: missing in the registry), 3 when a digest differs or
                            cannot be compared

NAME is a CLI (` + strings.Join(catalog.Versions().CLINames(), ", ") + `) or "base". Tags come from the
versions.json compiled into this binary; SANDBOX_AGENT_IMAGE_NAME (image_name)
replaces the repository part.
`
}

// runImages lists, resolves, builds and checks the agent images.
func runImages(ctx context.Context, a *app, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(a.stderr, imagesUsage())
		return exitError
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(a.stdout, imagesUsage())
		return exitOK
	case "names":
		return imagesNames(a, args[1:])
	case "list":
		return imagesList(a, args[1:])
	case "which":
		return imagesWhich(a, args[1:])
	case "build":
		return imagesBuild(ctx, a, args[1:])
	case "check":
		return imagesCheck(ctx, a, args[1:])
	case "push":
		return imagesPush(ctx, a, args[1:])
	}
	fmt.Fprintf(a.stderr, "sandbox-agent: images: unknown command %q\n", args[0])
	fmt.Fprint(a.stderr, imagesUsage())
	return exitError
}

func imagesFlags(a *app, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("images "+name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() { fmt.Fprint(a.stderr, imagesUsage()) }
	return fs
}

// imagesNames prints the names `build` and `check` take: scripts loop
// over them instead of keeping their own list of CLIs.
func imagesNames(a *app, args []string) int {
	fs := imagesFlags(a, "names")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if fs.NArg() > 0 {
		return a.fail(fmt.Errorf("%w: images names takes no arguments", sandboxagent.ErrInvalidArgument))
	}
	fmt.Fprintln(a.stdout, catalog.BaseName)
	for _, n := range catalog.Versions().CLINames() {
		fmt.Fprintln(a.stdout, n)
	}
	return exitOK
}

func imagesList(a *app, args []string) int {
	fs := imagesFlags(a, "list")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if fs.NArg() > 0 {
		return a.fail(fmt.Errorf("%w: images list takes no arguments", sandboxagent.ErrInvalidArgument))
	}
	if a.cfg.ImageName != "" {
		if err := catalog.CheckRepo(a.cfg.ImageName); err != nil {
			return a.fail(err)
		}
	}
	for _, img := range catalog.Versions().Images(a.cfg.ImageName) {
		fmt.Fprintln(a.stdout, img.Tag)
	}
	return exitOK
}

func imagesWhich(a *app, args []string) int {
	fs := imagesFlags(a, "which")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if fs.NArg() != 1 {
		return a.fail(fmt.Errorf("%w: usage: sandbox-agent images which CLI", sandboxagent.ErrInvalidArgument))
	}
	name := fs.Arg(0)
	var tag string
	var err error
	if name == catalog.BaseName {
		if a.cfg.ImageName != "" {
			err = catalog.CheckRepo(a.cfg.ImageName)
		}
		tag = catalog.Versions().BaseImage(a.cfg.ImageName).Tag
	} else {
		tag, err = catalog.Resolve(name, "", a.cfg.ImageName, "")
	}
	if err != nil {
		return a.fail(err)
	}
	fmt.Fprintln(a.stdout, tag)
	return exitOK
}

// imageSource makes a sandbox's missing image present by image_policy:
// pull progress and build output go to stderr (a bar on a terminal).
func (a *app) imageSource(ctx context.Context) (sandboxagent.ImageSource, error) {
	if a.images != nil {
		return a.images, nil // serve's, shared by its agents
	}
	eng, err := a.engine(ctx)
	if err != nil {
		return nil, err
	}
	if eng.images == nil {
		if a.cfg.ImageVerify == catalog.VerifyStrict {
			// Never a silent downgrade: pinning pods to the recorded
			// digests is not built yet (TODO.md).
			return nil, fmt.Errorf("%w: image_verify strict needs a Docker engine to check digests; runtime kubernetes cannot verify them yet", sandboxagent.ErrUnsupportedByRuntime)
		}
		return nil, nil // the cluster pulls by imagePullPolicy (image_policy)
	}
	tty := false
	if f, ok := a.rawStderr.(*os.File); ok {
		tty = images.IsTerminal(f)
	}
	// The pull progress redraws its line with its own controls, so it
	// writes to the raw stream; the only text in it, the ref, is escaped.
	pw := images.NewProgressWriter(a.rawStderr, tty)
	onPull := func(pp images.PullProgress) {
		pp.Ref = line(a.red.redact(pp.Ref))
		pw.Pull(pp)
	}
	// The build trusts ca_cert_file as `images build` does: an unreadable
	// one fails the build with its name rather than build without it.
	return &images.Provider{
		Engine: eng.images, Policy: a.cfg.ImagePolicy,
		Build:  images.Options{Repo: a.cfg.ImageName, CACertFile: a.cfg.CACertFile, Progress: a.stderr},
		OnPull: onPull, Log: a.stderr, Verify: a.cfg.ImageVerify,
	}, nil
}

func (a *app) imageBuilder(ctx context.Context, opts images.Options) (*images.Builder, error) {
	eng, err := a.engine(ctx)
	if err != nil {
		return nil, err
	}
	if eng.images == nil {
		return nil, errNoImageEngine
	}
	opts.Repo = a.cfg.ImageName
	return images.New(eng.images, opts)
}

func imagesBuild(ctx context.Context, a *app, args []string) int {
	fs := imagesFlags(a, "build")
	push := fs.Bool("push", false, "push the built images")
	force := fs.Bool("force", false, "rebuild existing tags")
	noCache := fs.Bool("no-cache", false, "build without the layer cache")
	caCert := fs.String("ca-cert", a.cfg.CACertFile, "PEM bundle trusted during the build")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	b, err := a.imageBuilder(ctx, images.Options{
		CACertFile: *caCert,
		Force:      *force,
		NoCache:    *noCache,
		Push:       *push,
		Progress:   a.stderr,
	})
	if err != nil {
		return a.fail(err)
	}
	start := time.Now()
	results, err := b.Build(ctx, fs.Args()...)
	for _, r := range results {
		state := "built"
		if r.Pushed {
			state = "built+pushed"
		}
		fmt.Fprintf(a.stdout, "%s\t%s\t%s\n", r.Image.Tag, state, r.Duration.Round(time.Second))
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			err = fmt.Errorf("interrupted: %w", err)
		}
		return a.fail(err)
	}
	fmt.Fprintf(a.stderr, "==> done in %s\n", time.Since(start).Round(time.Second))
	return exitOK
}

// exitDigest: images check found an image whose digest differs from its
// registry's (or from the one recorded at release), or cannot be compared.
const exitDigest = 3

func imagesCheck(ctx context.Context, a *app, args []string) int {
	fs := imagesFlags(a, "check")
	reg := fs.Bool("registry", false, "also check the registry and compare digests")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	b, err := a.imageBuilder(ctx, images.Options{})
	if err != nil {
		return a.fail(err)
	}
	if *reg {
		return imagesCheckRegistry(ctx, a, b, fs.Args())
	}
	statuses, err := b.Check(ctx, false, fs.Args()...)
	strict := a.cfg.ImageVerify == catalog.VerifyStrict
	var missing []string
	var mismatched []error
	for _, s := range statuses {
		if !s.Local {
			missing = append(missing, s.Image.Tag)
			fmt.Fprintf(a.stdout, "%s\tnot-local\n", s.Image.Tag)
			continue
		}
		if !strict {
			fmt.Fprintf(a.stdout, "%s\tlocal\n", s.Image.Tag)
			continue
		}
		verdict, verr := a.verifyLocal(ctx, s.Image.Tag)
		if verr != nil {
			return a.fail(verr)
		}
		if !strings.HasPrefix(verdict, "digest ok") {
			mismatched = append(mismatched, fmt.Errorf("%s: %s", s.Image.Tag, verdict))
		}
		fmt.Fprintf(a.stdout, "%s\tlocal\t%s\n", s.Image.Tag, verdict)
	}
	if err != nil {
		return a.fail(err)
	}
	if len(missing) > 0 {
		return a.fail(fmt.Errorf("%w: missing in the engine: %s", sandboxagent.ErrImageNotFound, strings.Join(missing, ", ")))
	}
	return a.digestFailures(mismatched)
}

// verifyLocal checks one local image against the digest recorded at
// release (image_verify strict) and says how it went; a failure to ask the
// engine is the error.
func (a *app) verifyLocal(ctx context.Context, tag string) (string, error) {
	eng, err := a.engine(ctx)
	if err != nil {
		return "", err
	}
	rd, ok := eng.images.(images.RepoDigester)
	if !ok {
		return "", fmt.Errorf("%w: this engine cannot report image digests", sandboxagent.ErrInvalidArgument)
	}
	err = images.VerifyDigest(ctx, rd, tag, catalog.VerifyStrict)
	var de *images.DigestError
	switch {
	case err == nil:
		d, _ := catalog.ReleasedDigest(tag)
		return "digest ok " + d, nil
	case errors.As(err, &de) && de.Recorded == "":
		return "digest MISMATCH nothing recorded at release for this tag", nil
	case errors.As(err, &de):
		return fmt.Sprintf("digest MISMATCH local %s recorded %s", digestList(de.Local), de.Recorded), nil
	}
	return "", err
}

func digestList(d []string) string {
	if len(d) == 0 {
		return "none"
	}
	return strings.Join(d, ",")
}

// imagesCheckRegistry is check --registry: presence on both sides and, for
// images on both, whether the local image is the one the registry serves.
func imagesCheckRegistry(ctx context.Context, a *app, b *images.Builder, names []string) int {
	statuses, err := b.CheckRegistry(ctx, names...)
	var missing []string
	var mismatched []error
	for _, s := range statuses {
		where := "not-local"
		if s.Local {
			where = "local"
		}
		verdict := "-"
		if s.RegistryDigest == "" {
			where += ",not-in-registry"
			missing = append(missing, s.Image.Tag)
		} else {
			where += ",registry"
		}
		if s.Local && s.RegistryDigest != "" {
			if s.Match() {
				verdict = "digest ok " + s.RegistryDigest
			} else {
				verdict = fmt.Sprintf("digest MISMATCH local %s registry %s", digestList(s.LocalDigests), s.RegistryDigest)
				mismatched = append(mismatched, s.Err())
			}
		}
		fmt.Fprintf(a.stdout, "%s\t%s\t%s\n", s.Image.Tag, where, verdict)
	}
	if err != nil {
		return a.fail(err)
	}
	if len(missing) > 0 {
		return a.fail(fmt.Errorf("%w: missing in the registry: %s", sandboxagent.ErrImageNotFound, strings.Join(missing, ", ")))
	}
	return a.digestFailures(mismatched)
}

// digestFailures reports digest mismatches (exit 3), or nothing.
func (a *app) digestFailures(errs []error) int {
	if len(errs) == 0 {
		return exitOK
	}
	for _, e := range errs {
		fmt.Fprintf(a.stderr, "sandbox-agent: %s\n", errText(e))
	}
	fmt.Fprintf(a.stderr, "sandbox-agent: %v: %d image(s) are not the expected ones\n", sandboxagent.ErrImageDigest, len(errs))
	return exitDigest
}

func imagesPush(ctx context.Context, a *app, args []string) int {
	fs := imagesFlags(a, "push")
	force := fs.Bool("force", false, "overwrite a tag the registry serves as another image")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	b, err := a.imageBuilder(ctx, images.Options{Force: *force, Progress: a.stderr})
	if err != nil {
		return a.fail(err)
	}
	start := time.Now()
	pushed, err := b.Push(ctx, fs.Args()...)
	for _, p := range pushed {
		fmt.Fprintf(a.stdout, "%s\t%s\n", p.Image.Tag, p.Digest)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			err = fmt.Errorf("interrupted: %w", err)
		}
		return a.fail(err)
	}
	fmt.Fprintf(a.stderr, "==> pushed in %s\n", time.Since(start).Round(time.Second))
	return exitOK
}
