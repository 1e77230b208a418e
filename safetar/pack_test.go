//go:build linux

package safetar

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func writeFile(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func TestPackRoundTrip(t *testing.T) {
	src := filepath.Join(t.TempDir(), "work")
	writeFile(t, filepath.Join(src, "README.md"), "# hi\n", 0o644)
	writeFile(t, filepath.Join(src, "bin", "run.sh"), "#!/bin/sh\necho hi\n", 0o755)
	writeFile(t, filepath.Join(src, "a", "b", "c", "deep.txt"), strings.Repeat("deep ", 10000), 0o600)
	writeFile(t, filepath.Join(src, "long", strings.Repeat("n", 200)), "long name", 0o644)
	if err := os.Mkdir(filepath.Join(src, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../README.md", filepath.Join(src, "bin", "readme")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if l, err := net.Listen("unix", filepath.Join(src, "sock")); err == nil {
		defer l.Close()
	}

	var buf bytes.Buffer
	if err := Pack(context.Background(), &buf, src, "work", Owner{}); err != nil {
		t.Fatal(err)
	}

	// The stream itself: symlink stored as a symlink, no special files, no host ownership.
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: ownership %d:%d %q:%q", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if h.Name == "work/bin/readme" && (h.Typeflag != tar.TypeSymlink || h.Linkname != "../README.md") {
			t.Errorf("symlink stored as %c -> %q", h.Typeflag, h.Linkname)
		}
		if strings.Contains(h.Name, "fifo") || strings.Contains(h.Name, "sock") {
			t.Errorf("special file packed: %s", h.Name)
		}
	}
	if names[0] != "work/" {
		t.Errorf("first entry %q", names[0])
	}

	s := newSandbox(t)
	rep, err := Extract(context.Background(), bytes.NewReader(buf.Bytes()), s.dst, "work", Limits{})
	s.check(t)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"work/": "", "work/README.md": "# hi\n", "work/bin/": "", "work/bin/run.sh": "#!/bin/sh\necho hi\n",
		"work/a/": "", "work/a/b/": "", "work/a/b/c/": "", "work/a/b/c/deep.txt": strings.Repeat("deep ", 10000),
		"work/long/": "", "work/long/" + strings.Repeat("n", 200): "long name", "work/empty/": "",
	}
	if got := s.tree(t); !equalMaps(got, want) {
		t.Errorf("tree:\n got %q\nwant %q", got, want)
	}
	wantMode(t, s, "work/bin/run.sh", 0o755)
	wantMode(t, s, "work/a/b/c/deep.txt", 0o644)
	if len(rep.Skipped) != 1 || rep.Skipped[0].Name != "work/bin/readme" {
		t.Errorf("skipped %q", rep.Skipped)
	}
}

func TestPackSingleFileAndSymlinkRoot(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "qs.py"), "print(1)\n", 0o755)
	var buf bytes.Buffer
	if err := Pack(context.Background(), &buf, filepath.Join(dir, "qs.py"), "qs.py", Owner{}); err != nil {
		t.Fatal(err)
	}
	s := newSandbox(t)
	if _, err := Extract(context.Background(), &buf, s.dst, "qs.py", Limits{}); err != nil {
		t.Fatal(err)
	}
	if got := s.tree(t); !equalMaps(got, map[string]string{"qs.py": "print(1)\n"}) {
		t.Errorf("tree %q", got)
	}
	wantMode(t, s, "qs.py", 0o755)

	// A symlink as src is stored, not followed.
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := Pack(context.Background(), &buf, filepath.Join(dir, "link"), "link", Owner{}); err != nil {
		t.Fatal(err)
	}
	h, err := tar.NewReader(&buf).Next()
	if err != nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "/etc/passwd" || h.Size != 0 {
		t.Fatalf("header %+v, %v", h, err)
	}
}

func TestPackErrors(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "f"), "x", 0o644)
	if err := Pack(context.Background(), io.Discard, filepath.Join(dir, "missing"), "x", Owner{}); err == nil {
		t.Error("missing src: no error")
	}
	for _, name := range []string{"", "..", "a/b"} {
		if err := Pack(context.Background(), io.Discard, dir, name, Owner{}); err == nil {
			t.Errorf("name %q: no error", name)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Pack(ctx, io.Discard, dir, "d", Owner{}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled ctx: %v", err)
	}
}

func TestPackRecordsOwner(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "d", "f"), "x", 0o644)
	var buf bytes.Buffer
	if err := Pack(context.Background(), &buf, filepath.Join(dir, "d"), "d", Owner{UID: 1000, GID: 1001}); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&buf)
	n := 0
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		if hdr.Uid != 1000 || hdr.Gid != 1001 || hdr.Uname != "" || hdr.Gname != "" {
			t.Errorf("%s owned by %d:%d (%q:%q)", hdr.Name, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname)
		}
	}
	if n != 2 {
		t.Errorf("%d entries", n)
	}
}
