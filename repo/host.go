package repo

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sandbox-agent/sandbox-agent/internal/errdefs"
)

// Sandbox is the container side of a repository's trip: a command run as
// the sandbox's user in its working directory, with stdin and stdout
// streamed; a non-zero exit is not an error.
type Sandbox interface {
	Run(ctx context.Context, cmd []string, env map[string]string, stdin io.Reader, stdout io.Writer) (exit int, stderr []byte, err error)
}

// Repo is one host repository bound to one sandbox's working directory.
// Its methods may be called from several goroutines; they run one at a
// time.
type Repo struct {
	mu     sync.Mutex
	host   git
	top    string // the host work tree
	common string // its git folder (the common one of a linked work tree)
	format string // sha1 or sha256
	opts   Options
	q      *quarantine

	// Written under mu and smu (State reads them under smu alone, so it
	// does not wait for a running sync).
	smu      sync.Mutex
	base     string // the host's HEAD when the repository went in
	lastHead string // the agent's HEAD at the last sync (the sandbox's first commit before)
	lastTip  string // what the last sync brought ("": none yet)
	wrote    bool   // Output holds what a sync wrote
}

// Open checks that dir is a git repository (a work tree, or a bare one
// without Options.Worktree) with a commit and that git runs on the host.
// name names the default branch (sandbox-agent/<name>).
func Open(ctx context.Context, dir, name string, o Options) (*Repo, error) {
	o, err := o.check(name)
	if err != nil {
		return nil, err
	}
	if dir == "" {
		return nil, fmt.Errorf("%w: empty repository path", errdefs.InvalidArgument)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errdefs.InvalidArgument, err)
	}
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%w: %s: not a folder", ErrNotRepository, dir)
	}
	g := git{dir: abs}
	bare, err := g.out(ctx, "rev-parse", "--is-bare-repository")
	if errors.Is(err, ErrNoGit) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: not in a git repository", ErrNotRepository, dir)
	}
	var top string
	if bare == "true" {
		if o.Worktree {
			return nil, fmt.Errorf("%w: %s is a bare repository: it has no working tree to send", errdefs.InvalidArgument, dir)
		}
		top, err = g.out(ctx, "rev-parse", "--absolute-git-dir")
	} else {
		top, err = g.out(ctx, "rev-parse", "--show-toplevel")
	}
	if err != nil || top == "" {
		return nil, fmt.Errorf("%w: %s: not in a git work tree", ErrNotRepository, dir)
	}
	gitDir, err := g.out(ctx, "rev-parse", "--absolute-git-dir")
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNotRepository, dir, err)
	}
	common, err := g.out(ctx, "rev-parse", "--path-format=absolute", "--git-common-dir")
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNotRepository, dir, err)
	}
	// From here on git is told where the repository is: a .git file,
	// a commondir file or core.worktree written after this check cannot
	// send a later command elsewhere.
	g.dir = top
	g.extra = []string{"GIT_DIR=" + gitDir, "GIT_COMMON_DIR=" + common}
	if bare != "true" {
		g.extra = append(g.extra, "GIT_WORK_TREE="+top)
	}
	if o.Within != "" {
		if err := confined(o.Within, top, gitDir, common); err != nil {
			return nil, err
		}
	}
	base, err := g.out(ctx, "rev-parse", "--verify", "-q", "HEAD^{commit}")
	if err != nil {
		return nil, fmt.Errorf("%w: %s: HEAD has no commit", ErrNotRepository, top)
	}
	format, err := g.out(ctx, "rev-parse", "--show-object-format")
	if err != nil || (format != "sha1" && format != "sha256") {
		format = "sha1"
	}
	objects, err := g.out(ctx, "rev-parse", "--path-format=absolute", "--git-path", "objects")
	if err != nil {
		return nil, err
	}
	r := &Repo{host: g, top: top, common: common, format: format, opts: o, base: base}
	if o.Mode == ModeBranch {
		if err := r.notCheckedOut(ctx); err != nil {
			return nil, err
		}
	}
	if r.q, err = newQuarantine(ctx, objects, format); err != nil {
		return nil, err
	}
	return r, nil
}

// Close removes the quarantine (what the syncs brought home stays).
func (r *Repo) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.q != nil {
		r.q.close()
		r.q = nil
	}
	return nil
}

// Branch is the host branch syncs move.
func (r *Repo) Branch() string { return r.opts.Branch }

// Base is the host commit the repository went in at.
func (r *Repo) Base() string { return r.base }

// Dir is the host repository's work tree.
func (r *Repo) Dir() string { return r.top }

// gitScript starts every script run in the sandbox: git with the
// package's hardening and none of the image's system or user config.
var gitScript = `set -eu
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TERMINAL_PROMPT=0 GIT_OPTIONAL_LOCKS=0 LC_ALL=C
g() { git ` + strings.Join(quoteAll(hardening), " ") + ` "$@"; }
command -v git >/dev/null 2>&1 || { echo "git is not installed in the sandbox" >&2; exit 127; }
`

func quoteAll(args []string) []string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return q
}

