package sandboxagent

import (
	"archive/tar"
	"bytes"
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

	"github.com/sandbox-agent/sandbox-agent/internal/guest"
	"github.com/sandbox-agent/sandbox-agent/safetar"
)

// DownloadReport says what a download wrote and what it skipped.
type DownloadReport struct {
	// Path is where the download landed on the host.
	Path    string
	Files   int
	Dirs    int
	Bytes   int64
	Skipped []safetar.Skipped
	// SkippedOmitted counts skipped entries beyond the listed ones.
	SkippedOmitted int
}

// cleanContainerPath validates an absolute container path.
func cleanContainerPath(p string) (string, error) {
	if p == "" || !path.IsAbs(p) || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: container path must be absolute: %q", ErrInvalidArgument, p)
	}
	p = path.Clean(p)
	if p == "/" {
		return "", fmt.Errorf("%w: container path must not be /", ErrInvalidArgument)
	}
	return p, nil
}

func (s *Sandbox) copyCtx(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if s.isClosed() {
		return nil, nil, ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeouts.Copy)
	return ctx, cancel, nil
}

// copyIn puts a tar whose top entry is base(dst) into dir(dst), creating
// the parent directory when it is missing.
func (s *Sandbox) copyIn(ctx context.Context, dst string, body func() io.Reader) error {
	dir := path.Dir(dst)
	copyTo := func() error {
		r := body()
		err := s.rt.CopyTo(ctx, s.id, dir, r)
		// A runtime that stopped reading early (the folder was missing)
		// must not leave the packer blocked on its pipe.
		if c, ok := r.(io.Closer); ok {
			c.Close()
		}
		return err
	}
	err := copyTo()
	if errors.Is(err, ErrPathNotFound) {
		res, xerr := s.Run(ctx, ExecRequest{Cmd: []string{"mkdir", "-p", "--", dir}})
		if xerr != nil {
			return xerr
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("create %s in sandbox: %s", dir, bytes.TrimSpace(res.Stderr))
		}
		err = copyTo()
	}
	return err
}

