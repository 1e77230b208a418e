package runtimetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	mathrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// Container-level hostile downloads: the container, not a crafted archive,
// plays the attacker. It plants symlinks and FIFOs in what the host copies
// out, makes the source itself a symlink, replaces it with one between
// downloads or swaps it back and forth while the copies run, or makes it
// too big. Whatever the engine streams (Docker sends a symlink as a
// symlink; Podman resolves it inside the container at stat or copy time),
// the host must write only regular files and directories inside the
// destination, or refuse with a typed error, and leave nothing else
// behind.
func (s *suite) hostile(t *testing.T) {
	for _, sub := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"planted symlinks", s.plantedSymlinks},
		{"symlink source", s.symlinkSource},
		{"source replaced by symlink", s.sourceReplacedBySymlink},
		{"racing symlink swaps", s.racingSymlinkSwaps},
		{"past the caps", s.pastTheCaps},
	} {
		t.Run(sub.name, func(t *testing.T) {
			t.Parallel()
			sub.fn(t)
		})
	}
}

// A command plants symlinks to /, /etc/passwd and .. (and a FIFO) in the
// directory it produces: the download writes only regular content, inside
// the destination, and reports what it skipped.
func (s *suite) plantedSymlinks(t *testing.T) {
	sb := s.start(t, sandboxagent.SandboxOptions{})
	ctx := ctxT(t, 3*time.Minute)
	sh(t, ctx, sb, `set -e; mkdir -p /out/sub; echo ok > /out/real.txt
ln -s / /out/root; ln -s /etc/passwd /out/passwd; ln -s .. /out/up; ln -s ../../../../etc /out/sub/etc; mkfifo /out/fifo`)
	parent, before := hostParent(t)
	dst := filepath.Join(parent, "dl", "0")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	rep, err := sb.Download(ctx, "/out", dst)
	if err != nil {
		t.Fatal(err)
	}
	skipped := map[string]bool{}
	for _, s := range rep.Skipped {
		skipped[s.Name] = true
	}
	for _, n := range []string{"out/root", "out/passwd", "out/up", "out/sub/etc", "out/fifo"} {
		if !skipped[n] {
			t.Errorf("%s not reported as skipped (report %+v)", n, rep.Skipped)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "out", "real.txt")); string(b) != "ok\n" {
		t.Errorf("real.txt = %q", b)
	}
	checkHost(t, parent, before, "out")
}

// A symlink given as the source of ReadFile or Download is never followed
// (Podman's archive endpoint resolves it; Docker's sends the link).
func (s *suite) symlinkSource(t *testing.T) {
	sb := s.start(t, sandboxagent.SandboxOptions{})
	ctx := ctxT(t, 3*time.Minute)
	sh(t, ctx, sb, "set -e; echo secret > /tmp/target; ln -s /tmp/target /tmp/link; ln -s / /tmp/rootlink; ln -s .. /tmp/uplink")
	if b, err := sb.ReadFile(ctx, "/tmp/link", 0); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Errorf("ReadFile of a symlink = %q, %v; want ErrInvalidArgument (not a regular file)", b, err)
	}
	parent, before := hostParent(t)
	for i, src := range []string{"/tmp/link", "/tmp/rootlink", "/tmp/uplink"} {
		dst := filepath.Join(parent, "dl", fmt.Sprint(i))
		os.Mkdir(dst, 0o755)
		rep, err := sb.Download(ctx, src, dst)
		if !errors.Is(err, sandboxagent.ErrUnsafeArchive) {
			t.Errorf("Download %s: %+v, %v; want ErrUnsafeArchive", src, rep, err)
		}
		if rep.Files != 0 || rep.Bytes != 0 {
			t.Errorf("Download %s wrote %+v", src, rep)
		}
		if ents, _ := os.ReadDir(dst); len(ents) != 0 {
			t.Errorf("Download %s left %v", src, ents)
		}
	}
	checkHost(t, parent, before)
	// The target itself still reads.
	if b, err := sb.ReadFile(ctx, "/tmp/target", 0); err != nil || string(b) != "secret\n" {
		t.Errorf("ReadFile target = %q, %v", b, err)
	}
}