// putScript unpacks the repository (stdin: a tar of .git and, with the
// working tree, its files) into the empty working directory, and, with
// the working tree, commits its changes on top of HEAD. It prints HEAD.
const putScript = `
if [ -n "$(ls -A . 2>/dev/null)" ]; then echo "the sandbox's working directory $(pwd) is not empty" >&2; exit 3; fi
tar -x -p --no-same-owner -f -
if [ "$WORKTREE" = 1 ]; then
  g reset -q
  g add -A
  if ! g diff --cached --quiet; then g commit -q --no-verify -m "$MSG"; fi
else
  g reset -q --hard
fi
g rev-parse --verify 'HEAD^{commit}'
`

// Put sends the repository into the sandbox's working directory, which
// must be empty.
func (r *Repo) Put(ctx context.Context, sb Sandbox) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.q == nil {
		return fmt.Errorf("repository closed")
	}
	in, err := os.MkdirTemp("", "sandbox-agent-repo-in-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(in)
	gi := git{dir: in}
	if _, err := gi.out(ctx, "init", "-q", "--bare", "--template=", "--object-format="+r.format, in); err != nil {
		return err
	}
	branch := "work"
	if b, err := r.host.out(ctx, "symbolic-ref", "-q", "--short", "HEAD"); err == nil && checkBranch(b) == nil {
		branch = b
	}
	args := []string{"fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-gc", "--no-recurse-submodules"}
	if r.opts.Depth > 0 {
		args = append(args, fmt.Sprintf("--depth=%d", r.opts.Depth))
	}
	// From the git folder Open found, not the work tree's path: what it
	// names now cannot redirect the fetch.
	if _, err := gi.out(ctx, append(args, r.common, "+"+r.base+":refs/heads/"+branch)...); err != nil {
		return err
	}
	for _, kv := range [][2]string{
		{"core.bare", "false"}, {"core.logAllRefUpdates", "true"},
		{"user.name", r.opts.AuthorName}, {"user.email", r.opts.AuthorEmail},
	} {
		if _, err := gi.out(ctx, "config", "--file", filepath.Join(in, "config"), kv[0], kv[1]); err != nil {
			return err
		}
	}
	if _, err := gi.out(ctx, "symbolic-ref", "HEAD", "refs/heads/"+branch); err != nil {
		return err
	}
	var files []string
	if r.opts.Worktree {
		list, err := r.host.out(ctx, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, f := range strings.Split(list, "\x00") {
			if f != "" && !seen[f] {
				seen[f] = true
				files = append(files, f)
			}
		}
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(r.pack(in, files, pw)) }()
	defer pr.Close()
	var out bytes.Buffer
	env := map[string]string{"WORKTREE": "0", "MSG": "sandbox-agent: uncommitted work from the host"}
	if r.opts.Worktree {
		env["WORKTREE"] = "1"
	}
	for k, v := range r.identity() {
		env[k] = v
	}
	code, stderr, err := sb.Run(ctx, []string{"sh", "-c", gitScript + putScript}, env, pr, &limitedBuffer{buf: &out, max: 4 << 10})
	if err != nil {
		return fmt.Errorf("put the repository in the sandbox: %w", err)
	}
	switch code {
	case 0:
	case 127:
		return fmt.Errorf("%w in the sandbox's image: %s", ErrNoGit, firstLine(string(stderr)))
	default:
		return fmt.Errorf("put the repository in the sandbox (exit %d): %s", code, clip(strings.TrimSpace(string(stderr))))
	}
	head := strings.TrimSpace(out.String())
	if !isOID(head, r.q.hexLen) {
		return fmt.Errorf("put the repository in the sandbox: it printed %q", clip(head))
	}
	r.smu.Lock()
	r.lastHead = head
	r.smu.Unlock()
	return nil
}

func (r *Repo) identity() map[string]string {
	return map[string]string{
		"GIT_AUTHOR_NAME": r.opts.AuthorName, "GIT_AUTHOR_EMAIL": r.opts.AuthorEmail,
		"GIT_COMMITTER_NAME": r.opts.AuthorName, "GIT_COMMITTER_EMAIL": r.opts.AuthorEmail,
	}
}

// pack writes the tar Put sends: the prepared .git folder in, then the
// working tree's files (regular files and symlinks; what vanished since
// git listed it is left out).
func (r *Repo) pack(gitDir string, files []string, w io.Writer) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	tw := tar.NewWriter(bw)
	add := func(name, path string, fi fs.FileInfo) error {
		var link string
		switch {
		case fi.Mode().IsRegular(), fi.IsDir():
		case fi.Mode()&fs.ModeSymlink != 0:
			var err error
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		default:
			return nil
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname = name, 0, 0, "", ""
		h.Mode &= 0o755
		if fi.IsDir() {
			h.Name += "/"
			h.Mode = 0o755
		} else if fi.Mode().IsRegular() {
			h.Mode = 0o644
			if fi.Mode()&0o100 != 0 {
				h.Mode = 0o755
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.CopyN(tw, f, h.Size); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	err := filepath.WalkDir(gitDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(gitDir, path)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return add(filepath.ToSlash(filepath.Join(".git", rel)), path, fi)
	})
	if err != nil {
		return err
	}
	dirs := map[string]bool{}
	for _, f := range files {
		p := filepath.Join(r.top, filepath.FromSlash(f))
		fi, err := os.Lstat(p)
		if err != nil || fi.IsDir() { // deleted, or a submodule's folder
			continue
		}
		for d := filepath.Dir(filepath.FromSlash(f)); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			dfi, err := os.Lstat(filepath.Join(r.top, d))
			if err != nil || !dfi.IsDir() {
				return fmt.Errorf("%s: %s is not a folder in the work tree", f, d)
			}
		}
		if err := add(f, p, fi); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// State is what Resume needs to go on with a repository in another
// process (an adopted agent: serve's restart, another replica). It names
// a host folder and commits, no secret.
type State struct {
	Dir         string `json:"dir"`
	Base        string `json:"base"`
	LastHead    string `json:"last_head"`
	LastTip     string `json:"last_tip,omitempty"`
	Depth       int    `json:"depth,omitempty"`
	Worktree    bool   `json:"worktree,omitempty"`
	Branch      string `json:"branch"`
	AuthorName  string `json:"author_name"`
	AuthorEmail string `json:"author_email"`
	Mode        Mode   `json:"mode"`
	Output      string `json:"output,omitempty"`
	Wrote       bool   `json:"wrote,omitempty"`
	Limits      Limits `json:"limits"`
	Within      string `json:"within,omitempty"`
}

// State is the repository's state for Resume.
func (r *Repo) State() State {
	r.smu.Lock()
	defer r.smu.Unlock()
	o := r.opts
	return State{Dir: r.top, Base: r.base, LastHead: r.lastHead, LastTip: r.lastTip, Depth: o.Depth, Worktree: o.Worktree,
		Branch: o.Branch, AuthorName: o.AuthorName, AuthorEmail: o.AuthorEmail, Mode: o.Mode, Output: o.Output, Wrote: r.wrote, Limits: o.Limits,
		Within: o.Within}
}

// Resume opens the repository of st again, for syncs that go on where
// the last left off. The quarantine is new: in ModeBranch what the syncs
// brought is in the host repository; in the other modes it was in the
// old quarantine only, so the next sync brings everything since the base
// again (the outputs are cumulative anyway).
func Resume(ctx context.Context, st State) (*Repo, error) {
	o := Options{Depth: st.Depth, Worktree: st.Worktree, Branch: st.Branch, AuthorName: st.AuthorName, AuthorEmail: st.AuthorEmail,
		Mode: st.Mode, Output: st.Output, Limits: st.Limits, Within: st.Within}
	if st.Branch == "" {
		return nil, fmt.Errorf("%w: repository state without a branch", errdefs.InvalidArgument)
	}
	r, err := Open(ctx, st.Dir, "", o)
	if err != nil {
		return nil, err
	}
	for _, c := range []string{st.Base, st.LastHead, st.LastTip} {
		if c != "" && !isOID(c, r.q.hexLen) {
			r.Close()
			return nil, fmt.Errorf("%w: repository state: commit %q", errdefs.InvalidArgument, clip(c))
		}
	}
	if ok, err := r.q.git.ok(ctx, "cat-file", "-e", st.Base+"^{commit}"); err != nil || !ok {
		r.Close()
		return nil, fmt.Errorf("%w: %s no longer has the commit %s the sandbox's repository went in at", ErrNotRepository, st.Dir, short(st.Base))
	}
	r.base, r.lastHead, r.wrote = st.Base, st.LastHead, st.Wrote
	if o.Mode == ModeBranch {
		r.lastTip = st.LastTip
	}
	return r, nil
}

// confined refuses a repository whose git would read or write outside
// the folder within (Options.Within): its work tree, git folder, common
// folder and the parts of it a sync reads and writes must resolve, links
// followed, inside within; it borrows no objects (alternates).
func confined(within, top, gitDir, common string) error {
	root, err := filepath.EvalSymlinks(within)
	if err != nil {
		return fmt.Errorf("%w: %w", errdefs.InvalidArgument, err)
	}
	paths := []string{top, gitDir, common}
	for _, p := range []string{"objects", "objects/pack", "objects/info", "refs", "refs/heads", "packed-refs", "config", "HEAD", "shallow"} {
		paths = append(paths, filepath.Join(common, p))
	}
	paths = append(paths, filepath.Join(gitDir, "HEAD"), filepath.Join(gitDir, "index"))
	for _, p := range paths {
		real, err := filepath.EvalSymlinks(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrNotRepository, p, err)
		}
		if rel, err := filepath.Rel(root, real); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return fmt.Errorf("%w: %s leads outside %s", ErrOutside, p, within)
		}
	}
	for _, a := range []string{"objects/info/alternates", "objects/info/http-alternates"} {
		if _, err := os.Lstat(filepath.Join(common, a)); err == nil {
			return fmt.Errorf("%w: the repository borrows objects from elsewhere (%s)", ErrOutside, a)
		}
	}
	return nil
}
