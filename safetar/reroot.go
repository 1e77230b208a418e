package safetar

import (
	"archive/tar"
	"io"
	"strings"
)

// Reroot rewrites the tar stream body so that every entry sits under top
// (Extract wants one top-level name): for a client's archive of a
// directory's contents. Link targets are left
// alone: Extract skips symlinks and checks hardlinks itself.
func Reroot(body io.Reader, top string) *io.PipeReader {
	pr, pw := io.Pipe()
	go func() {
		tr := tar.NewReader(body)
		tw := tar.NewWriter(pw)
		// The top directory itself, so that an empty tar makes an empty
		// directory.
		if err := tw.WriteHeader(&tar.Header{Name: top + "/", Typeflag: tar.TypeDir, Mode: 0o755, Format: tar.FormatPAX}); err != nil {
			pw.CloseWithError(err)
			return
		}
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				pw.CloseWithError(tw.Close())
				return
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			name := strings.TrimPrefix(hdr.Name, "./")
			if name == "" || name == "." {
				continue // the archive's own root
			}
			if strings.HasPrefix(name, "/") {
				// Absolute names stay absolute: Extract refuses them.
				hdr.Name = name
			} else {
				hdr.Name = top + "/" + name
			}
			if hdr.Typeflag == tar.TypeLink && !strings.HasPrefix(hdr.Linkname, "/") {
				hdr.Linkname = top + "/" + strings.TrimPrefix(hdr.Linkname, "./")
			}
			hdr.Format = tar.FormatPAX // long names after the prefix
			if err := tw.WriteHeader(hdr); err != nil {
				pw.CloseWithError(err)
				return
			}
			if _, err := io.Copy(tw, tr); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
	}()
	return pr
}
