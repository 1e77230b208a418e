// Package repo carries a host git repository into a sandbox and brings
// what the agent did there back as a branch, a patch series or a bundle.
//
// The repository goes in as a fresh .git (its HEAD's history, to a depth,
// with a clean config: none of the host's remotes, hooks, includes or
// helpers) plus, optionally, the working tree's uncommitted and untracked
// files, committed in the sandbox as one commit on top of HEAD so the
// agent's work stays apart from the user's.
//
// What comes out is hostile input. A sync asks the sandbox for one git
// bundle of one ref (the agent's commits since the last sync and, as a
// last commit, what it left uncommitted), reads it under byte and object
// caps into a quarantine repository of its own (fsck on; the host's
// objects reachable only as alternates), checks every new object there
// (tree entry names, symlink targets, .gitmodules, blob sizes) and only
// then copies the objects into the host repository and moves one branch.
// The host's HEAD, index, working tree, config and other refs are not
// touched; git runs on the host with hooks, fsmonitor, system and global
// config off.
package repo

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sandbox-agent/sandbox-agent/internal/errdefs"
)

// Errors callers branch on with errors.Is.
var (
	// ErrNotRepository: the host folder is not a git work tree with a
	// commit.
	ErrNotRepository = errors.New("not a git repository with a commit")
	// ErrNoGit: git is missing, on the host or in the sandbox's image.
	ErrNoGit = errors.New("git not found")
	// ErrUnsafe: what the sandbox sent back was refused (see UnsafeError
	// for why); the host repository gained nothing.
	ErrUnsafe = errors.New("unsafe repository content")
	// ErrBranchExists: the branch asked for exists on the host and the
	// sync would not fast-forward it; nothing was changed.
	ErrBranchExists = errors.New("branch exists")
	// ErrOutside: the repository reaches outside Options.Within (its
	// git folder, objects or refs elsewhere, borrowed objects).
	ErrOutside = errors.New("repository reaches outside its folder")
	// ErrLimitExceeded: the sandbox's changes passed a cap (bytes,
	// objects, one blob's size); the host repository gained nothing.
	ErrLimitExceeded = errdefs.LimitExceeded
)

// UnsafeError says why an import was refused.
type UnsafeError struct {
	Object string // the offending object's id, when there is one
	Reason string
}

func (e *UnsafeError) Error() string {
	if e.Object != "" {
		return fmt.Sprintf("unsafe repository content: %s: %s", short(e.Object), e.Reason)
	}
	return "unsafe repository content: " + e.Reason
}

func (e *UnsafeError) Is(target error) bool { return target == ErrUnsafe }

func unsafe(obj, format string, args ...any) error {
	return &UnsafeError{Object: obj, Reason: fmt.Sprintf(format, args...)}
}

func short(oid string) string {
	if len(oid) > 12 {
		return oid[:12]
	}
	return oid
}

// Mode is what a sync produces.
type Mode string

const (
	// ModeBranch moves a branch of the host repository (the default).
	ModeBranch Mode = "branch"
	// ModePatch writes the series since the repository went in as
	// format-patch files into a folder (Options.Output).
	ModePatch Mode = "patch"
	// ModeBundle writes a git bundle of the branch since the repository
	// went in (Options.Output).
	ModeBundle Mode = "bundle"
)

// ParseMode checks a mode's name ("": ModeBranch).
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModeBranch:
		return ModeBranch, nil
	case ModePatch, ModeBundle:
		return Mode(s), nil
	}
	return "", fmt.Errorf("%w: changes %q: want branch, patch or bundle", errdefs.InvalidArgument, s)
}

// Options configure a repository's trip into a sandbox and back.
type Options struct {
	// Depth is how many commits of HEAD's history go in (0: all).
	Depth int
	// Worktree: the working tree's uncommitted changes and untracked
	// (not ignored) files go in too, committed in the sandbox as one
	// commit on top of HEAD. Off: the sandbox gets HEAD's tree.
	Worktree bool
	// Branch is the host branch a sync moves (ModeBranch); default
	// "sandbox-agent/<name>" with the name given to Open (its prefix
	// "sandbox-agent-" left out).
	Branch string
	// AuthorName and AuthorEmail are the identity of the sandbox's
	// commits: the agent's own (its git config) and the ones a sync
	// makes. Default "sandbox-agent" <agent@sandbox-agent.invalid>.
	AuthorName, AuthorEmail string
	// Mode is what a sync produces (default ModeBranch).
	Mode Mode
	// Output is where ModePatch (a folder) and ModeBundle (a file) write;
	// replaced at each sync. Required for those modes.
	Output string
	// Limits cap what one sync may bring (zero: DefaultLimits').
	Limits Limits
	// Within, when set, confines the repository to that folder: Open
	// refuses one whose work tree, git folder, objects or refs resolve
	// outside it (a gitfile, a commondir file, core.worktree, symlinks)
	// or that borrows objects (alternates) — serve's repositories of its
	// tenants.
	Within string
}

