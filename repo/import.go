package repo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// outRef is the one ref a sandbox's bundle may carry.
const outRef = "refs/sandbox-agent/out"

// incoming is the quarantine's ref for what the last import took.
const incoming = "refs/heads/incoming"

// quarantine is a bare repository of the package's own beside the host
// one: imports land and are checked there; the host's objects are its
// alternates, so a bundle's prerequisites resolve without a copy.
type quarantine struct {
	dir    string
	git    git
	hexLen int
	host   git // git in dir seeing the host's objects only
}

func newQuarantine(ctx context.Context, hostObjects, format string) (*quarantine, error) {
	dir, err := os.MkdirTemp("", "sandbox-agent-repo-")
	if err != nil {
		return nil, err
	}
	q := &quarantine{dir: dir, git: git{dir: dir}, hexLen: 40,
		host: git{dir: dir, extra: []string{"GIT_OBJECT_DIRECTORY=" + hostObjects}}}
	if format == "sha256" {
		q.hexLen = 64
	}
	if _, err := q.git.out(ctx, "init", "-q", "--bare", "--template=", "--object-format="+format, dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	alt := filepath.Join(dir, "objects", "info")
	if err := os.MkdirAll(alt, 0o700); err == nil {
		err = os.WriteFile(filepath.Join(alt, "alternates"), []byte(hostObjects+"\n"), 0o600)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return q, nil
}

func (q *quarantine) close() { os.RemoveAll(q.dir) }

// take reads the bundle at path into the quarantine under the limits
// and checks every object it added. It returns the bundle's tip; on an
// error the quarantine's ref is where it was (objects a refused bundle
// left there are unreachable and never reach the host).
func (q *quarantine) take(ctx context.Context, path string, lim Limits) (string, error) {
	h, err := readBundleHeader(path, q.hexLen)
	if err != nil {
		return "", err
	}
	if len(h.refs) != 1 || h.refs[outRef] == "" {
		names := make([]string, 0, len(h.refs))
		for r := range h.refs {
			names = append(names, clip(r))
		}
		sort.Strings(names)
		return "", unsafe("", "the bundle must carry exactly %s; it carries %s", outRef, strings.Join(names, ", "))
	}
	if int64(h.objects) > lim.MaxObjects {
		return "", fmt.Errorf("%w: the changes hold %d objects, over the cap of %d", ErrLimitExceeded, h.objects, lim.MaxObjects)
	}
	for _, p := range h.prereqs {
		if ok, err := q.git.ok(ctx, "cat-file", "-e", p+"^{commit}"); err != nil {
			return "", err
		} else if !ok {
			return "", unsafe(p, "the bundle builds on a commit the host does not have")
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := f.Seek(h.pack, io.SeekStart); err != nil {
		return "", err
	}
	if err := scanPack(f, q.hexLen/2, lim); err != nil {
		return "", err
	}
	if _, err := f.Seek(h.pack, io.SeekStart); err != nil {
		return "", err
	}
	// The import's objects go to a folder of their own (git's own
	// quarantine for pushes works so): a refused import's objects are
	// removed with it, never seen by a later one. The quarantine's
	// objects (and through them the host's) are its alternates.
	in, err := os.MkdirTemp(q.dir, "incoming-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(in)
	if err := os.Mkdir(filepath.Join(in, "pack"), 0o700); err != nil {
		return "", err
	}
	objects := filepath.Join(q.dir, "objects")
	gi := git{dir: q.dir, extra: []string{"GIT_OBJECT_DIRECTORY=" + in, "GIT_ALTERNATE_OBJECT_DIRECTORIES=" + objects}}
	ip := gi
	ip.maxVM = indexPackMemory(lim)
	// The pack goes to git index-pack directly, not through git fetch:
	// fetch from a bundle runs no fsck before git 2.46 (whatever
	// fetch.fsckObjects says). --strict is fsck with every warning an
	// error (.git, .., modes, .gitmodules); --fix-thin completes deltas
	// on the host's objects. Its memory: objects of at most MaxBlobBytes
	// (scanPack saw to it), one thread, small pack windows, and an
	// address-space cap for what no scan sees (a tree naming millions
	// of objects costs git ~55 bytes each).
	out, err := ip.run(ctx, f, indexPackArgs(lim, "--fix-thin")...)
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return "", fmt.Errorf("read the changes: %w", ctx.Err())
	case errors.As(err, &ee):
		return "", &UnsafeError{Reason: "git's fsck refused the bundle: " + clip(fsckLine(err.Error()))}
	case err != nil:
		return "", err
	}
	kind, hash, _ := strings.Cut(strings.TrimSpace(out), "\t")
	if kind != "pack" || !isOID(hash, q.hexLen) {
		return "", fmt.Errorf("git index-pack printed %q", clip(out))
	}
	tip := h.refs[outRef]
	if typ, err := gi.out(ctx, "cat-file", "-t", tip); err != nil || typ != "commit" {
		return "", unsafe(tip, "the bundle's ref is not a commit")
	}
	// Every object the tip reaches is there (its own or the host's).
	if _, err := gi.out(ctx, append([]string{"rev-list", "--objects", "--quiet", tip, "--not"}, h.prereqs...)...); err != nil {
		return "", unsafe(tip, "the bundle does not hold everything its commits reach")
	}
	pack := filepath.Join(in, "pack", "pack-"+hash)
	idx, err := os.Open(pack + ".idx")
	if err != nil {
		return "", err
	}
	list, err := gi.run(ctx, idx, "show-index")
	idx.Close()
	if err != nil {
		return "", err
	}
	var all []string
	for _, l := range strings.Split(list, "\n") {
		if f := strings.Fields(l); len(f) >= 2 {
			all = append(all, f[1])
		}
	}
	// --fix-thin copied the host's delta bases in: those are the host's
	// own, not the sandbox's, and are not judged.
	oids, err := q.notInHost(ctx, all)
	if err != nil {
		return "", err
	}
	if int64(len(oids)) > lim.MaxObjects {
		return "", fmt.Errorf("%w: the changes hold %d objects, over the cap of %d", ErrLimitExceeded, len(oids), lim.MaxObjects)
	}
	if err := check(ctx, gi, q.hexLen, oids, lim); err != nil {
		return "", err
	}
	// Accepted: the pack joins the quarantine's objects (its index
	// last: git looks for packs by their index).
	dst := filepath.Join(objects, "pack", "pack-"+hash)
	for _, ext := range []string{".pack", ".rev", ".idx"} {
		if err := os.Rename(pack+ext, dst+ext); err != nil && !(ext == ".rev" && errors.Is(err, os.ErrNotExist)) {
			return "", err
		}
	}
	if _, err := q.git.out(ctx, "update-ref", incoming, tip); err != nil {
		return "", err
	}
	return tip, nil
}

// Caps on what check reads into memory: a tree of a few hundred thousand
// entries, a commit with a long message, a link's target (PATH_MAX), a
// .gitmodules of many submodules.
const (
	maxTreeBytes       = 64 << 20
	maxCommitBytes     = 16 << 20
	maxLinkBytes       = 4096
	maxGitmodulesBytes = 1 << 20
)

// check applies the package's rules to the new objects oids (see the
// package doc); git's fsck has run already.
func check(ctx context.Context, g git, hexLen int, oids []string, lim Limits) error {
	isNew := make(map[string]bool, len(oids))
	size := make(map[string]int64, len(oids))
	var commits, trees []string
	// Sizes first: the trees and commits this process reads, and the
	// blobs it may, are refused before they are read past their caps.
	err := catFile(ctx, g, oids, true, func(o object, _ []byte) error {
		isNew[o.oid] = true
		size[o.oid] = o.size
		switch o.typ {
		case "blob":
			if o.size > lim.MaxBlobBytes {
				return fmt.Errorf("%w: file %s is %d bytes, over the cap of %d", ErrLimitExceeded, short(o.oid), o.size, lim.MaxBlobBytes)
			}
		case "tree":
			if o.size > maxTreeBytes {
				return fmt.Errorf("%w: tree %s is %d bytes, over the cap of %d", ErrLimitExceeded, short(o.oid), o.size, maxTreeBytes)
			}
			trees = append(trees, o.oid)
		case "commit":
			if o.size > maxCommitBytes {
				return fmt.Errorf("%w: commit %s is %d bytes, over the cap of %d", ErrLimitExceeded, short(o.oid), o.size, maxCommitBytes)
			}
			commits = append(commits, o.oid)
		}
		return nil
	})
	if err != nil {
		return err
	}
	rawLen := hexLen / 2
	type link struct{ tree, blob string }
	sub := map[string][]string{}   // new tree → its subtrees
	climb := map[string]int{}      // new tree → its own symlinks' deepest climb
	var links []link               // symlinks with a new target blob
	modules := map[string]string{} // new .gitmodules blob → its tree
	err = catFile(ctx, g, trees, false, func(o object, data []byte) error {
		es, err := parseTree(data, rawLen)
		if err != nil {
			return unsafe(o.oid, "%v", err)
		}
		for _, e := range es {
			if err := checkName(o.oid, e.name); err != nil {
				return err
			}
			gitmodules := isDotName(e.name, ".gitmodules", "gitmod~1")
			switch e.mode {
			case "100644", "100755":
				if gitmodules && isNew[e.oid] {
					if size[e.oid] > maxGitmodulesBytes {
						return unsafe(e.oid, ".gitmodules of %d bytes", size[e.oid])
					}
					modules[e.oid] = o.oid
				}
			case "120000":
				if gitmodules {
					return unsafe(o.oid, ".gitmodules is a symlink")
				}
				if isNew[e.oid] {
					if size[e.oid] > maxLinkBytes {
						return unsafe(e.oid, "symlink target of %d bytes", size[e.oid])
					}
					links = append(links, link{o.oid, e.oid})
				}
			case "40000":
				sub[o.oid] = append(sub[o.oid], e.oid)
			case "160000":
			default:
				return unsafe(o.oid, "tree entry %q has mode %s", clip(e.name), clip(e.mode))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(links) > 0 {
		blobs := make([]string, len(links))
		for i, l := range links {
			blobs[i] = l.blob
		}
		i := 0
		err = catFile(ctx, g, blobs, false, func(o object, data []byte) error {
			l := links[i]
			i++
			n, err := symlinkClimb(o.oid, string(data))
			if err != nil {
				return err
			}
			climb[l.tree] = max(climb[l.tree], n)
			return nil
		})
		if err != nil {
			return err
		}
	}
	// need(t): how far above t's folder its links reach; a commit's
	// root tree must need nothing.
	need := map[string]int{}
	var walk func(t string, depth int) int
	walk = func(t string, depth int) int {
		if n, ok := need[t]; ok {
			return n
		}
		if depth > 4096 {
			return 1 << 30
		}
		n := climb[t]
		for _, s := range sub[t] {
			if isNew[s] {
				n = max(n, walk(s, depth+1)-1)
			}
		}
		need[t] = n
		return n
	}
	if len(commits) > 0 {
		err = catFile(ctx, g, commits, false, func(o object, data []byte) error {
			line, _, _ := bytes.Cut(data[:min(len(data), 128)], []byte("\n"))
			tree, ok := strings.CutPrefix(string(line), "tree ")
			if !ok {
				return unsafe(o.oid, "commit without a tree")
			}
			if isNew[tree] && walk(tree, 0) > 0 {
				return unsafe(o.oid, "a symlink in the commit points out of the repository")
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	for blob := range modules {
		list, err := g.out(ctx, "config", "--blob", blob, "--null", "--list")
		if err != nil {
			return unsafe(blob, ".gitmodules does not parse")
		}
		if err := checkGitmodules(blob, []byte(list)); err != nil {
			return err
		}
	}
	return nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// fsckLine is the line of git's stderr that names what fsck refused.
func fsckLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if i := strings.Index(l, "error: object "); i >= 0 {
			return l[i+len("error: "):]
		}
	}
	return firstLine(s)
}

// notInHost is oids less the objects the host repository has.
func (q *quarantine) notInHost(ctx context.Context, oids []string) ([]string, error) {
	c := q.host.cmd(ctx, "cat-file", "--batch-check=%(objectname)")
	c.Stdin = strings.NewReader(strings.Join(oids, "\n") + "\n")
	out, err := c.Output()
	if err != nil {
		return nil, gitError([]string{"cat-file"}, err, "")
	}
	var rest []string
	for _, l := range strings.Split(string(out), "\n") {
		if oid, ok := strings.CutSuffix(l, " missing"); ok {
			rest = append(rest, oid)
		}
	}
	return rest, nil
}

// indexPackArgs is git index-pack's command line for a hostile pack on
// stdin.
func indexPackArgs(lim Limits, more ...string) []string {
	return append([]string{"-c", "core.packedGitWindowSize=32m", "-c", "core.packedGitLimit=256m",
		"index-pack", "--stdin", "--strict", "--threads=1", fmt.Sprintf("--max-input-size=%d", lim.MaxBytes)}, more...)
}

// indexPackMemory is the address space index-pack gets: its pack
// windows, a few objects at the cap (a delta, its base, its result),
// per-object bookkeeping, and room for the program itself.
func indexPackMemory(lim Limits) int64 {
	return 1<<30 + 256<<20 + 4*lim.MaxBlobBytes + 256*lim.MaxObjects
}
