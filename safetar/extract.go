package safetar

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// wireSlackPerEntry is the raw-stream allowance per permitted entry on top of
// MaxBytes: headers, padding, PAX and GNU records, skipped bodies.
const wireSlackPerEntry = 16 << 10

type kind uint8

const (
	kindImplicitDir kind = iota
	kindDir
	kindFile
	kindSkipped
)

// node is one name this run has claimed. Children are keyed by foldKey of
// the component, so case twins meet at the same key.
type node struct {
	name     string // exact component
	kind     kind
	mode     os.FileMode // files
	size     int64       // files
	children map[string]*node
}

func (n *node) isDir() bool { return n.kind == kindDir || n.kind == kindImplicitDir }

type extractor struct {
	ctx     context.Context
	root    *os.Root
	top     string
	lim     Limits
	tree    node // the destination directory itself
	rep     Report
	objects int // archive entries + implicit directories
	buf     []byte
	now     time.Time
	wireMax int64
}

// Extract reads the tar stream r and writes it under dir, which must be an
// existing empty directory (the caller's fresh staging directory). top is the
// required top-level name, the basename the caller asked the container for:
// every entry must be top itself or under top/ at a component boundary.
//
// See the package documentation for the full policy. On error the returned
// Report describes what was written so far and the caller must remove dir;
// nothing is ever written outside dir.
func Extract(ctx context.Context, r io.Reader, dir, top string, lim Limits) (Report, error) {
	if err := checkTop(top); err != nil {
		return Report{}, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Report{}, fmt.Errorf("safetar: open destination: %w", err)
	}
	defer root.Close()
	if err := checkEmpty(root); err != nil {
		return Report{}, err
	}

	lim = lim.withDefaults()
	wireMax := int64(math.MaxInt64)
	if slack := int64(lim.MaxEntries) + 1; slack <= (math.MaxInt64-lim.MaxBytes)/wireSlackPerEntry {
		wireMax = lim.MaxBytes + slack*wireSlackPerEntry
	}
	src := newSource(ctx, r, wireMax)
	defer src.stop()

	e := &extractor{
		ctx:     ctx,
		root:    root,
		top:     top,
		lim:     lim,
		tree:    node{kind: kindDir, children: map[string]*node{}},
		buf:     make([]byte, 32<<10),
		now:     time.Now(),
		wireMax: wireMax,
	}
	err = e.run(tar.NewReader(src), src)
	return e.rep, err
}

func checkTop(top string) error {
	bad := top == "" || top == "." || top == ".." || len(top) > MaxComponentLen ||
		strings.ContainsAny(top, "/\\\x00") || !filepath.IsLocal(top)
	if bad {
		return fmt.Errorf("safetar: invalid top-level name %q", shorten(top))
	}
	return nil
}

func checkEmpty(root *os.Root) error {
	d, err := root.Open(".")
	if err != nil {
		return fmt.Errorf("safetar: open destination: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if len(names) > 0 {
		return fmt.Errorf("safetar: destination %s is not empty", root.Name())
	}
	if err != nil && err != io.EOF {
		return fmt.Errorf("safetar: read destination: %w", err)
	}
	return nil
}

func (e *extractor) run(tr *tar.Reader, src *source) error {
	real := 0
	for {
		if err := e.ctx.Err(); err != nil {
			return &Error{Reason: "interrupted", Err: err}
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			if real == 0 {
				return &Error{Reason: "empty archive", Err: ErrTruncated}
			}
			if src.sawEOF {
				return &Error{Reason: "stream ended without end-of-archive marker", Err: ErrTruncated}
			}
			return nil
		}
		if err != nil {
			return e.streamErr("", "reading header", err)
		}
		if err := e.count(hdr.Name); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		real++
		if err := e.entry(tr, hdr); err != nil {
			return err
		}
	}
}

// count charges one object (entry or implicit directory) against MaxEntries.
func (e *extractor) count(name string) error {
	e.objects++
	if e.objects > e.lim.MaxEntries {
		return newErr(name, ErrLimit, "more than %d entries (implicitly created directories included)", e.lim.MaxEntries)
	}
	return nil
}

// streamErr classifies an error from the tar reader or the source.
func (e *extractor) streamErr(entry, what string, err error) error {
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return &Error{Entry: shorten(entry), Reason: "interrupted while " + what, Err: err}
	case errors.As(err, new(*os.PathError)):
		return &Error{Entry: shorten(entry), Reason: what + ": " + err.Error(), Err: err}
	case errors.Is(err, errWireLimit):
		return newErr(entry, ErrLimit, "raw stream exceeds %d bytes", e.wireMax)
	default:
		return &Error{Entry: shorten(entry), Reason: what + ": " + err.Error(),
			Err: fmt.Errorf("%w: %w", ErrTruncated, err)}
	}
}

func isSparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

func (e *extractor) entry(tr *tar.Reader, hdr *tar.Header) error {
	isDir := hdr.Typeflag == tar.TypeDir
	comps, err := e.checkName(hdr.Name, isDir)
	if err != nil {
		return err
	}
	rel := strings.Join(comps, "/")

	var skip string
	switch {
	case isSparse(hdr):
		skip = "sparse file"
	case hdr.Typeflag == tar.TypeReg:
		return e.file(tr, hdr, comps, rel)
	case isDir:
		return e.dir(hdr, comps, rel)
	case hdr.Typeflag == tar.TypeLink:
		target, reason := e.linkTarget(hdr.Linkname)
		if target == nil {
			skip = reason
			break
		}
		return e.hardlink(hdr, comps, rel, target)
	case hdr.Typeflag == tar.TypeSymlink:
		skip = "symlink to " + fmt.Sprintf("%q", shorten(hdr.Linkname))
	case hdr.Typeflag == tar.TypeChar:
		skip = "character device"
	case hdr.Typeflag == tar.TypeBlock:
		skip = "block device"
	case hdr.Typeflag == tar.TypeFifo:
		skip = "fifo"
	case hdr.Typeflag == tar.TypeCont:
		skip = "contiguous file (type '7')"
	default:
		skip = fmt.Sprintf("unsupported type %q", hdr.Typeflag)
	}
	// Skipped entries still claim their name, so a later entry cannot reuse
	// it or write beneath it.
	if _, err := e.claim(hdr.Name, comps, kindSkipped); err != nil {
		return err
	}
	e.rep.skip(rel, skip)
	return nil
}

// checkName validates an entry name and returns its components. The first
// component is always e.top.
func (e *extractor) checkName(name string, isDir bool) ([]string, error) {
	comps, trailing, reason := splitName(name)
	if reason != "" {
		return nil, newErr(name, ErrUnsafe, "%s", reason)
	}
	if trailing && !isDir {
		return nil, newErr(name, ErrUnsafe, "trailing slash on a non-directory")
	}
	if comps[0] != e.top {
		return nil, newErr(name, ErrUnsafe, "not under the requested top-level name %q", e.top)
	}
	if len(comps) > e.lim.MaxDepth {
		return nil, newErr(name, ErrLimit, "deeper than %d components", e.lim.MaxDepth)
	}
	return comps, nil
}

// splitName applies the lexical name rules. reason is "" when name is
// acceptable; trailing reports a trailing slash.
func splitName(name string) (comps []string, trailing bool, reason string) {
	switch {
	case name == "":
		return nil, false, "empty name"
	case len(name) > MaxNameLen:
		return nil, false, fmt.Sprintf("name longer than %d bytes", MaxNameLen)
	case strings.IndexByte(name, 0) >= 0:
		return nil, false, "name contains NUL"
	case strings.IndexByte(name, '\\') >= 0:
		return nil, false, "name contains a backslash"
	case name[0] == '/':
		return nil, false, "absolute name"
	}
	if strings.HasSuffix(name, "/") {
		trailing = true
		name = name[:len(name)-1]
	}
	for strings.HasPrefix(name, "./") {
		name = name[2:]
	}
	if name == "" || name == "." {
		return nil, false, "empty name"
	}
	comps = strings.Split(name, "/")
	for _, c := range comps {
		switch {
		case c == "":
			return nil, false, "empty path component"
		case c == ".":
			return nil, false, `"." path component`
		case c == "..":
			return nil, false, `".." path component`
		case len(c) > MaxComponentLen:
			return nil, false, fmt.Sprintf("path component longer than %d bytes", MaxComponentLen)
		}
	}
	if !filepath.IsLocal(filepath.FromSlash(name)) {
		return nil, false, "not a local path on this host"
	}
	return comps, trailing, ""
}

