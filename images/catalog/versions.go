package catalog

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"
	"sync"
)

// The Dockerfiles and versions.json are compiled into the binary so that a
// user without a checkout can build every image (package images does that).
//
//go:embed versions.json docker
var imageFiles embed.FS

// DefaultRepo is the repository of the published images.
const DefaultRepo = "ghcr.io/sandbox-agent/sandbox-agent"

// BaseName is the name the base image goes by in tags ("base-<date>")
// and wherever a list of image names is accepted.
const BaseName = "base"

// VersionsFile is versions.json: the single source of every image tag and
// of what goes into each image.
type VersionsFile struct {
	// Repo is the default image repository (no tag).
	Repo string `json:"repo"`
	// ImageDate is YYYYMMDD, bumped by hand whenever an image must change
	// without a CLI version change (a new base, say).
	ImageDate string `json:"image_date"`
	// Base describes the base image every CLI image is built on.
	Base BaseSpec `json:"base"`
	// CLIs maps a CLI name (opencode, codex, claude, pi, dsh) to its pin.
	// versions.json is the one list of CLIs: everything that lists them
	// (image builds, set-up scripts, the driver table's test) reads it.
	CLIs map[string]CLISpec `json:"clis"`

	// order is the order of the "clis" keys in the parsed document: the
	// order CLIs are listed and built in.
	order []string
}

// BaseSpec is the base image's parameters (build args of
// docker/Dockerfile.base).
type BaseSpec struct {
	// From is the Debian image the base starts from.
	From string `json:"from"`
	// NodeVersion is the exact Node.js version (npm package node-linux-*).
	NodeVersion string `json:"node_version"`
	// NodeIntegrity is the npm SRI hash (sha512-...) of the node-linux-*
	// tarball per Debian architecture (amd64, arm64).
	NodeIntegrity map[string]string `json:"node_integrity"`
	// NPMVersion is the exact npm version installed next to node.
	NPMVersion string `json:"npm_version"`
	// NPMIntegrity is the SRI hash of the npm tarball.
	NPMIntegrity string `json:"npm_integrity"`
}

// CLISpec pins one agent CLI.
type CLISpec struct {
	// Package is the npm package.
	Package string `json:"package"`
	// Version is the exact package version (never a range or dist-tag).
	Version string `json:"version"`
	// NPMAllowScripts lists the packages whose install scripts npm may
	// run (npm 11 runs none unless allowed).
	NPMAllowScripts []string `json:"npm_allow_scripts,omitempty"`
	// NPMOverrides pins transitive dependencies (npm "overrides"); only
	// honoured by Dockerfiles that install into a project (dsh).
	NPMOverrides map[string]string `json:"npm_overrides,omitempty"`
}

// Image is one image to build or run: a CLI image, or the base (CLI ==
// BaseName, Package and Version empty).
type Image struct {
	CLI     string
	Package string
	Version string
	// Tag is the full reference, {repo}:{cli}-{version}-{date} or
	// {repo}:base-{date}.
	Tag string
}

var (
	dateRe = newLazyRE(`^[0-9]{8}$`)
	// An exact version: MAJOR.MINOR.PATCH with an optional pre-release and
	// build suffix (semver 2.0 syntax). Ranges, x-ranges and dist-tags fail.
	exactVersionRe = newLazyRE(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)
	cliNameRe      = newLazyRE(`^[a-z][a-z0-9-]*$`)
	// npm package name, optionally scoped.
	npmNameRe = newLazyRE(`^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$`)
	// A repository: lowercase path components separated by '/', with an
	// optional registry host[:port] first. No tag, no digest.
	repoRe = newLazyRE(`^([a-zA-Z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$`)
	sriRe  = newLazyRE(`^sha512-[A-Za-z0-9+/]{86}==$`)
)

// ParseVersions parses and validates a versions.json document: the date is
// YYYYMMDD, every version is exact (no ranges, no "latest"), package names
// and the repository are well formed, and at least one CLI is pinned. The
// order of the "clis" keys is kept (CLINames).
func ParseVersions(data []byte) (VersionsFile, error) {
	var v VersionsFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return VersionsFile{}, fmt.Errorf("versions.json: %w", err)
	}
	order, err := cliOrder(data)
	if err != nil {
		return VersionsFile{}, fmt.Errorf("versions.json: %w", err)
	}
	v.order = order
	if err := v.Validate(); err != nil {
		return VersionsFile{}, err
	}
	return v, nil
}

