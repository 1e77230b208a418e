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
)

// imagesUsage is the help of `images`; the CLI names come from versions.json.
var imagesUsage = `usage: sandbox-agent images COMMAND [ARGS...]

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
  check [--registry] [NAME...]
                            check the images exist locally (and, with --registry, in their
                            registry); exit 125 when one is missing

NAME is a CLI (` + strings.Join(sandboxagent.Versions().CLINames(), ", ") + `) or "base". Tags come from the
versions.json compiled into this binary; SANDBOX_AGENT_IMAGE_NAME (image_name)
replaces the repository part.
`

// runImages lists, resolves, builds and checks the agent images.
func runImages(ctx context.Context, a *app, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(a.stderr, imagesUsage)
		return exitError
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(a.stdout, imagesUsage)
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
	}
	fmt.Fprintf(a.stderr, "sandbox-agent: images: unknown command %q\n", args[0])
	fmt.Fprint(a.stderr, imagesUsage)
	return exitError
}

func imagesFlags(a *app, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("images "+name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() { fmt.Fprint(a.stderr, imagesUsage) }
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
	fmt.Fprintln(a.stdout, sandboxagent.BaseImageName)
	for _, n := range sandboxagent.Versions().CLINames() {
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
		if err := sandboxagent.CheckImageRepo(a.cfg.ImageName); err != nil {
			return a.fail(err)
		}
	}
	for _, img := range sandboxagent.Versions().Images(a.cfg.ImageName) {
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
	if name == sandboxagent.BaseImageName {
		if a.cfg.ImageName != "" {
			err = sandboxagent.CheckImageRepo(a.cfg.ImageName)
		}
		tag = sandboxagent.Versions().BaseImage(a.cfg.ImageName).Tag
	} else {
		tag, err = sandboxagent.ResolveImage(name, "", a.cfg.ImageName, "")
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
	eng, err := a.engine(ctx)
	if err != nil {
		return nil, err
	}
	tty := false
	if f, ok := a.stderr.(*os.File); ok {
		tty = images.IsTerminal(f)
	}
	ca := ""
	if a.cfg.CACertFile != "" {
		if _, err := images.ReadCA(a.cfg.CACertFile); err == nil {
			ca = a.cfg.CACertFile
		}
	}
	return &images.Provider{
		Engine: eng.images, Policy: a.cfg.ImagePolicy,
		Build:  images.Options{Repo: a.cfg.ImageName, CACertFile: ca, Progress: a.stderr},
		OnPull: images.NewProgressWriter(a.stderr, tty).Pull, Log: a.stderr,
	}, nil
}

func (a *app) imageBuilder(ctx context.Context, opts images.Options) (*images.Builder, error) {
	eng, err := a.engine(ctx)
	if err != nil {
		return nil, err
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

func imagesCheck(ctx context.Context, a *app, args []string) int {
	fs := imagesFlags(a, "check")
	reg := fs.Bool("registry", false, "also check the registry")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	b, err := a.imageBuilder(ctx, images.Options{})
	if err != nil {
		return a.fail(err)
	}
	statuses, err := b.Check(ctx, *reg, fs.Args()...)
	var missing []string
	for _, s := range statuses {
		where := []string{}
		if s.Local {
			where = append(where, "local")
		} else {
			where = append(where, "not-local")
			if !*reg {
				missing = append(missing, s.Image.Tag)
			}
		}
		if *reg {
			if s.Registry {
				where = append(where, "registry")
			} else {
				where = append(where, "not-in-registry")
				missing = append(missing, s.Image.Tag)
			}
		}
		fmt.Fprintf(a.stdout, "%s\t%s\n", s.Image.Tag, strings.Join(where, ","))
	}
	if err != nil {
		return a.fail(err)
	}
	if len(missing) > 0 {
		place := "in the engine"
		if *reg {
			place = "in the registry"
		}
		return a.fail(fmt.Errorf("%w: missing %s: %s", sandboxagent.ErrImageNotFound, place, strings.Join(missing, ", ")))
	}
	return exitOK
}