// Limits cap one sync's import.
type Limits struct {
	MaxBytes     int64 // the bundle's size
	MaxObjects   int64 // objects in it
	MaxBlobBytes int64 // one object's size (a file's), and what a delta may make
	// MaxExpandedBytes caps the bundle's objects inflated, all together
	// (a pack of a few bytes can inflate to gigabytes).
	MaxExpandedBytes int64
}

// DefaultLimits are the caps used where Options.Limits leaves zero.
var DefaultLimits = Limits{MaxBytes: 1 << 30, MaxObjects: 1_000_000, MaxBlobBytes: 100 << 20, MaxExpandedBytes: 4 << 30}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultLimits.MaxBytes
	}
	if l.MaxObjects <= 0 {
		l.MaxObjects = DefaultLimits.MaxObjects
	}
	if l.MaxBlobBytes <= 0 {
		l.MaxBlobBytes = DefaultLimits.MaxBlobBytes
	}
	if l.MaxExpandedBytes <= 0 {
		l.MaxExpandedBytes = DefaultLimits.MaxExpandedBytes
	}
	return l
}

const (
	defaultAuthorName  = "sandbox-agent"
	defaultAuthorEmail = "agent@sandbox-agent.invalid"
	branchPrefix       = "sandbox-agent/"
)

// check validates the options and fills in the defaults.
func (o Options) check(name string) (Options, error) {
	if o.Depth < 0 {
		return o, fmt.Errorf("%w: repository depth %d", errdefs.InvalidArgument, o.Depth)
	}
	m, err := ParseMode(string(o.Mode))
	if err != nil {
		return o, err
	}
	o.Mode = m
	if o.Mode != ModeBranch && o.Output == "" {
		return o, fmt.Errorf("%w: changes %s needs an output path", errdefs.InvalidArgument, o.Mode)
	}
	if o.Branch == "" {
		o.Branch = branchPrefix + strings.TrimPrefix(name, "sandbox-agent-")
	}
	o.Branch = strings.TrimPrefix(o.Branch, "refs/heads/")
	if err := checkBranch(o.Branch); err != nil {
		return o, err
	}
	if o.AuthorName == "" {
		o.AuthorName = defaultAuthorName
	}
	if o.AuthorEmail == "" {
		o.AuthorEmail = defaultAuthorEmail
	}
	for _, s := range []string{o.AuthorName, o.AuthorEmail} {
		if strings.ContainsAny(s, "<>\n\x00") {
			return o, fmt.Errorf("%w: author %q: no <, >, newline or NUL", errdefs.InvalidArgument, s)
		}
	}
	o.Limits = o.Limits.withDefaults()
	return o, nil
}

// checkBranch applies git's rules for a ref name (check-ref-format) to
// refs/heads/<b>, by hand: the name is checked before any git runs.
func checkBranch(b string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: branch %q: %s", errdefs.InvalidArgument, b, why)
	}
	if b == "" || b == "@" || b == "HEAD" {
		return bad("not a branch name")
	}
	if strings.HasPrefix(b, "-") || strings.HasPrefix(b, "/") || strings.HasSuffix(b, "/") || strings.HasSuffix(b, ".") {
		return bad("must not start with - or /, nor end with / or .")
	}
	if strings.Contains(b, "..") || strings.Contains(b, "@{") || strings.Contains(b, "//") {
		return bad("must not hold .., @{ or //")
	}
	for _, r := range b {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(" ~^:?*[\\", r) {
			return bad("must not hold spaces, control characters or any of ~^:?*[\\")
		}
	}
	for _, c := range strings.Split(b, "/") {
		if strings.HasPrefix(c, ".") || strings.HasSuffix(c, ".lock") {
			return bad("no part may start with . or end with .lock")
		}
	}
	return nil
}

// Changes is what one sync brought home.
type Changes struct {
	// Branch is the host branch moved (ModeBranch), Output the file or
	// folder written (the other modes).
	Branch string `json:"branch,omitempty"`
	Output string `json:"output,omitempty"`
	// Tip is the branch's (or the series') last commit; Base the commit
	// the repository went in at (the host's HEAD then).
	Tip  string `json:"tip"`
	Base string `json:"base"`
	// Commits are the commits new since the last sync, oldest first:
	// the agent's (and, on the first sync, the one holding the host's
	// uncommitted work) and the one holding what it left uncommitted.
	Commits []string `json:"commits"`
	// Uncommitted: the tip is a commit the sync made of what the agent
	// left uncommitted (replaced by the next sync).
	Uncommitted bool `json:"uncommitted"`
	// Rewritten: the agent rewrote history the last sync brought home
	// (amend, rebase, reset); the previous tip is kept as Previous.
	Rewritten bool   `json:"rewritten"`
	Previous  string `json:"previous,omitempty"`
	// Unchanged: nothing new since the last sync.
	Unchanged bool  `json:"unchanged"`
	Bytes     int64 `json:"bytes"` // the bundle the sandbox sent
}
