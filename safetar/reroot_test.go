package safetar

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestReroot: a client's tar is re-rooted under one top name, and the
// extraction that follows still refuses what escapes.
func TestReroot(t *testing.T) {
	type entry struct {
		name, link string
		typ        byte
	}
	mk := func(es ...entry) *bytes.Buffer {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, e := range es {
			hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644}
			if e.typ == tar.TypeReg {
				hdr.Size = 2
			}
			if err := tw.WriteHeader(hdr); err != nil {
				t.Fatal(err)
			}
			if e.typ == tar.TypeReg {
				_, _ = tw.Write([]byte("x\n"))
			}
		}
		_ = tw.Close()
		return &buf
	}
	tests := []struct {
		name    string
		tar     *bytes.Buffer
		files   []string
		wantErr error
	}{
		{"files and dirs", mk(entry{"./", "", tar.TypeDir}, entry{"a.txt", "", tar.TypeReg}, entry{"d/", "", tar.TypeDir}, entry{"d/b.txt", "", tar.TypeReg}), []string{"upload/a.txt", "upload/d/b.txt"}, nil},
		{"a symlink is left out", mk(entry{"a.txt", "", tar.TypeReg}, entry{"l", "/etc/shadow", tar.TypeSymlink}), []string{"upload/a.txt"}, nil},
		{"a hardlink inside", mk(entry{"a.txt", "", tar.TypeReg}, entry{"h", "a.txt", tar.TypeLink}), []string{"upload/a.txt", "upload/h"}, nil},
		{"dot-dot", mk(entry{"../x", "", tar.TypeReg}), nil, ErrUnsafe},
		{"absolute", mk(entry{"/etc/x", "", tar.TypeReg}), nil, ErrUnsafe},
		{"a hardlink outside is left out", mk(entry{"a.txt", "", tar.TypeReg}, entry{"h", "/etc/passwd", tar.TypeLink}), []string{"upload/a.txt"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			body := Reroot(tt.tar, "upload")
			_, err := Extract(context.Background(), body, dir, "upload", Limits{})
			body.Close()
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Extract: %v, want %v", err, tt.wantErr)
			}
			var got []string
			_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					rel, _ := filepath.Rel(dir, p)
					got = append(got, rel)
					if data, err := os.ReadFile(p); err != nil || string(data) != "x\n" {
						t.Errorf("%s: %q %v", rel, data, err)
					}
				}
				return nil
			})
			if fmt.Sprint(got) != fmt.Sprint(tt.files) && (len(got) > 0 || len(tt.files) > 0) {
				t.Errorf("files %v, want %v", got, tt.files)
			}
		})
	}
}