// claim registers comps as kind k, creating missing parents implicitly. It
// returns the new node. A directory entry may claim an implicit directory.
func (e *extractor) claim(entry string, comps []string, k kind) (*node, error) {
	n := &e.tree
	for i, c := range comps[:len(comps)-1] {
		key := foldKey(c)
		child := n.children[key]
		switch {
		case child == nil:
			if err := e.count(entry); err != nil {
				return nil, err
			}
			if err := e.mkdir(entry, strings.Join(comps[:i+1], "/")); err != nil {
				return nil, err
			}
			child = &node{name: c, kind: kindImplicitDir, children: map[string]*node{}}
			n.children[key] = child
		case child.name != c:
			return nil, newErr(entry, ErrUnsafe, "parent %q collides (case-fold) with %q",
				strings.Join(comps[:i+1], "/"), child.name)
		case child.kind == kindSkipped:
			return nil, newErr(entry, ErrUnsafe, "parent %q is a skipped entry (symlink, hardlink or special file)",
				strings.Join(comps[:i+1], "/"))
		case !child.isDir():
			return nil, newErr(entry, ErrUnsafe, "parent %q is a file", strings.Join(comps[:i+1], "/"))
		}
		n = child
	}
	last := comps[len(comps)-1]
	key := foldKey(last)
	if old := n.children[key]; old != nil {
		switch {
		case old.name != last:
			return nil, newErr(entry, ErrUnsafe, "name collides (case-fold) with earlier entry %q", old.name)
		case old.kind == kindImplicitDir && k == kindDir:
			old.kind = kindDir
			return old, nil
		default:
			return nil, newErr(entry, ErrUnsafe, "duplicate entry")
		}
	}
	child := &node{name: last, kind: k}
	if k == kindDir {
		child.children = map[string]*node{}
	}
	n.children[key] = child
	return child, nil
}

// lookup finds the node with exactly these components.
func (e *extractor) lookup(comps []string) *node {
	n := &e.tree
	for _, c := range comps {
		if n.children == nil {
			return nil
		}
		n = n.children[foldKey(c)]
		if n == nil || n.name != c {
			return nil
		}
	}
	return n
}

func (e *extractor) mkdir(entry, rel string) error {
	p := filepath.FromSlash(rel)
	if err := e.root.Mkdir(p, 0o755); err != nil {
		return &Error{Entry: shorten(entry), Reason: "create directory: " + err.Error(), Err: err}
	}
	// Counter the umask: directories are always 0755.
	if err := e.root.Chmod(p, 0o755); err != nil {
		return &Error{Entry: shorten(entry), Reason: "chmod directory: " + err.Error(), Err: err}
	}
	e.rep.Dirs++
	return nil
}

func (e *extractor) dir(hdr *tar.Header, comps []string, rel string) error {
	promoted := e.lookup(comps) != nil // only an implicit directory may be claimed again
	if _, err := e.claim(hdr.Name, comps, kindDir); err != nil {
		return err
	}
	if promoted {
		return nil // already on disk
	}
	return e.mkdir(hdr.Name, rel)
}

func fileMode(hdrMode int64) os.FileMode {
	if hdrMode&0o100 != 0 {
		return 0o755
	}
	return 0o644
}

func (e *extractor) saneMtime(t time.Time) bool {
	return t.Unix() > 0 && t.Before(e.now.Add(24*time.Hour))
}

func (e *extractor) remaining() int64 { return e.lim.MaxBytes - e.rep.Bytes }

func (e *extractor) file(tr *tar.Reader, hdr *tar.Header, comps []string, rel string) error {
	if hdr.Size > e.remaining() {
		return newErr(hdr.Name, ErrLimit, "file of %d bytes exceeds the remaining byte budget (%d of %d)",
			hdr.Size, e.remaining(), e.lim.MaxBytes)
	}
	n, err := e.claim(hdr.Name, comps, kindFile)
	if err != nil {
		return err
	}
	mode := fileMode(hdr.Mode)
	written, err := e.write(hdr.Name, rel, mode, tr, "reading body")
	if err != nil {
		return err
	}
	n.mode, n.size = mode, written
	e.setMtime(rel, hdr.ModTime)
	return nil
}

