package repo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/sandbox-agent/sandbox-agent/internal/errdefs"
)

// syncScript commits what the agent left uncommitted (with a throwaway
// index: the agent's own index and HEAD are not touched) and prints
// "<head> <that commit or -> <tip>"; unless the tip is what the host has
// already, the bundle of the tip follows, minus the commits in $EXCL the
// sandbox still has.
const syncScript = `
[ -e .git ] || { echo "no .git in the sandbox's working directory $(pwd)" >&2; exit 3; }
head=$(g rev-parse --verify -q 'HEAD^{commit}') || { echo "HEAD is not a commit" >&2; exit 3; }
idx=$(mktemp)
trap 'rm -f "$idx"' EXIT
real=$(g rev-parse --git-path index)
if [ -f "$real" ]; then cp "$real" "$idx"; else rm -f "$idx"; fi
GIT_INDEX_FILE=$idx g add -A
tree=$(GIT_INDEX_FILE=$idx g write-tree)
tip=$head wip=-
if [ "$tree" != "$(g rev-parse "$head^{tree}")" ]; then
  d=$(g log -1 --format=%cd --date=raw "$head")
  tip=$(GIT_AUTHOR_DATE="$d" GIT_COMMITTER_DATE="$d" g commit-tree -p "$head" -m "$MSG" "$tree")
  wip=$tip
fi
printf '%s %s %s\n' "$head" "$wip" "$tip"
set --
for x in $EXCL; do
  if g cat-file -e "$x^{commit}" 2>/dev/null; then set -- "$@" "^$x"; fi
done
[ -n "$(g rev-list -n 1 "$tip" "$@")" ] || exit 0
g update-ref refs/sandbox-agent/out "$tip"
g bundle create -q - refs/sandbox-agent/out "$@"
`

