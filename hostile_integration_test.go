//go:build integration

package sandboxagent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	mathrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// Container-level hostile downloads: the container, not a crafted archive,
// plays the attacker. It replaces what the host is about to copy out with
// a symlink, or swaps it back and forth while the copies run. Whatever the
// engine streams (Docker sends a symlink as a symlink; Podman resolves it
// inside the container at stat or copy time), the host must write only
// regular files and directories inside the destination, or refuse with a
// typed error, and leave nothing else behind.

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
// directory, a symlink to /) beside which the downloads land, and returns
// it with its snapshot.
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
// under one of the download directories dl/NN, with no staging left.
func checkHost(t *testing.T, parent string, before map[string]hostNode) {
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
		if len(parts) >= 3 && parts[2] != "out" {
			t.Errorf("%s: not under the requested top entry", p)
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

func randMarker() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "hostile-" + hex.EncodeToString(b)
}

// typedRefusal reports whether err is one of the refusals a hostile
// download may end in.
func typedRefusal(err error) bool {
	return errors.Is(err, sandboxagent.ErrUnsafeArchive) || errors.Is(err, sandboxagent.ErrPathNotFound) ||
		errors.Is(err, sandboxagent.ErrLimitExceeded)
}

// The container replaces the directory the host downloads with a symlink
// (to /, /etc, .., and a chain ending at /) between two downloads: the
// first download brings the real content, every later one is refused
// with ErrUnsafeArchive and writes nothing, and nothing on the host
// changed.
func TestIntegrationDownloadSourceReplacedBySymlink(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{})
	ctx := ctxT(t)
	marker := randMarker()
	sh := func(script string) {
		t.Helper()
		res, err := sb.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", script, "sh", marker}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("in sandbox: %v exit %d: %s", err, res.ExitCode, res.Stderr)
		}
	}
	sh(`set -e; mkdir -p /tmp/h/out/sub /tmp/h/keep; cd /tmp/h
echo real > "out/$1.txt"; echo deep > "out/sub/$1.txt"; cp -a out keep/`)
	parent, before := hostParent(t)

	first := filepath.Join(parent, "dl", "0")
	os.Mkdir(first, 0o755)
	rep, err := sb.Download(ctx, "/tmp/h/out", first)
	if err != nil || rep.Files != 2 {
		t.Fatalf("download of the real directory: %+v, %v", rep, err)
	}
	if b, _ := os.ReadFile(filepath.Join(first, "out", "sub", marker+".txt")); string(b) != "deep\n" {
		t.Fatalf("sub file = %q", b)
	}
	before = snapshot(t, parent) // the first download is now host data too

	for i, target := range []string{"/", "/etc", "..", "/tmp/h/chain", "/tmp/h/keep/out/../../../"} {
		// Replace the source with a symlink (a chain: out -> chain -> /).
		sh(fmt.Sprintf(`set -e; cd /tmp/h; rm -rf out chain; ln -s / chain; ln -s %q out; test -L out`, target))
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
	sh(`set -e; cd /tmp/h; rm -rf out; ln -s keep mid`)
	mid := filepath.Join(parent, "dl", "mid")
	os.Mkdir(mid, 0o755)
	if rep, err := sb.Download(ctx, "/tmp/h/mid/out", mid); err != nil || rep.Files != 2 {
		t.Errorf("download through a symlinked parent in the container: %+v, %v", rep, err)
	}
	checkHost(t, parent, before)
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
func TestIntegrationDownloadRacingSymlinkSwaps(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	cfg := testenv.Config()
	// If a swap makes the engine stream the container's whole root
	// filesystem (Podman resolves the symlink when it copies), the caps
	// refuse it quickly instead of copying hundreds of megabytes.
	cfg.MaxDownloadBytes = 16 << 20
	cfg.MaxDownloadEntries = 4000
	sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{Config: cfg})
	// Longer than ctxT: forty copies on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	marker := randMarker()

	swapCtx, stopSwap := context.WithCancel(ctx)
	defer stopSwap()
	type swapResult struct {
		res sandboxagent.ExecResult
		err error
	}
	swapDone := make(chan swapResult, 1)
	go func() {
		res, err := sb.Run(swapCtx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", swapScript, "sh", marker}, Timeout: 6 * time.Minute})
		swapDone <- swapResult{res, err}
	}()
	// Wait until the loop runs.
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := sb.Exec(ctx, []string{"sh", "-c", "test -e /tmp/race/ready && cat /tmp/race/exchange"})
		if err == nil && res.ExitCode == 0 {
			t.Logf("swap loop running (mv --exchange available: %s)", strings.TrimSpace(string(res.Stdout)))
			break
		}
		select {
		case r := <-swapDone:
			t.Fatalf("swap loop ended early: %+v %v", r.res, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("swap loop did not start")
		}
		time.Sleep(100 * time.Millisecond)
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
			// A success holds regular content: the real files, or (when
			// the engine resolved a swapped symlink inside the container)
			// container files; never a symlink, checked by checkHost.
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
	if _, err := sb.Exec(ctx, []string{"touch", "/tmp/race/stop"}); err != nil {
		t.Fatal(err)
	}
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

	checkHost(t, parent, before)
	noMarkerOnHost(t, marker)
	// The sandbox is still usable.
	if res, err := sb.Exec(ctx, []string{"true"}); err != nil || res.ExitCode != 0 {
		t.Errorf("sandbox after the race: %+v %v", res, err)
	}
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
