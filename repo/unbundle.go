package repo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/sandbox-agent/sandbox-agent/internal/errdefs"
)

// Unbundle makes a bare repository at dir (which must not exist) of the
// git bundle at path, with git's fsck on and under the limits, its HEAD
// the bundle's one branch: a repository a client sent (serve's create
// request) is hostile input like any other. Open takes the result.
func Unbundle(ctx context.Context, path, dir string, lim Limits) error {
	lim = lim.withDefaults()
	if _, err := os.Lstat(dir); err == nil {
		return fmt.Errorf("%w: %s exists", errdefs.DestinationExists, dir)
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.Size() > lim.MaxBytes {
		return fmt.Errorf("%w: the bundle is %d bytes, over the cap of %d", ErrLimitExceeded, st.Size(), lim.MaxBytes)
	}
	h, err := readBundleHeader(path, 40)
	if err != nil {
		if h2, err2 := readBundleHeader(path, 64); err2 == nil {
			h, err = h2, nil
		}
	}
	if err != nil {
		return err
	}
	if len(h.prereqs) > 0 {
		return unsafe(h.prereqs[0], "the bundle needs commits it does not carry (make it with the whole history, or --depth with git clone first)")
	}
	if int64(h.objects) > lim.MaxObjects {
		return fmt.Errorf("%w: the bundle holds %d objects, over the cap of %d", ErrLimitExceeded, h.objects, lim.MaxObjects)
	}
	var head, headOID string
	for ref, oid := range h.refs {
		if ref == "HEAD" || checkBranch(stripHeads(ref)) != nil || ref == stripHeads(ref) {
			continue
		}
		if head == "" || ref < head {
			head, headOID = ref, oid
		}
	}
	if head == "" {
		return unsafe("", "the bundle carries no branch")
	}
	format := "sha1"
	if len(headOID) == 64 {
		format = "sha256"
	}
	g := git{dir: os.TempDir()}
	if _, err := g.out(ctx, "init", "-q", "--bare", "--template=", "--object-format="+format, dir); err != nil {
		return err
	}
	g.dir = dir
	fail := func(err error) error {
		os.RemoveAll(dir)
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	if _, err := f.Seek(h.pack, io.SeekStart); err != nil {
		return fail(err)
	}
	// As take: the pack scanned in Go, then index-pack with fsck (not
	// fetch: no fsck from a bundle before git 2.46), its memory capped.
	if err := scanPack(f, len(headOID)/2, lim); err != nil {
		return fail(err)
	}
	if _, err := f.Seek(h.pack, io.SeekStart); err != nil {
		return fail(err)
	}
	ip := g
	ip.maxVM = indexPackMemory(lim)
	if _, err := ip.run(ctx, f, indexPackArgs(lim)...); err != nil {
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		return fail(&UnsafeError{Reason: "git's fsck refused the bundle: " + clip(fsckLine(err.Error()))})
	}
	if typ, err := g.out(ctx, "cat-file", "-t", headOID); err != nil || typ != "commit" {
		return fail(unsafe(headOID, "the bundle's branch is not a commit"))
	}
	if _, err := g.out(ctx, "rev-list", "--objects", "--quiet", headOID); err != nil {
		return fail(unsafe(headOID, "the bundle does not hold everything its branch reaches"))
	}
	if _, err := g.out(ctx, "update-ref", head, headOID); err != nil {
		return fail(err)
	}
	if _, err := g.out(ctx, "symbolic-ref", "HEAD", head); err != nil {
		return fail(err)
	}
	return nil
}

func stripHeads(ref string) string {
	if len(ref) > len("refs/heads/") && ref[:len("refs/heads/")] == "refs/heads/" {
		return ref[len("refs/heads/"):]
	}
	return ref
}

// WriteBundle writes to w a git bundle of the branch (ModeBranch) since
// the repository went in: what serve hands a client that sent its
// repository as a bundle. The branch must exist (a sync made it).
func (r *Repo) WriteBundle(ctx context.Context, w io.Writer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ref := "refs/heads/" + r.opts.Branch
	tip, err := r.host.out(ctx, "rev-parse", "--verify", "-q", ref+"^{commit}")
	if err != nil {
		return fmt.Errorf("%w: %s does not exist yet (no sync brought changes)", errdefs.PathNotFound, r.opts.Branch)
	}
	args := []string{"bundle", "create", "-q", "-", ref, "^" + r.base}
	if tip == r.base {
		args = []string{"bundle", "create", "-q", "-", ref, "-1"}
	}
	c := r.host.cmd(ctx, args...)
	c.Stdout = w
	var errb bytes.Buffer
	c.Stderr = &limitedBuffer{buf: &errb, max: 16 << 10}
	if err := c.Run(); err != nil {
		return gitError(args, err, errb.String())
	}
	return nil
}