// write creates rel exclusively and copies r into it, failing once the byte
// budget is exhausted.
func (e *extractor) write(entry, rel string, mode os.FileMode, r io.Reader, what string) (int64, error) {
	f, err := e.root.OpenFile(filepath.FromSlash(rel), os.O_WRONLY|os.O_CREATE|os.O_EXCL|oNoFollow, mode)
	if err != nil {
		return 0, &Error{Entry: shorten(entry), Reason: "create file: " + err.Error(), Err: err}
	}
	e.rep.Files++
	n, err := e.copy(entry, f, r, what)
	if err != nil {
		f.Close()
		return n, err
	}
	if err := f.Chmod(mode); err != nil { // counter the umask
		f.Close()
		return n, &Error{Entry: shorten(entry), Reason: "chmod file: " + err.Error(), Err: err}
	}
	if err := f.Close(); err != nil {
		return n, &Error{Entry: shorten(entry), Reason: "close file: " + err.Error(), Err: err}
	}
	return n, nil
}

func (e *extractor) copy(entry string, f *os.File, r io.Reader, what string) (int64, error) {
	var total int64
	for {
		nr, rerr := r.Read(e.buf)
		if nr > 0 {
			if int64(nr) > e.remaining() {
				return total, newErr(entry, ErrLimit, "more than %d bytes of regular files", e.lim.MaxBytes)
			}
			nw, werr := f.Write(e.buf[:nr])
			total += int64(nw)
			e.rep.Bytes += int64(nw)
			if werr != nil {
				return total, &Error{Entry: shorten(entry), Reason: "write file: " + werr.Error(), Err: werr}
			}
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, e.streamErr(entry, what, rerr)
		}
	}
}

func (e *extractor) setMtime(rel string, t time.Time) {
	if e.saneMtime(t) {
		// Best effort; the file was created by us a moment ago and nothing
		// else writes into the staging directory.
		_ = e.root.Chtimes(filepath.FromSlash(rel), t, t)
	}
}

// linkTarget resolves a hardlink target to an extracted regular file, or
// returns a skip reason.
func (e *extractor) linkTarget(linkname string) (*node, string) {
	q := fmt.Sprintf("%q", shorten(linkname))
	comps, trailing, reason := splitName(linkname)
	switch {
	case reason != "":
		return nil, "hardlink to " + q + ": unsafe target (" + reason + ")"
	case trailing:
		return nil, "hardlink to " + q + ": target is a directory"
	case comps[0] != e.top:
		return nil, "hardlink to " + q + ": target outside the archive"
	}
	n := e.lookup(comps)
	switch {
	case n == nil:
		return nil, "hardlink to " + q + ": target not extracted (absent or later in the stream)"
	case n.kind != kindFile:
		return nil, "hardlink to " + q + ": target is not a regular file"
	}
	return n, ""
}

func (e *extractor) hardlink(hdr *tar.Header, comps []string, rel string, target *node) error {
	if target.size > e.remaining() {
		return newErr(hdr.Name, ErrLimit, "hardlink copy of %d bytes exceeds the remaining byte budget (%d of %d)",
			target.size, e.remaining(), e.lim.MaxBytes)
	}
	targetRel := e.relOf(hdr.Linkname)
	n, err := e.claim(hdr.Name, comps, kindFile)
	if err != nil {
		return err
	}
	src, err := e.root.OpenFile(filepath.FromSlash(targetRel), os.O_RDONLY|oNoFollow, 0)
	if err != nil {
		return &Error{Entry: shorten(hdr.Name), Reason: "open hardlink target: " + err.Error(), Err: err}
	}
	defer src.Close()
	written, err := e.write(hdr.Name, rel, target.mode, src, "copying hardlink target")
	if err != nil {
		return err
	}
	n.mode, n.size = target.mode, written
	e.setMtime(rel, hdr.ModTime)
	return nil
}

// relOf returns the cleaned relative path of an already validated name.
func (e *extractor) relOf(name string) string {
	comps, _, _ := splitName(name)
	return strings.Join(comps, "/")
}

// foldKey maps s to a canonical case-folded form: two strings have the same
// key iff strings.EqualFold reports them equal. Invalid UTF-8 bytes are kept
// as they are so that distinct invalid names stay distinct.
func foldKey(s string) string {
	simple := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			simple = false
			break
		}
	}
	if simple {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 {
			b.WriteByte(s[i])
			i++
			continue
		}
		b.WriteRune(foldRune(r))
		i += size
	}
	return b.String()
}

// foldRune returns one fixed member of r's simple-folding orbit: the
// smallest, except that ASCII letters map to lower case (so the fast path in
// foldKey, which leaves lower-case ASCII alone, agrees with it).
func foldRune(r rune) rune {
	min := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f < min {
			min = f
		}
	}
	if 'A' <= min && min <= 'Z' {
		min += 'a' - 'A'
	}
	return min
}
