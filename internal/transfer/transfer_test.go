package transfer

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/internal/errdefs"
	"github.com/sandbox-agent/sandbox-agent/safetar"
)

func TestCleanPath(t *testing.T) {
	for in, want := range map[string]string{"/a/b/": "/a/b", "/a/../b": "/b", "/x": "/x", "": "", "rel": "", "/": "", "/..": "", "/a\x00b": ""} {
		got, err := cleanPath(in)
		if got != want || (want == "") != errors.Is(err, errdefs.InvalidArgument) {
			t.Errorf("cleanPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// fakeSandbox serves one archive for every CopyFrom.
type fakeSandbox struct{ archive []byte }

func (f fakeSandbox) CopyTo(context.Context, string, io.Reader) error { return nil }
func (f fakeSandbox) CopyFrom(context.Context, string) (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(f.archive)), nil
}
func (f fakeSandbox) Mkdir(context.Context, string) error          { return nil }
func (f fakeSandbox) Owner(context.Context) (safetar.Owner, error) { return safetar.Owner{}, nil }

func archive(t *testing.T, entries ...*tar.Header) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(make([]byte, h.Size))
		}
	}
	tw.Close()
	return b.Bytes()
}

// A hostile archive (a name outside its top folder, an oversize file)
// is refused with the library's sentinel, and nothing is left at the
// destination or beside it; a good one lands.
func TestDownloadHostile(t *testing.T) {
	lim := safetar.Limits{MaxBytes: 1 << 20, MaxEntries: 100, MaxDepth: 10}
	for name, tc := range map[string]struct {
		entries []*tar.Header
		want    error
	}{
		"escape":   {[]*tar.Header{{Name: "out/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "out/../../evil", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}}, errdefs.UnsafeArchive},
		"too big":  {[]*tar.Header{{Name: "out", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2 << 20}}, errdefs.LimitExceeded},
		"fine":     {[]*tar.Header{{Name: "out", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3}}, nil},
		"not file": {[]*tar.Header{{Name: "out", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}}, errdefs.UnsafeArchive},
	} {
		dir := t.TempDir()
		final, rep, err := Download(context.Background(), fakeSandbox{archive(t, tc.entries...)}, "/work/out", dir, lim)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
		left, _ := os.ReadDir(dir)
		switch {
		case tc.want == nil && (len(left) != 1 || final != filepath.Join(dir, "out") || rep.Files != 1):
			t.Errorf("%s: landed %v, report %+v", name, left, rep)
		case tc.want != nil && len(left) != 0:
			t.Errorf("%s: left behind %v", name, left)
		}
	}
}
