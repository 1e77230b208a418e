// Package transfer copies files between the host and a sandbox. What
// comes out of a sandbox is a hostile archive: it is extracted under
// package safetar's rules into a staging folder and only then moved into
// place (or packed again), so a rejected archive leaves nothing behind.
// Uploads are packed with the sandbox user's ids, streamed, never held
// in memory.
package transfer

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sandbox-agent/sandbox-agent/internal/errdefs"
	"github.com/sandbox-agent/sandbox-agent/safetar"
)

// Sandbox is the container side of a copy.
type Sandbox interface {
	// CopyTo extracts the tar stream into the container folder dir
	// (errdefs.PathNotFound when dir is missing).
	CopyTo(ctx context.Context, dir string, tar io.Reader) error
	// CopyFrom streams path out as a tar whose top entry is its base name.
	CopyFrom(ctx context.Context, path string) (io.ReadCloser, error)
	// Mkdir creates the folder dir and its parents.
	Mkdir(ctx context.Context, dir string) error
	// Owner is the numeric ids uploads get: the sandbox user's.
	Owner(ctx context.Context) (safetar.Owner, error)
}

// cleanPath validates an absolute container path.
func cleanPath(p string) (string, error) {
	if p == "" || !path.IsAbs(p) || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: container path must be absolute: %q", errdefs.InvalidArgument, p)
	}
	p = path.Clean(p)
	if p == "/" {
		return "", fmt.Errorf("%w: container path must not be /", errdefs.InvalidArgument)
	}
	return p, nil
}

// copyIn puts a tar whose top entry is base(dst) into dir(dst), creating
// the parent folder when it is missing.
func copyIn(ctx context.Context, sb Sandbox, dst string, body func() io.Reader) error {
	dir := path.Dir(dst)
	copyTo := func() error {
		r := body()
		err := sb.CopyTo(ctx, dir, r)
		// A runtime that stopped reading early (the folder was missing)
		// must not leave the packer blocked on its pipe.
		if c, ok := r.(io.Closer); ok {
			c.Close()
		}
		return err
	}
	err := copyTo()
	if errors.Is(err, errdefs.PathNotFound) {
		if err := sb.Mkdir(ctx, dir); err != nil {
			return err
		}
		err = copyTo()
	}
	return err
}

// Upload copies a host file or folder to the container path dst (the
// path the copy will have, not its parent). Host symlinks are copied as
// symlinks.
func Upload(ctx context.Context, sb Sandbox, src, dst string) error {
	dst, err := cleanPath(dst)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(src); err != nil {
		return fmt.Errorf("%w: upload source: %w", errdefs.InvalidArgument, err)
	}
	owner, err := sb.Owner(ctx)
	if err != nil {
		return err
	}
	// Packing streams through a pipe; a retry after mkdir packs again.
	var mu sync.Mutex
	var packErr error
	body := func() io.Reader {
		pr, pw := io.Pipe()
		go func() {
			err := safetar.Pack(ctx, pw, src, path.Base(dst), owner)
			if err != nil && !errors.Is(err, io.ErrClosedPipe) { // closed: the runtime stopped reading
				mu.Lock()
				packErr = err
				mu.Unlock()
			}
			pw.CloseWithError(err)
		}()
		return pr
	}
	if err := copyIn(ctx, sb, dst, body); err != nil {
		mu.Lock()
		defer mu.Unlock()
		if packErr != nil {
			err = packErr
		}
		return fmt.Errorf("upload %s to %s: %w", src, dst, err)
	}
	return nil
}