// The container replaces the directory the host downloads with a symlink
// (to /, /etc, .., and a chain ending at /) between two downloads: the
// first download brings the real content, every later one is refused
// with ErrUnsafeArchive and writes nothing, and nothing on the host
// changed.
func (s *suite) sourceReplacedBySymlink(t *testing.T) {
	sb := s.start(t, sandboxagent.SandboxOptions{})
	ctx := ctxT(t, 5*time.Minute)
	marker := randMarker()
	sh(t, ctx, sb, `set -e; mkdir -p /tmp/h/out/sub /tmp/h/keep; cd /tmp/h
echo real > "out/$1.txt"; echo deep > "out/sub/$1.txt"; cp -a out keep/`, marker)
	parent, _ := hostParent(t)

	first := filepath.Join(parent, "dl", "0")
	os.Mkdir(first, 0o755)
	rep, err := sb.Download(ctx, "/tmp/h/out", first)
	if err != nil || rep.Files != 2 {
		t.Fatalf("download of the real directory: %+v, %v", rep, err)
	}
	if b, _ := os.ReadFile(filepath.Join(first, "out", "sub", marker+".txt")); string(b) != "deep\n" {
		t.Fatalf("sub file = %q", b)
	}
	before := snapshot(t, parent) // the first download is now host data too

	for i, target := range []string{"/", "/etc", "..", "/tmp/h/chain", "/tmp/h/keep/out/../../../"} {
		// Replace the source with a symlink (a chain: out -> chain -> /).
		sh(t, ctx, sb, `set -e; cd /tmp/h; rm -rf out chain; ln -s / chain; ln -s "$1" out; test -L out`, target)
		dst := filepath.Join(parent, "dl", fmt.Sprint(i+1))
		os.Mkdir(dst, 0o755)
		rep, err := sb.Download(ctx, "/tmp/h/out", dst)
		if !errors.Is(err, sandboxagent.ErrUnsafeArchive) {
			t.Errorf("out -> %s: %+v, %v; want ErrUnsafeArchive", target, rep, err)
		}
		if rep.Files != 0 || rep.Bytes != 0 || rep.Dirs != 0 {
			t.Errorf("out -> %s: wrote %+v", target, rep)
		}
		if ents, _ := os.ReadDir(dst); len(ents) != 0 {
			t.Errorf("out -> %s: left %v in the destination", target, ents)
		}
		// The same through a file name as the destination.
		if _, err := sb.Download(ctx, "/tmp/h/out", filepath.Join(dst, "named")); !errors.Is(err, sandboxagent.ErrUnsafeArchive) {
			t.Errorf("out -> %s to a named destination: %v; want ErrUnsafeArchive", target, err)
		}
	}
	// And a symlinked directory in the middle of the source path is
	// resolved inside the container, never on the host.
	sh(t, ctx, sb, `set -e; cd /tmp/h; rm -rf out; ln -s keep mid`)
	mid := filepath.Join(parent, "dl", "mid")
	os.Mkdir(mid, 0o755)
	if rep, err := sb.Download(ctx, "/tmp/h/mid/out", mid); err != nil || rep.Files != 2 {
		t.Errorf("download through a symlinked parent in the container: %+v, %v", rep, err)
	}
	checkHost(t, parent, before, "out")
	noMarkerOnHost(t, marker)
}

// swapScript runs inside the sandbox: a tight loop that turns
// /tmp/race/out from a directory of files into a symlink to /, to /etc
// and to .., and back, and inside it flips sub between a directory and a
// symlink to /, with plain renames and ln -sfn and, where mv has
// --exchange (renameat2 RENAME_EXCHANGE), atomic directory<->symlink
// swaps. It stops when /tmp/race/stop exists, and writes the number of
// rounds to /tmp/race/rounds. $1 is the marker the file names carry.
const swapScript = `set -u
mkdir -p /tmp/race && cd /tmp/race
mkdir -p out/sub && echo one > "out/$1.txt" && echo two > "out/sub/$1.txt" && ln -s /etc/passwd out/passwd
ex=0
mkdir probe.d && ln -s / probe.l && mv -T --exchange probe.l probe.d 2>/dev/null && ex=1
rm -rf probe.l probe.d
echo "$ex" > exchange
n=0
: > ready
while [ ! -e stop ] && [ "$n" -lt 1000000 ]; do
	n=$((n+1))
	mv -T out held; ln -s / out
	ln -sfn /etc out
	ln -sfn .. out
	rm -f out; mv -T held out
	mv -T out/sub out/held.sub; ln -s / out/sub
	rm -f out/sub; mv -T out/held.sub out/sub
	if [ "$ex" = 1 ]; then
		ln -sfn / lnk; mv -T --exchange lnk out; mv -T --exchange lnk out
		ln -sfn .. lnk; mv -T --exchange lnk out; mv -T --exchange lnk out
	fi
	[ $((n % 50)) = 0 ] && echo "$n" > rounds
done
echo "$n" > rounds
`