// Sync brings home what the agent did since the last sync (see Mode).
func (r *Repo) Sync(ctx context.Context, sb Sandbox) (Changes, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.q == nil {
		return Changes{}, fmt.Errorf("repository closed")
	}
	if r.lastHead == "" {
		return Changes{}, fmt.Errorf("%w: the repository was not put in the sandbox", errdefs.InvalidArgument)
	}
	tmp, err := os.CreateTemp("", "sandbox-agent-changes-*.bundle")
	if err != nil {
		return Changes{}, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()

	// The sandbox leaves out of the bundle what the host has: the base
	// and what the last sync brought (the sandbox's first commit, of the
	// host's uncommitted work, comes with the first sync).
	excl := []string{r.base}
	if r.lastTip != "" {
		excl = append(excl, r.lastHead, r.lastTip)
	}
	env := map[string]string{"EXCL": strings.Join(excl, " "), "MSG": "sandbox-agent: uncommitted work"}
	for k, v := range r.identity() {
		env[k] = v
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &bundleWriter{f: tmp, max: r.opts.Limits.MaxBytes + 4<<10, cancel: cancel}
	code, stderr, err := sb.Run(rctx, []string{"sh", "-c", gitScript + syncScript}, env, nil, w)
	if w.over {
		return Changes{}, fmt.Errorf("%w: the changes' bundle passed the cap of %d bytes", ErrLimitExceeded, r.opts.Limits.MaxBytes)
	}
	if w.badLine {
		return Changes{}, unsafe("", "the sandbox's answer line is too long")
	}
	if err != nil {
		return Changes{}, fmt.Errorf("read the changes from the sandbox: %w", err)
	}
	switch code {
	case 0:
	case 127:
		return Changes{}, fmt.Errorf("%w in the sandbox", ErrNoGit)
	default:
		return Changes{}, fmt.Errorf("read the changes from the sandbox (exit %d): %s", code, clip(strings.TrimSpace(string(stderr))))
	}
	f := strings.Fields(w.line.String())
	if w.badLine || !w.lineDone || len(f) != 3 || !isOID(f[0], r.q.hexLen) || !isOID(f[2], r.q.hexLen) || (f[1] != "-" && f[1] != f[2]) {
		return Changes{}, unsafe("", "the sandbox answered %q", clip(w.line.String()))
	}
	head, tip, wip := f[0], f[2], f[1] != "-"
	if err := tmp.Sync(); err != nil {
		return Changes{}, err
	}
	ch := Changes{Base: r.base, Tip: tip, Bytes: w.n}
	q := r.q.git
	if w.n > 0 {
		got, err := r.q.take(ctx, tmp.Name(), r.opts.Limits)
		if err != nil {
			return Changes{}, err
		}
		if got != tip {
			return Changes{}, unsafe(got, "the bundle's tip is not the commit the sandbox named")
		}
	} else if ok, err := q.ok(ctx, "cat-file", "-e", tip+"^{commit}"); err != nil {
		return Changes{}, err
	} else if !ok {
		return Changes{}, unsafe(tip, "the sandbox sent no bundle for a commit the host does not have")
	}
	if wip {
		// The tip is the sync's own commit: one parent, the agent's HEAD.
		parents, err := q.out(ctx, "rev-parse", tip+"^@")
		if err != nil || parents != head {
			return Changes{}, unsafe(tip, "the commit of uncommitted work does not sit on the agent's HEAD")
		}
		ch.Uncommitted = true
	} else if head != tip {
		return Changes{}, unsafe(tip, "the tip is not the agent's HEAD")
	}
	// The agent's last HEAD gone from its history: a rewrite (it may be
	// gone from the host too: the sandbox's first commit, of the host's
	// uncommitted work, comes with the first sync, or not at all).
	if known, err := q.ok(ctx, "cat-file", "-e", r.lastHead+"^{commit}"); err != nil {
		return Changes{}, err
	} else if !known {
		ch.Rewritten = true
	} else if ok, err := isAncestor(ctx, q, r.lastHead, head); err != nil {
		return Changes{}, err
	} else if !ok {
		ch.Rewritten = true
	}
	ch.Unchanged = tip == r.lastTip
	not := []string{r.base}
	if r.lastTip != "" {
		not = append(not, r.lastHead, r.lastTip)
	}
	list, err := q.out(ctx, append([]string{"rev-list", "--reverse", "--topo-order", tip, "--not"}, not...)...)
	if err != nil {
		return Changes{}, err
	}
	ch.Commits = strings.Fields(list)
	if ch.Commits == nil {
		ch.Commits = []string{}
	}
	switch r.opts.Mode {
	case ModeBranch:
		err = r.moveBranch(ctx, &ch)
	default:
		err = r.write(ctx, &ch)
	}
	if err != nil {
		return Changes{}, err
	}
	r.smu.Lock()
	r.lastHead, r.lastTip = head, tip
	r.smu.Unlock()
	return ch, nil
}

// moveBranch copies the checked objects into the host repository and
// moves the branch (compare-and-swap: a branch moved on the host since
// the last sync is not overwritten).
func (r *Repo) moveBranch(ctx context.Context, ch *Changes) error {
	ref := "refs/heads/" + r.opts.Branch
	ch.Branch = r.opts.Branch
	old, _ := r.host.out(ctx, "rev-parse", "--verify", "-q", ref+"^{commit}")
	zero := strings.Repeat("0", r.q.hexLen)
	switch {
	case r.lastTip == "" && old != "":
		// A branch of that name already: only a fast-forward is taken.
		if ok, err := isAncestor(ctx, r.q.git, old, ch.Tip); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("%w: %s exists on the host and is not an ancestor of the agent's work; name another with the branch option", ErrBranchExists, r.opts.Branch)
		}
	case r.lastTip != "" && old != r.lastTip:
		return fmt.Errorf("%w: %s moved on the host since the last sync (it is %s, the sync left %s); nothing was changed", ErrBranchExists, r.opts.Branch, short(old), short(r.lastTip))
	}
	if err := r.notCheckedOut(ctx); err != nil {
		return err
	}
	if old == ch.Tip {
		return nil
	}
	// The quarantine's incoming ref names the tip (take left it there,
	// or the tip is a commit the host or the quarantine had already).
	if _, err := r.q.git.out(ctx, "update-ref", incoming, ch.Tip); err != nil {
		return err
	}
	if _, err := r.host.out(ctx, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-gc",
		"--no-recurse-submodules", "--no-show-forced-updates", r.q.dir, incoming); err != nil {
		return err
	}
	// One transaction: the previous tip's ref (after a rewrite) and the
	// branch move together, or neither does. A previous-N name taken (or
	// blocked by a ref under it) moves on to the next.
	if old == "" {
		old = zero
	}
	move := fmt.Sprintf("update %s %s %s\n", ref, ch.Tip, old)
	if !ch.Rewritten || old == zero {
		if _, err := r.host.run(ctx, strings.NewReader(move), "update-ref", "-m", "sandbox-agent: sync", "--stdin"); err != nil {
			return fmt.Errorf("%w: move %s: %w", ErrBranchExists, r.opts.Branch, err)
		}
		return nil
	}
	var err error
	for n := 1; n <= 100; n++ {
		prev := fmt.Sprintf("%s-previous-%d", r.opts.Branch, n)
		tx := fmt.Sprintf("create refs/heads/%s %s\n", prev, old) + move
		if _, err = r.host.run(ctx, strings.NewReader(tx), "update-ref", "-m", "sandbox-agent: sync (the agent rewrote history)", "--stdin"); err == nil {
			ch.Previous = prev
			return nil
		}
		if now, _ := r.host.out(ctx, "rev-parse", "--verify", "-q", ref+"^{commit}"); now != old {
			break // the branch itself moved: not a name's fault
		}
	}
	return fmt.Errorf("%w: move %s and keep its previous tip: %w", ErrBranchExists, r.opts.Branch, err)
}

// write makes ModePatch's folder or ModeBundle's file of the whole series
// since the repository went in, beside Output, and renames it into place.
func (r *Repo) write(ctx context.Context, ch *Changes) error {
	ch.Output = r.opts.Output
	if ch.Unchanged && r.wrote {
		return nil
	}
	q := r.q.git
	ref := "refs/heads/" + r.opts.Branch
	if _, err := q.out(ctx, "update-ref", ref, ch.Tip); err != nil {
		return err
	}
	if !r.wrote {
		if _, err := os.Lstat(r.opts.Output); err == nil {
			return fmt.Errorf("%w: %s exists", errdefs.DestinationExists, r.opts.Output)
		}
	}
	dir := filepath.Dir(r.opts.Output)
	tmp, err := os.MkdirTemp(dir, ".sandbox-agent-changes-")
	if err != nil {
		return err
	}
	defer func() {
		if tmp != "" {
			os.RemoveAll(tmp)
		}
	}()
	var made string
	switch r.opts.Mode {
	case ModeBundle:
		made = filepath.Join(tmp, "changes.bundle")
		if ch.Tip == r.base {
			// Nothing since the repository went in: git makes no empty
			// bundle, so the file is the base alone.
			_, err = q.out(ctx, "bundle", "create", "-q", made, ref, "-1")
		} else {
			_, err = q.out(ctx, "bundle", "create", "-q", made, ref, "^"+r.base)
		}
	case ModePatch:
		made = filepath.Join(tmp, "patches")
		_, err = q.out(ctx, "format-patch", "-q", "--binary", "--no-ext-diff", "--no-signature", "-o", made, r.base+".."+ch.Tip)
		if err == nil {
			err = os.MkdirAll(made, 0o755)
		}
	}
	if err != nil {
		return err
	}
	if r.wrote {
		// The last output steps aside (into tmp, removed with it) and
		// comes back if the new one cannot take its place.
		old := filepath.Join(tmp, "previous")
		if err := os.Rename(r.opts.Output, old); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.Rename(made, r.opts.Output); err != nil {
			if rerr := os.Rename(old, r.opts.Output); rerr != nil {
				// Keep it where it is: tmp is not removed then.
				keep := filepath.Join(dir, filepath.Base(tmp))
				tmp = ""
				return fmt.Errorf("replace %s: %w (the last output is in %s)", r.opts.Output, err, keep)
			}
			return err
		}
	} else if err := os.Rename(made, r.opts.Output); err != nil {
		return err
	}
	r.smu.Lock()
	r.wrote = true
	r.smu.Unlock()
	return nil
}

// bundleWriter takes the sync script's stdout: the answer line, then the
// bundle, written to f up to max bytes (past it the read is cancelled).
type bundleWriter struct {
	f        *os.File
	max, n   int64
	cancel   func()
	line     strings.Builder
	lineDone bool
	over     bool // past max
	badLine  bool // the answer line was too long
}

func (w *bundleWriter) Write(p []byte) (int, error) {
	n := len(p)
	if !w.lineDone {
		i := strings.IndexByte(string(p[:min(len(p), 512)]), '\n')
		if i < 0 {
			if w.line.Len()+len(p) > 512 {
				w.badLine = true
				w.cancel()
				return 0, errors.New("answer line too long")
			}
			w.line.Write(p)
			return n, nil
		}
		w.line.Write(p[:i])
		w.lineDone = true
		p = p[i+1:]
	}
	if w.n+int64(len(p)) > w.max {
		w.over = true
		w.cancel()
		return 0, io.ErrShortWrite
	}
	if _, err := w.f.Write(p); err != nil {
		w.cancel()
		return 0, err
	}
	w.n += int64(len(p))
	return n, nil
}

// isAncestor says whether commit a is an ancestor of b (git merge-base
// --is-ancestor: exit 1 is "no", any other failure an error).
func isAncestor(ctx context.Context, g git, a, b string) (bool, error) {
	args := []string{"merge-base", "--is-ancestor", a, b}
	c := g.cmd(ctx, args...)
	var errb strings.Builder
	c.Stderr = &errb
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ee) && ee.ExitCode() == 1:
		return false, nil
	}
	return false, gitError(args, err, errb.String())
}

// notCheckedOut refuses a branch checked out in a work tree of the host
// repository: moving it would change that work tree's HEAD under its
// files (git status would show the agent's work reverted).
func (r *Repo) notCheckedOut(ctx context.Context) error {
	list, err := r.host.out(ctx, "worktree", "list", "--porcelain")
	if err != nil {
		return err
	}
	for _, l := range strings.Split(list, "\n") {
		if l == "branch refs/heads/"+r.opts.Branch {
			return fmt.Errorf("%w: %s is checked out on the host; name another branch", ErrBranchExists, r.opts.Branch)
		}
	}
	return nil
}