// Validate checks a VersionsFile (see ParseVersions).
func (v VersionsFile) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("versions.json: "+format, args...))
	}
	if !repoRe.MatchString(v.Repo) {
		bad("repo %q is not an image repository (no tag, no digest)", v.Repo)
	}
	if !dateRe.MatchString(v.ImageDate) || !validDate(v.ImageDate) {
		bad("image_date %q is not a date YYYYMMDD", v.ImageDate)
	}
	if v.Base.From == "" {
		bad("base.from is empty")
	}
	checkVersion := func(field, ver string) {
		if !exactVersionRe.MatchString(ver) {
			bad("%s %q is not an exact version (MAJOR.MINOR.PATCH[-pre]; no ranges, no latest)", field, ver)
		}
	}
	checkVersion("base.node_version", v.Base.NodeVersion)
	checkVersion("base.npm_version", v.Base.NPMVersion)
	for arch, sri := range v.Base.NodeIntegrity {
		if !sriRe.MatchString(sri) {
			bad("base.node_integrity.%s is not a sha512 SRI hash", arch)
		}
	}
	if v.Base.NPMIntegrity != "" && !sriRe.MatchString(v.Base.NPMIntegrity) {
		bad("base.npm_integrity is not a sha512 SRI hash")
	}
	if len(v.CLIs) == 0 {
		bad("clis is empty")
	}
	for _, name := range sortedKeys(v.CLIs) {
		c := v.CLIs[name]
		if !cliNameRe.MatchString(name) || name == BaseName {
			bad("clis: %q is not a valid CLI name", name)
		}
		if !npmNameRe.MatchString(c.Package) {
			bad("clis.%s.package %q is not an npm package name", name, c.Package)
		}
		checkVersion("clis."+name+".version", c.Version)
		for _, p := range c.NPMAllowScripts {
			if !npmNameRe.MatchString(p) {
				bad("clis.%s.npm_allow_scripts: %q is not an npm package name", name, p)
			}
		}
		for _, p := range sortedKeys(c.NPMOverrides) {
			if !npmNameRe.MatchString(p) {
				bad("clis.%s.npm_overrides: %q is not an npm package name", name, p)
			}
			checkVersion("clis."+name+".npm_overrides."+p, c.NPMOverrides[p])
		}
	}
	return errors.Join(errs...)
}

