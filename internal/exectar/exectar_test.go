package exectar

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// local runs the copy scripts on this host, as a sandbox's exec would.
func local(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Stdin, c.Stdout, c.Stderr = stdin, stdout, stderr
	err := c.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, err
}

func oneFile(t *testing.T, name, body string) io.Reader {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(body))
	tw.Close()
	return &b
}

func TestCopyRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := CopyTo(ctx, local, "container", dir, oneFile(t, "a.txt", "hello\n")); err != nil {
		t.Fatal(err)
	}
	rc, err := CopyFrom(ctx, local, "container", filepath.Join(dir, "a.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	h, err := tr.Next()
	if err != nil || h.Name != "a.txt" {
		t.Fatalf("first entry %+v %v", h, err)
	}
	if b, _ := io.ReadAll(tr); string(b) != "hello\n" {
		t.Errorf("content %q", b)
	}
}

func TestCopyMissingAndForbidden(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := CopyTo(ctx, local, "container", filepath.Join(dir, "nope"), oneFile(t, "a", "x")); !errors.Is(err, sandboxagent.ErrPathNotFound) {
		t.Errorf("copy into a missing folder: %v", err)
	}
	if _, err := CopyFrom(ctx, local, "container", filepath.Join(dir, "nope")); !errors.Is(err, sandboxagent.ErrPathNotFound) {
		t.Errorf("copy of a missing path: %v", err)
	}
	if os.Geteuid() == 0 {
		t.Log("root reads every folder: the forbidden case needs another user")
		return
	}
	locked := filepath.Join(dir, "locked")
	if err := os.Mkdir(locked, 0o000); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(locked, 0o755)
	if err := CopyTo(ctx, local, "container", locked, oneFile(t, "a", "x")); !errors.Is(err, os.ErrPermission) {
		t.Errorf("copy into a folder the user cannot enter: %v", err)
	}
}
