package runtimetest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// files: WriteFile/ReadFile and Upload/Download of a file and a directory
// round-trip; files put in belong to the sandbox's user; writing where
// only root may is possible exactly when the backend copies as root.
func (s *suite) files(t *testing.T) {
	t.Run("roundtrip", func(t *testing.T) {
		t.Parallel()
		sb := s.start(t, sandboxagent.SandboxOptions{})
		ctx := ctxT(t, 5*time.Minute)

		content := []byte("quotes \" ' and\nnewlines\n\x00binary ünïcode")
		if err := sb.WriteFile(ctx, "/tmp/new/dir/f.txt", content, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := sb.ReadFile(ctx, "/tmp/new/dir/f.txt", 0)
		if err != nil || !bytes.Equal(got, content) {
			t.Fatalf("ReadFile = %q, %v", got, err)
		}
		if mode := sh(t, ctx, sb, "stat -c %a /tmp/new/dir/f.txt"); mode != "600\n" {
			t.Errorf("WriteFile mode 0600 landed as %q", mode)
		}
		if _, err := sb.ReadFile(ctx, "/tmp/new/dir/f.txt", 3); !errors.Is(err, sandboxagent.ErrLimitExceeded) {
			t.Errorf("ReadFile over its cap: %v, want ErrLimitExceeded", err)
		}
		if _, err := sb.ReadFile(ctx, "/no/such/file", 0); !errors.Is(err, sandboxagent.ErrPathNotFound) {
			t.Errorf("ReadFile of a missing file: %v, want ErrPathNotFound", err)
		}
		if _, err := sb.ReadFile(ctx, "/tmp/new/dir", 0); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("ReadFile of a directory: %v, want ErrInvalidArgument", err)
		}

		// A single file, up and back.
		src := t.TempDir()
		one := filepath.Join(src, "one.bin")
		data := bytes.Repeat([]byte("0123456789"), 100_000)
		if err := os.WriteFile(one, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := sb.Upload(ctx, one, "/work/single/one.bin"); err != nil {
			t.Fatalf("Upload of a file: %v", err)
		}
		if got, err := sb.ReadFile(ctx, "/work/single/one.bin", 0); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("uploaded file reads %d bytes, %v", len(got), err)
		}

		// A tree up, changed inside, and back.
		os.MkdirAll(filepath.Join(src, "proj", "sub", "empty"), 0o755)
		os.WriteFile(filepath.Join(src, "proj", "a.txt"), []byte("A"), 0o644)
		os.WriteFile(filepath.Join(src, "proj", "sub", "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755)
		if err := sb.Upload(ctx, filepath.Join(src, "proj"), "/work/proj"); err != nil {
			t.Fatal(err)
		}
		if out := sh(t, ctx, sb, "/work/proj/sub/run.sh && cat /work/proj/a.txt && test -d /work/proj/sub/empty && echo B > /work/proj/b.txt"); out != "ran\nA" {
			t.Fatalf("in the sandbox: %q", out)
		}
		dst := t.TempDir()
		rep, err := sb.Download(ctx, "/work/proj", dst)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Path != filepath.Join(dst, "proj") || rep.Files != 3 {
			t.Errorf("report %+v, want 3 files at %s", rep, filepath.Join(dst, "proj"))
		}
		for name, want := range map[string]string{"a.txt": "A", "b.txt": "B\n", "sub/run.sh": "#!/bin/sh\necho ran\n"} {
			if b, err := os.ReadFile(filepath.Join(dst, "proj", name)); err != nil || string(b) != want {
				t.Errorf("downloaded %s = %q, %v; want %q", name, b, err, want)
			}
		}
		if fi, err := os.Stat(filepath.Join(dst, "proj", "sub", "run.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
			t.Errorf("downloaded run.sh lost its exec bit: %v %v", fi, err)
		}
		if fi, err := os.Stat(filepath.Join(dst, "proj", "sub", "empty")); err != nil || !fi.IsDir() {
			t.Errorf("empty directory not downloaded: %v", err)
		}
		// A single file to an explicit name, replacing a file there.
		named := filepath.Join(dst, "renamed.txt")
		os.WriteFile(named, []byte("old"), 0o644)
		if _, err := sb.Download(ctx, "/work/proj/a.txt", named); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(named); string(b) != "A" {
			t.Errorf("renamed.txt = %q", b)
		}
		// An existing directory is never merged into.
		if _, err := sb.Download(ctx, "/work/proj", dst); !errors.Is(err, sandboxagent.ErrDestinationExists) {
			t.Errorf("download onto an existing directory: %v, want ErrDestinationExists", err)
		}
		if _, err := sb.Download(ctx, "/no/such", filepath.Join(dst, "x")); !errors.Is(err, sandboxagent.ErrPathNotFound) {
			t.Errorf("download of a missing path: %v, want ErrPathNotFound", err)
		}
		if _, err := os.Lstat(filepath.Join(dst, "x")); !os.IsNotExist(err) {
			t.Errorf("a failed download left %s", filepath.Join(dst, "x"))
		}
		assertNoStaging(t, dst)
	})

	// Files put into the sandbox belong to its user, so an unprivileged
	// CLI can rewrite what was uploaded for it.
	t.Run("owned by the sandbox user", func(t *testing.T) {
		t.Parallel()
		sb := s.start(t, sandboxagent.SandboxOptions{User: "65534:65534"})
		ctx := ctxT(t, 3*time.Minute)
		if err := sb.WriteFile(ctx, "/tmp/owned/f.txt", []byte("a\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		src := filepath.Join(t.TempDir(), "up")
		os.MkdirAll(filepath.Join(src, "d"), 0o755)
		os.WriteFile(filepath.Join(src, "d", "g.txt"), []byte("g\n"), 0o644)
		if err := sb.Upload(ctx, src, "/tmp/owned/up"); err != nil {
			t.Fatal(err)
		}
		out := sh(t, ctx, sb, "echo b >> /tmp/owned/f.txt && echo h >> /tmp/owned/up/d/g.txt && touch /tmp/owned/up/d/new && stat -c '%u:%g' /tmp/owned/f.txt /tmp/owned/up /tmp/owned/up/d/g.txt && cat /tmp/owned/f.txt")
		if out != "65534:65534\n65534:65534\n65534:65534\na\nb\n" {
			t.Errorf("stdout %q, want the files owned by 65534:65534 and rewritable", out)
		}

		// /etc belongs to root: only a backend that copies as root can
		// write there for a sandbox whose user is not root.
		err := sb.WriteFile(ctx, "/etc/runtimetest-root-only.txt", []byte("x\n"), 0o644)
		if s.features.CopyAsRoot {
			if err != nil {
				t.Errorf("with CopyAsRoot, WriteFile into /etc for a non-root sandbox: %v", err)
			} else if got := sh(t, ctx, sb, "stat -c '%u:%g' /etc/runtimetest-root-only.txt"); got != "65534:65534\n" {
				t.Errorf("with CopyAsRoot the archive's owner applies: %q, want 65534:65534", got)
			}
		} else {
			if err == nil {
				t.Errorf("without CopyAsRoot, WriteFile into root-owned /etc as user 65534 succeeded: the copy does not run as the container's user")
			}
			if res, _ := sb.Exec(ctx, []string{"test", "-e", "/etc/runtimetest-root-only.txt"}); res.ExitCode == 0 {
				t.Errorf("the refused write left /etc/runtimetest-root-only.txt")
			}
		}
	})
}

// assertNoStaging checks no staging directory was left behind.
func assertNoStaging(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".sandbox-agent-download-") {
			t.Errorf("staging directory left behind in %s: %s", dir, e.Name())
		}
	}
}