func validDate(s string) bool {
	month := s[4:6]
	day := s[6:8]
	return month >= "01" && month <= "12" && day >= "01" && day <= "31"
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var embeddedVersions = sync.OnceValues(func() (VersionsFile, error) {
	data, err := imageFiles.ReadFile("versions.json")
	if err != nil {
		return VersionsFile{}, err
	}
	return ParseVersions(data)
})

// Versions returns the versions.json compiled into this binary. It is
// parsed and validated once; an invalid embedded file is a build defect
// (the tests catch it) and panics.
func Versions() VersionsFile {
	v, err := embeddedVersions()
	if err != nil {
		panic("catalog: embedded " + err.Error())
	}
	return v
}

// Files returns the embedded build inputs: versions.json and the
// docker/ directory (Dockerfile.base, Dockerfile.<cli>, helper scripts).
func Files() fs.FS { return imageFiles }

// CLINames returns the CLI names of v in the order versions.json lists
// them (opencode, codex, claude, pi, dsh for the embedded file); names
// added to CLIs in code come after, sorted.
func (v VersionsFile) CLINames() []string {
	out := make([]string, 0, len(v.CLIs))
	for _, n := range v.order {
		if _, ok := v.CLIs[n]; ok {
			out = append(out, n)
		}
	}
	for _, n := range sortedKeys(v.CLIs) {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// cliOrder reads the keys of the top-level "clis" object in document
// order (a Go map forgets it).
func cliOrder(data []byte) ([]string, error) {
	var top struct {
		CLIs json.RawMessage `json:"clis"`
	}
	if err := json.Unmarshal(data, &top); err != nil || len(top.CLIs) == 0 {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(top.CLIs))
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	var names []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string)
		names = append(names, name)
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// BaseImage returns the base image under repo ("" = v.Repo).
func (v VersionsFile) BaseImage(repo string) Image {
	if repo == "" {
		repo = v.Repo
	}
	return Image{CLI: BaseName, Tag: repo + ":" + BaseName + "-" + v.ImageDate}
}

// Image returns the image of a CLI under repo ("" = v.Repo). name may also
// be BaseName. An unknown name is an error wrapping
// ErrInvalidArgument.
func (v VersionsFile) Image(name, repo string) (Image, error) {
	if name == BaseName {
		return v.BaseImage(repo), nil
	}
	c, ok := v.CLIs[name]
	if !ok {
		return Image{}, fmt.Errorf("%w: unknown CLI %q (known: %s)", ErrInvalidArgument, name, strings.Join(v.CLINames(), ", "))
	}
	if repo == "" {
		repo = v.Repo
	}
	return Image{
		CLI:     name,
		Package: c.Package,
		Version: c.Version,
		Tag:     fmt.Sprintf("%s:%s-%s-%s", repo, name, c.Version, v.ImageDate),
	}, nil
}

// Images returns the base then every CLI image under repo ("" = v.Repo).
func (v VersionsFile) Images(repo string) []Image {
	out := []Image{v.BaseImage(repo)}
	for _, n := range v.CLINames() {
		s, _ := v.Image(n, repo)
		out = append(out, s)
	}
	return out
}

// DefaultImage returns the built-in tag of a CLI's image.
func DefaultImage(cli string) (string, error) {
	s, err := Versions().Image(cli, "")
	if err != nil {
		return "", err
	}
	return s.Tag, nil
}

// CheckRepo validates an image-name override (SANDBOX_AGENT_IMAGE_NAME):
// a repository such as registry.example.com:5000/team/sandbox-agent,
// without tag or digest.
func CheckRepo(repo string) error {
	if !repoRe.MatchString(repo) {
		return fmt.Errorf("%w: image name %q is not a repository (expected e.g. registry.example.com/team/sandbox-agent, without tag or digest)", ErrInvalidArgument, repo)
	}
	return nil
}

// CheckRef refuses references that are unpinned: no tag (which means
// latest), or the tag "latest". A digest reference is accepted.
func CheckRef(ref string) error {
	if ref == "" || strings.TrimSpace(ref) != ref {
		return fmt.Errorf("%w: image reference %q is empty or has spaces", ErrInvalidArgument, ref)
	}
	if strings.Contains(ref, "@") {
		return nil
	}
	name, tag := ref, ""
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		name, tag = ref[:i], ref[i+1:]
	}
	if name == "" || tag == "" || tag == "latest" {
		return fmt.Errorf("%w: image %q is not pinned: give an explicit tag other than latest (or a digest)", ErrInvalidArgument, ref)
	}
	return nil
}

// Resolve says which image a CLI runs in. The first of these wins:
//  1. explicit: an image option given by the caller (must be pinned: a tag
//     other than latest, or a digest);
//  2. imageName: SANDBOX_AGENT_IMAGE_NAME (config key image_name), which replaces
//     the repository part of the derived tag ({imageName}:{cli}-{version}-{date});
//  3. driverDefault: the driver's own default image;
//  4. the built-in default ({repo}:{cli}-{version}-{date} from versions.json).
//
// Steps 2 and 4 need a CLI known to versions.json; an unknown CLI skips
// step 2 and, when nothing else resolves, is an error wrapping
// ErrInvalidArgument.
func Resolve(cli, explicit, imageName, driverDefault string) (string, error) {
	return Versions().Resolve(cli, explicit, imageName, driverDefault)
}

// Resolve is the package-level Resolve against v.
func (v VersionsFile) Resolve(cli, explicit, imageName, driverDefault string) (string, error) {
	if explicit != "" {
		if err := CheckRef(explicit); err != nil {
			return "", err
		}
		return explicit, nil
	}
	_, known := v.CLIs[cli]
	if imageName != "" {
		if err := CheckRepo(imageName); err != nil {
			return "", err
		}
		if known {
			s, _ := v.Image(cli, imageName)
			return s.Tag, nil
		}
	}
	if driverDefault != "" {
		if err := CheckRef(driverDefault); err != nil {
			return "", err
		}
		return driverDefault, nil
	}
	s, err := v.Image(cli, "")
	if err != nil {
		return "", err
	}
	return s.Tag, nil
}