// Upload copies a host file or directory to the container path dst (the
// path the copy will have, not its parent). Host symlinks are copied as
// symlinks.
func (s *Sandbox) Upload(ctx context.Context, src, dst string) error {
	dst, err := cleanContainerPath(dst)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(src); err != nil {
		return fmt.Errorf("%w: upload source: %w", ErrInvalidArgument, err)
	}
	ctx, cancel, err := s.copyCtx(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	owner, err := s.fileOwner(ctx)
	if err != nil {
		return err
	}
	// Packing streams through a pipe, so a large tree is never held in
	// memory; a retry after mkdir packs again.
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
	if err := s.copyIn(ctx, dst, body); err != nil {
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
func (s *Sandbox) WriteFile(ctx context.Context, name string, data []byte, mode fs.FileMode) error {
	name, err := cleanContainerPath(name)
	if err != nil {
		return err
	}
	ctx, cancel, err := s.copyCtx(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	owner, err := s.fileOwner(ctx)
	if err != nil {
		return err
	}
	body := func() io.Reader { return safetar.OneFile("", path.Base(name), data, mode, owner) }
	if err := s.copyIn(ctx, name, body); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// fileOwner is the numeric uid and gid of the sandbox's user, looked up
// once: engines extract uploads with the archive's ids, and files must
// belong to the user the CLI runs as so it can rewrite them.
func (s *Sandbox) fileOwner(ctx context.Context) (safetar.Owner, error) {
	s.ownerMu.Lock()
	defer s.ownerMu.Unlock()
	if s.owner != nil {
		return *s.owner, nil
	}
	res, err := s.Run(ctx, ExecRequest{Cmd: []string{"sh", "-c", guest.UserIDs}})
	if err != nil {
		return safetar.Owner{}, fmt.Errorf("look up the sandbox user: %w", err)
	}
	var o safetar.Owner
	if _, err := fmt.Sscan(string(res.Stdout), &o.UID, &o.GID); err != nil || res.ExitCode != 0 {
		return safetar.Owner{}, fmt.Errorf("look up the sandbox user: id printed %q (exit %d)", res.Stdout, res.ExitCode)
	}
	s.owner = &o
	return o, nil
}

// ReadFile returns the contents of one regular container file, at most
// max bytes (zero: the download byte cap).
func (s *Sandbox) ReadFile(ctx context.Context, name string, max int64) ([]byte, error) {
	name, err := cleanContainerPath(name)
	if err != nil {
		return nil, err
	}
	if max <= 0 {
		max = s.cfg.MaxDownloadBytes
	}
	ctx, cancel, err := s.copyCtx(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	rc, err := s.rt.CopyFrom(ctx, s.id, name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w: %w", name, ErrUnsafeArchive, err)
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil, fmt.Errorf("read %s: %w: not a regular file", name, ErrInvalidArgument)
	}
	if hdr.Size > max {
		return nil, fmt.Errorf("read %s: %w: %d bytes, cap %d", name, ErrLimitExceeded, hdr.Size, max)
	}
	data, err := io.ReadAll(io.LimitReader(tr, hdr.Size))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if int64(len(data)) != hdr.Size {
		return nil, fmt.Errorf("read %s: %w: truncated archive", name, ErrUnsafeArchive)
	}
	return data, nil
}

// Download copies a container file or directory to the host. dst is the
// path the copy gets; when dst is an existing directory the copy goes
// inside it under the source's base name. The archive is treated as
// hostile (see package safetar for the policy): it is extracted into a
// fresh staging directory beside the destination and renamed into place,
// so a failed download leaves nothing behind. An existing regular file at
// the destination is replaced; an existing directory is not merged into.
func (s *Sandbox) Download(ctx context.Context, src, dst string) (DownloadReport, error) {
	src, err := cleanContainerPath(src)
	if err != nil {
		return DownloadReport{}, err
	}
	if dst == "" {
		return DownloadReport{}, fmt.Errorf("%w: empty download destination", ErrInvalidArgument)
	}
	final := filepath.Clean(dst)
	if fi, err := os.Stat(final); err == nil && fi.IsDir() {
		final = filepath.Join(final, path.Base(src))
	}
	if fi, err := os.Lstat(final); err == nil && fi.IsDir() {
		return DownloadReport{}, fmt.Errorf("download %s: %w: %s is a directory", src, ErrDestinationExists, final)
	}
	parent := filepath.Dir(final)
	if fi, err := os.Stat(parent); err != nil || !fi.IsDir() {
		return DownloadReport{}, fmt.Errorf("%w: download destination's parent %s is not a directory", ErrInvalidArgument, parent)
	}

	ctx, cancel, err := s.copyCtx(ctx)
	if err != nil {
		return DownloadReport{}, err
	}
	defer cancel()
	rc, err := s.rt.CopyFrom(ctx, s.id, src)
	if err != nil {
		return DownloadReport{}, fmt.Errorf("download %s: %w", src, err)
	}
	defer rc.Close()

	staging, err := os.MkdirTemp(parent, ".sandbox-agent-download-")
	if err != nil {
		return DownloadReport{}, fmt.Errorf("download %s: staging: %w", src, err)
	}
	defer os.RemoveAll(staging)
	top := path.Base(src)
	rep, err := safetar.Extract(ctx, rc, staging, top, safetar.Limits{
		MaxBytes: s.cfg.MaxDownloadBytes, MaxEntries: s.cfg.MaxDownloadEntries, MaxDepth: s.cfg.MaxDownloadDepth,
	})
	report := DownloadReport{Path: final, Files: rep.Files, Dirs: rep.Dirs, Bytes: rep.Bytes, Skipped: rep.Skipped, SkippedOmitted: rep.SkippedOmitted}
	if err != nil {
		return report, fmt.Errorf("download %s: %w", src, archiveErr(err))
	}
	if _, err := os.Lstat(filepath.Join(staging, top)); err != nil {
		return report, fmt.Errorf("download %s: %w: nothing to copy (the source is a symlink or special file; skipped)", src, ErrUnsafeArchive)
	}
	if err := os.Rename(filepath.Join(staging, top), final); err != nil {
		return report, fmt.Errorf("download %s: publish: %w", src, err)
	}
	return report, nil
}

// archiveErr adds our sentinels to safetar's rejections.
func archiveErr(err error) error {
	switch {
	case errors.Is(err, safetar.ErrLimit):
		return fmt.Errorf("%w: %w", ErrLimitExceeded, err)
	case errors.Is(err, safetar.ErrUnsafe), errors.Is(err, safetar.ErrTruncated):
		return fmt.Errorf("%w: %w", ErrUnsafeArchive, err)
	}
	return err
}

// uploadTop is the one top-level name an UploadTar archive is re-rooted
// under while it is checked.
const uploadTop = "upload"

// UploadTar extracts the tar stream r at the container directory dst
// (created when missing). The archive is checked on the host first, by
// the download rules (package safetar: only regular files and
// directories, no name outside dst, within the download limits), into a
// staging directory that is then uploaded: a rejected archive
// (ErrUnsafeArchive, ErrLimitExceeded) leaves nothing in the sandbox. The
// report lists the entries left out (links, devices, ...).
func (s *Sandbox) UploadTar(ctx context.Context, dst string, r io.Reader) (safetar.Report, error) {
	dst, err := cleanContainerPath(dst)
	if err != nil {
		return safetar.Report{}, err
	}
	staging, err := os.MkdirTemp("", "sandbox-agent-upload-")
	if err != nil {
		return safetar.Report{}, err
	}
	defer os.RemoveAll(staging)
	body := safetar.Reroot(r, uploadTop)
	rep, err := safetar.Extract(ctx, body, staging, uploadTop, safetar.Limits{
		MaxBytes: s.cfg.MaxDownloadBytes, MaxEntries: s.cfg.MaxDownloadEntries, MaxDepth: s.cfg.MaxDownloadDepth,
	})
	body.Close() // a rejected stream must not leave its rewriter blocked
	if err != nil {
		return rep, fmt.Errorf("upload tar to %s: %w", dst, archiveErr(err))
	}
	return rep, s.Upload(ctx, filepath.Join(staging, uploadTop), dst)
}

// DownloadTar copies the container file or directory src out as a tar
// stream whose one top-level entry is its base name. The container's
// archive is hostile: it is first extracted on the host under the
// download rules (as Download does, into a staging directory), and only
// what passed is packed again, so no symlink, device or outside path
// planted in the sandbox reaches the reader. The report (skipped entries)
// is complete when DownloadTar returns, before anything is read; the
// reader packs the checked tree as it is read and removes it on Close.
// A packing failure is the reader's error: the stream is then cut, not
// short and well-formed.
func (s *Sandbox) DownloadTar(ctx context.Context, src string) (io.ReadCloser, DownloadReport, error) {
	src, err := cleanContainerPath(src)
	if err != nil {
		return nil, DownloadReport{}, err
	}
	staging, err := os.MkdirTemp("", "sandbox-agent-download-")
	if err != nil {
		return nil, DownloadReport{}, err
	}
	rep, err := s.Download(ctx, src, staging)
	if err != nil {
		os.RemoveAll(staging)
		return nil, rep, err
	}
	// The staged tree holds only regular files and directories.
	return safetar.PackStaged(ctx, rep.Path, path.Base(src), staging), rep, nil
}