// WriteFile writes data to a container file (parents created as needed).
func WriteFile(ctx context.Context, sb Sandbox, name string, data []byte, mode fs.FileMode) error {
	name, err := cleanPath(name)
	if err != nil {
		return err
	}
	owner, err := sb.Owner(ctx)
	if err != nil {
		return err
	}
	body := func() io.Reader { return safetar.OneFile("", path.Base(name), data, mode, owner) }
	if err := copyIn(ctx, sb, name, body); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// ReadFile returns the contents of one regular container file, at most
// max bytes.
func ReadFile(ctx context.Context, sb Sandbox, name string, max int64) ([]byte, error) {
	name, err := cleanPath(name)
	if err != nil {
		return nil, err
	}
	rc, err := sb.CopyFrom(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w: %w", name, errdefs.UnsafeArchive, err)
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil, fmt.Errorf("read %s: %w: not a regular file", name, errdefs.InvalidArgument)
	}
	if hdr.Size > max {
		return nil, fmt.Errorf("read %s: %w: %d bytes, cap %d", name, errdefs.LimitExceeded, hdr.Size, max)
	}
	data, err := io.ReadAll(io.LimitReader(tr, hdr.Size))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if int64(len(data)) != hdr.Size {
		return nil, fmt.Errorf("read %s: %w: truncated archive", name, errdefs.UnsafeArchive)
	}
	return data, nil
}

// Download copies a container file or folder to the host path dst (into
// it, under the source's base name, when dst is a folder), through a
// fresh staging folder beside the destination that is renamed into
// place: a failed download leaves nothing behind. An existing regular
// file at the destination is replaced; a folder is not merged into.
// final is where the copy lands (known once the destination is checked).
func Download(ctx context.Context, sb Sandbox, src, dst string, lim safetar.Limits) (final string, _ safetar.Report, _ error) {
	src, err := cleanPath(src)
	if err != nil {
		return "", safetar.Report{}, err
	}
	if dst == "" {
		return "", safetar.Report{}, fmt.Errorf("%w: empty download destination", errdefs.InvalidArgument)
	}
	final = filepath.Clean(dst)
	if fi, err := os.Stat(final); err == nil && fi.IsDir() {
		final = filepath.Join(final, path.Base(src))
	}
	if fi, err := os.Lstat(final); err == nil && fi.IsDir() {
		return "", safetar.Report{}, fmt.Errorf("download %s: %w: %s is a directory", src, errdefs.DestinationExists, final)
	}
	parent := filepath.Dir(final)
	if fi, err := os.Stat(parent); err != nil || !fi.IsDir() {
		return "", safetar.Report{}, fmt.Errorf("%w: download destination's parent %s is not a directory", errdefs.InvalidArgument, parent)
	}
	rc, err := sb.CopyFrom(ctx, src)
	if err != nil {
		return "", safetar.Report{}, fmt.Errorf("download %s: %w", src, err)
	}
	defer rc.Close()

	staging, err := os.MkdirTemp(parent, ".sandbox-agent-download-")
	if err != nil {
		return "", safetar.Report{}, fmt.Errorf("download %s: staging: %w", src, err)
	}
	defer os.RemoveAll(staging)
	top := path.Base(src)
	rep, err := safetar.Extract(ctx, rc, staging, top, lim)
	if err != nil {
		return final, rep, fmt.Errorf("download %s: %w", src, archiveErr(err))
	}
	if _, err := os.Lstat(filepath.Join(staging, top)); err != nil {
		return final, rep, fmt.Errorf("download %s: %w: nothing to copy (the source is a symlink or special file; skipped)", src, errdefs.UnsafeArchive)
	}
	if err := os.Rename(filepath.Join(staging, top), final); err != nil {
		return final, rep, fmt.Errorf("download %s: publish: %w", src, err)
	}
	return final, rep, nil
}

// archiveErr adds the library's sentinels to safetar's rejections.
func archiveErr(err error) error {
	switch {
	case errors.Is(err, safetar.ErrLimit):
		return fmt.Errorf("%w: %w", errdefs.LimitExceeded, err)
	case errors.Is(err, safetar.ErrUnsafe), errors.Is(err, safetar.ErrTruncated):
		return fmt.Errorf("%w: %w", errdefs.UnsafeArchive, err)
	}
	return err
}

// StageTar checks the container path dst, then the tar stream r by the
// download rules (only regular files and folders, no name outside its
// top, within lim) by extracting it into a fresh temporary folder: top is
// the checked tree, dir the folder to remove. A rejected archive leaves
// nothing.
func StageTar(ctx context.Context, dst string, r io.Reader, lim safetar.Limits) (top, dir string, _ safetar.Report, _ error) {
	if _, err := cleanPath(dst); err != nil {
		return "", "", safetar.Report{}, err
	}
	dir, err := os.MkdirTemp("", "sandbox-agent-upload-")
	if err != nil {
		return "", "", safetar.Report{}, err
	}
	const name = "upload" // the one top-level name the archive is re-rooted under
	body := safetar.Reroot(r, name)
	rep, err := safetar.Extract(ctx, body, dir, name, lim)
	body.Close() // a rejected stream must not leave its rewriter blocked
	if err != nil {
		os.RemoveAll(dir)
		return "", "", rep, fmt.Errorf("upload tar to %s: %w", dst, archiveErr(err))
	}
	return filepath.Join(dir, name), dir, rep, nil
}
