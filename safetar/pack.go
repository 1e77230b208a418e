package safetar

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Pack writes an uncompressed tar of the host path src (a file or directory,
// walked with Lstat) to w. Its top entry is named name; everything else sits
// under name/. Host symlinks are stored as symlinks, never followed; sockets,
// devices and FIFOs are left out. See the package documentation for the
// metadata recorded. Pack checks ctx between entries and while copying file
// contents. Every entry is recorded as owned by owner (the engine extracts
// uploads with the archive's numeric ids).
func Pack(ctx context.Context, w io.Writer, src, name string, owner Owner) error {
	if err := checkTop(name); err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	fi, err := os.Lstat(src)
	if err != nil {
		return fmt.Errorf("safetar: pack: %w", err)
	}
	if fi.IsDir() {
		err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			rel, err := filepath.Rel(src, p)
			if err != nil {
				return err
			}
			entry := name
			if rel != "." {
				entry = name + "/" + filepath.ToSlash(rel)
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			return packOne(ctx, tw, p, entry, info, owner)
		})
	} else {
		err = packOne(ctx, tw, src, name, fi, owner)
	}
	if err != nil {
		return fmt.Errorf("safetar: pack: %w", err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("safetar: pack: %w", err)
	}
	return nil
}

// Owner is the numeric owner Pack records for every entry.
type Owner struct{ UID, GID int }

func packOne(ctx context.Context, tw *tar.Writer, p, entry string, fi fs.FileInfo, owner Owner) error {
	hdr := &tar.Header{
		Name:    entry,
		Uid:     owner.UID,
		Gid:     owner.GID,
		Mode:    int64(fi.Mode().Perm()),
		ModTime: fi.ModTime().Truncate(time.Second),
	}
	switch mode := fi.Mode(); {
	case mode.IsRegular():
		return packFile(ctx, tw, p, hdr, fi)
	case mode.IsDir():
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
	case mode&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = target
		hdr.Mode = 0o777
	default:
		return nil // socket, device, fifo: left out
	}
	return tw.WriteHeader(hdr)
}

func packFile(ctx context.Context, tw *tar.Writer, p string, hdr *tar.Header, fi fs.FileInfo) error {
	f, err := os.OpenFile(p, os.O_RDONLY|oNoFollow, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() || !os.SameFile(st, fi) {
		return fmt.Errorf("%s: changed while packing", p)
	}
	hdr.Typeflag = tar.TypeReg
	hdr.Size = st.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.Copy(tw, ctxReader{ctx, f})
	if err == nil && n != hdr.Size {
		err = fmt.Errorf("%s: changed size while packing", p)
	}
	if errors.Is(err, tar.ErrWriteTooLong) {
		err = fmt.Errorf("%s: grew while packing", p)
	}
	return err
}

// ctxReader fails reads once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// OneFile is an in-memory tar holding dir/ (when dir is not empty) and
// dir/name, owned by owner.
func OneFile(dir, name string, data []byte, mode fs.FileMode, owner Owner) io.Reader {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	if dir != "" {
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: now, Uid: owner.UID, Gid: owner.GID})
		name = dir + "/" + name
	}
	if mode == 0 {
		mode = 0o644
	}
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(mode.Perm()), Size: int64(len(data)), ModTime: now, Uid: owner.UID, Gid: owner.GID})
	_, _ = tw.Write(data)
	_ = tw.Close()
	return &buf
}

// PackStaged streams a tar of src (its top entry named name, owned by
// root) as it is read; Close stops the packer and removes staging, the
// directory src was staged in. A packing failure is the reader's error:
// the stream is then cut, not short and well-formed.
func PackStaged(ctx context.Context, src, name, staging string) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(Pack(ctx, pw, src, name, Owner{})) }()
	return &staged{PipeReader: pr, dir: staging}
}

type staged struct {
	*io.PipeReader
	dir  string
	once sync.Once
}

func (t *staged) Close() error {
	t.once.Do(func() {
		t.PipeReader.CloseWithError(io.ErrClosedPipe)
		os.RemoveAll(t.dir)
	})
	return nil
}