// While a loop inside the sandbox swaps the source between a directory
// and symlinks to /, /etc and .. as fast as it can, the host downloads it
// again and again. Every download either succeeds with regular content
// only, inside its destination, or fails with a typed error; nothing
// outside the destinations changes and no staging directory is left.
func (s *suite) racingSymlinkSwaps(t *testing.T) {
	// If a swap makes the engine stream the container's whole root
	// filesystem (Podman resolves the symlink when it copies), the caps
	// refuse it quickly instead of copying hundreds of megabytes.
	sb := s.start(t, sandboxagent.SandboxOptions{}, func(c *sandboxagent.Config) {
		c.MaxDownloadBytes = 16 << 20
		c.MaxDownloadEntries = 4000
	})
	ctx := ctxT(t, 8*time.Minute) // forty copies on a loaded machine
	marker := randMarker()

	swapCtx, stopSwap := context.WithCancel(ctx)
	defer stopSwap()
	type swapResult struct {
		res sandboxagent.ExecResult
		err error
	}
	swapDone := make(chan swapResult, 1)
	go func() {
		res, err := sb.Run(swapCtx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", swapScript, "sh", marker}, Timeout: 7 * time.Minute})
		swapDone <- swapResult{res, err}
	}()
	// Wait until the loop runs.
	if !poll(time.Minute, func() bool {
		select {
		case r := <-swapDone:
			t.Fatalf("swap loop ended early: %+v %v", r.res, r.err)
		default:
		}
		res, err := sb.Exec(ctx, []string{"sh", "-c", "test -e /tmp/race/ready && cat /tmp/race/exchange"})
		if err != nil || res.ExitCode != 0 {
			return false
		}
		t.Logf("swap loop running (mv --exchange available: %s)", strings.TrimSpace(string(res.Stdout)))
		return true
	}) {
		t.Fatal("swap loop did not start")
	}

	parent, before := hostParent(t)
	const downloads = 40
	outcomes := map[string]int{}
	for i := range downloads {
		// A refusal comes back in milliseconds, a copy takes longer:
		// without a pause, most downloads would land in one short state.
		time.Sleep(time.Duration(mathrand.IntN(60)) * time.Millisecond)
		dst := filepath.Join(parent, "dl", fmt.Sprint(i))
		if err := os.Mkdir(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		rep, err := sb.Download(ctx, "/tmp/race/out", dst)
		switch {
		case err == nil:
			// "ok": the real directory; "ok-elsewhere": the engine
			// resolved a swapped-in symlink inside the container and sent
			// that directory under the requested name (Podman).
			if _, err := os.Stat(filepath.Join(dst, "out", marker+".txt")); err == nil {
				outcomes["ok"]++
			} else {
				outcomes["ok-elsewhere"]++
			}
			if rep.Path != filepath.Join(dst, "out") {
				t.Errorf("download %d: report path %s", i, rep.Path)
			}
			// A success holds regular content only (checked by checkHost).
			if rep.Files == 0 && rep.Dirs == 0 {
				t.Errorf("download %d: success with nothing written: %+v", i, rep)
			}
		case typedRefusal(err):
			outcomes[refusalKind(err)]++
			if ents, _ := os.ReadDir(dst); len(ents) != 0 {
				t.Errorf("download %d refused (%v) but left %v", i, err, ents)
			}
		default:
			outcomes["other"]++
			t.Errorf("download %d: untyped error: %v", i, err)
		}
		if err != nil {
			t.Logf("download %d: %v", i, err)
		}
	}

	// Stop the loop and check it was really racing.
	sh(t, ctx, sb, "touch /tmp/race/stop")
	select {
	case r := <-swapDone:
		if r.err != nil || r.res.ExitCode != 0 {
			t.Errorf("swap loop: exit %d, %v: %s", r.res.ExitCode, r.err, r.res.Stderr)
		}
	case <-time.After(time.Minute):
		stopSwap()
		t.Error("swap loop did not stop")
		<-swapDone
	}
	rounds, _ := sb.ReadFile(ctx, "/tmp/race/rounds", 0)
	t.Logf("%d downloads during %s swap rounds: %v", downloads, bytes.TrimSpace(rounds), outcomes)
	if n := strings.TrimSpace(string(rounds)); n == "" || n == "0" {
		t.Errorf("the swap loop made no rounds (%q)", n)
	}
	checkHost(t, parent, before, "out")
	noMarkerOnHost(t, marker)
	if res, err := sb.Exec(ctx, []string{"true"}); err != nil || res.ExitCode != 0 {
		t.Errorf("sandbox after the race: %+v %v", res, err)
	}
}

// Past the byte, entry and depth caps a download is refused with
// ErrLimitExceeded and leaves nothing: no partial tree, no staging, and a
// file it would have replaced is intact.
func (s *suite) pastTheCaps(t *testing.T) {
	const maxBytes, maxEntries, maxDepth = 1 << 20, 50, 8
	sb := s.start(t, sandboxagent.SandboxOptions{}, func(c *sandboxagent.Config) {
		c.MaxDownloadBytes = maxBytes
		c.MaxDownloadEntries = maxEntries
		c.MaxDownloadDepth = maxDepth
	})
	ctx := ctxT(t, 3*time.Minute)
	sh(t, ctx, sb, `set -e
mkdir -p /tmp/big /tmp/many /tmp/deep/a/b/c/d/e/f/g/h/i/j
echo small > /tmp/big/a.txt; head -c 4194304 /dev/zero > /tmp/big/huge.bin
i=0; while [ $i -lt 200 ]; do echo $i > /tmp/many/f$i; i=$((i+1)); done
echo deep > /tmp/deep/a/b/c/d/e/f/g/h/i/j/leaf.txt`)
	parent, before := hostParent(t)
	existing := filepath.Join(parent, "dl", "existing.bin")
	if err := os.WriteFile(existing, []byte("host data\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before = snapshot(t, parent)

	for i, src := range []string{"/tmp/big", "/tmp/big/huge.bin", "/tmp/many", "/tmp/deep"} {
		dst := filepath.Join(parent, "dl", fmt.Sprint(i))
		os.Mkdir(dst, 0o755)
		rep, err := sb.Download(ctx, src, dst)
		if !errors.Is(err, sandboxagent.ErrLimitExceeded) {
			t.Errorf("Download %s: %+v, %v; want ErrLimitExceeded", src, rep, err)
		}
		if ents, _ := os.ReadDir(dst); len(ents) != 0 {
			t.Errorf("Download %s left %v", src, ents)
		}
	}
	// Onto an existing file: refused, and the file is as it was.
	if _, err := sb.Download(ctx, "/tmp/big/huge.bin", existing); !errors.Is(err, sandboxagent.ErrLimitExceeded) {
		t.Errorf("Download onto an existing file: %v; want ErrLimitExceeded", err)
	}
	if _, err := sb.ReadFile(ctx, "/tmp/big/huge.bin", 0); !errors.Is(err, sandboxagent.ErrLimitExceeded) {
		t.Errorf("ReadFile past max_download_bytes: %v; want ErrLimitExceeded", err)
	}
	checkHost(t, parent, before)
	// Within the caps the same sandbox downloads.
	ok := filepath.Join(parent, "dl", "ok")
	os.Mkdir(ok, 0o755)
	if rep, err := sb.Download(ctx, "/tmp/big/a.txt", ok); err != nil || rep.Files != 1 {
		t.Errorf("download within the caps: %+v, %v", rep, err)
	}
}

// hostNode is what a snapshot records of one host path.
type hostNode struct {
	typ  fs.FileMode
	perm fs.FileMode
	sum  [sha256.Size]byte // regular files
	link string            // symlinks
}

// snapshot records every path under root (symlinks not followed).
func snapshot(t *testing.T, root string) map[string]hostNode {
	t.Helper()
	out := map[string]hostNode{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		n := hostNode{typ: fi.Mode().Type(), perm: fi.Mode().Perm()}
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			n.sum = sha256.Sum256(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			if n.link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		rel, _ := filepath.Rel(root, p)
		out[filepath.ToSlash(rel)] = n
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot %s: %v", root, err)
	}
	return out
}

// hostParent makes a parent directory holding canaries (a file, a
// directory, a symlink to /) and a folder dl for the downloads' own
// destination folders, and returns it with its snapshot.
func hostParent(t *testing.T) (string, map[string]hostNode) {
	t.Helper()
	parent := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(parent, "canary.txt"), []byte("host data\n"), 0o600))
	must(os.MkdirAll(filepath.Join(parent, "etc"), 0o755))
	must(os.WriteFile(filepath.Join(parent, "etc", "passwd"), []byte("root:x:0:0:host\n"), 0o644))
	must(os.Symlink("/", filepath.Join(parent, "rootlink")))
	must(os.Mkdir(filepath.Join(parent, "dl"), 0o755))
	return parent, snapshot(t, parent)
}

// checkHost compares parent with its snapshot from before: every host
// path is unchanged, and every new one is a regular file or directory
// under one of the download directories dl/NN, inside an entry named
// top (the download's source base name; none: nothing may be written),
// with no staging left.
func checkHost(t *testing.T, parent string, before map[string]hostNode, top ...string) {
	t.Helper()
	after := snapshot(t, parent)
	for p, n := range before {
		if p == "dl" {
			continue // gains entries
		}
		if got, ok := after[p]; !ok || got != n {
			t.Errorf("host path %s changed: %+v -> %+v (present %v)", p, n, got, ok)
		}
	}
	for p, n := range after {
		if _, ok := before[p]; ok {
			continue
		}
		parts := strings.Split(p, "/")
		if parts[0] != "dl" || len(parts) < 2 {
			t.Errorf("written outside the download directories: %s", p)
		}
		if n.typ != 0 && n.typ != fs.ModeDir {
			t.Errorf("%s is %v: only regular files and directories may be written", p, n.typ)
		}
		if len(parts) >= 3 && !slices.Contains(top, parts[2]) {
			t.Errorf("%s: not under the requested top entry %q", p, top)
		}
		if n.perm&0o022 != 0 {
			t.Errorf("%s is writable by group or others: %v", p, n.perm)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(parent, "dl"))
	for _, e := range ents {
		assertNoStaging(t, filepath.Join(parent, "dl", e.Name()))
	}
	assertNoStaging(t, parent)
	assertNoStaging(t, filepath.Join(parent, "dl"))
}

// noMarkerOnHost fails if a file named with marker appeared in a host
// directory a followed symlink (/, /etc, the temp dir) would have led to.
func noMarkerOnHost(t *testing.T, marker string) {
	t.Helper()
	for _, dir := range []string{"/", "/etc", os.TempDir(), filepath.Dir(t.TempDir())} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.Contains(e.Name(), marker) {
				t.Errorf("host %s has %s: a download escaped", dir, e.Name())
			}
		}
	}
}

func randMarker() string { return "hostile-" + randHex(6) }

// typedRefusal reports whether err is one of the refusals a hostile
// download may end in.
func typedRefusal(err error) bool {
	return errors.Is(err, sandboxagent.ErrUnsafeArchive) || errors.Is(err, sandboxagent.ErrPathNotFound) ||
		errors.Is(err, sandboxagent.ErrLimitExceeded)
}

func refusalKind(err error) string {
	switch {
	case errors.Is(err, sandboxagent.ErrUnsafeArchive):
		return "unsafe"
	case errors.Is(err, sandboxagent.ErrPathNotFound):
		return "not-found"
	default:
		return "limit"
	}
}
