package sandboxagent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sandbox-agent/sandbox-agent/internal/guest"
	"github.com/sandbox-agent/sandbox-agent/internal/transfer"
	"github.com/sandbox-agent/sandbox-agent/safetar"
	"github.com/sandbox-agent/sandbox-agent/telemetry"
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

// copying runs a copy under the copy timeout (Config.Timeouts.Copy).
func (s *Sandbox) copying(ctx context.Context, copy func(context.Context, transfer.Sandbox) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeouts.Copy)
	defer cancel()
	return copy(ctx, files{s})
}

// files is the sandbox as package transfer sees it. Its methods fail with
// ErrClosed once the sandbox is closed: a copy checks its arguments
// first, then touches the sandbox.
type files struct{ s *Sandbox }

func (f files) CopyTo(ctx context.Context, dir string, r io.Reader) error {
	if f.s.isClosed() {
		return ErrClosed
	}
	f.s.writes.Add(1)
	return f.s.rt.CopyTo(ctx, f.s.id, dir, r)
}

func (f files) CopyFrom(ctx context.Context, path string) (io.ReadCloser, error) {
	if f.s.isClosed() {
		return nil, ErrClosed
	}
	return f.s.rt.CopyFrom(ctx, f.s.id, path)
}

func (f files) Mkdir(ctx context.Context, dir string) error {
	res, err := f.s.Run(ctx, ExecRequest{Cmd: []string{"mkdir", "-p", "--", dir}})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("create %s in sandbox: %s", dir, bytes.TrimSpace(res.Stderr))
	}
	return err
}

// Owner is the numeric uid and gid of the sandbox's user, looked up
// once: engines extract uploads with the archive's ids, and files must
// belong to the user the CLI runs as so it can rewrite them.
func (f files) Owner(ctx context.Context) (safetar.Owner, error) {
	s := f.s
	if s.isClosed() {
		return safetar.Owner{}, ErrClosed
	}
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

func (s *Sandbox) limits() safetar.Limits {
	return safetar.Limits{MaxBytes: s.cfg.MaxDownloadBytes, MaxEntries: s.cfg.MaxDownloadEntries, MaxDepth: s.cfg.MaxDownloadDepth}
}

// Upload copies a host file or directory to the container path dst (the
// path the copy will have, not its parent). Host symlinks are copied as
// symlinks. A large tree streams; it is never held in memory.
func (s *Sandbox) Upload(ctx context.Context, src, dst string) error {
	return s.copying(ctx, func(ctx context.Context, f transfer.Sandbox) error { return transfer.Upload(ctx, f, src, dst) })
}

// WriteFile writes data to a container file (parents created as needed).
func (s *Sandbox) WriteFile(ctx context.Context, name string, data []byte, mode fs.FileMode) error {
	return s.copying(ctx, func(ctx context.Context, f transfer.Sandbox) error {
		return transfer.WriteFile(ctx, f, name, data, mode)
	})
}

// ReadFile returns the contents of one regular container file, at most
// max bytes (zero: the download byte cap).
func (s *Sandbox) ReadFile(ctx context.Context, name string, max int64) (data []byte, err error) {
	if max <= 0 {
		max = s.cfg.MaxDownloadBytes
	}
	err = s.copying(ctx, func(ctx context.Context, f transfer.Sandbox) error {
		data, err = transfer.ReadFile(ctx, f, name, max)
		return err
	})
	return data, err
}

// Download copies a container file or directory to the host. dst is the
// path the copy gets; when dst is an existing directory the copy goes
// inside it under the source's base name. The archive is treated as
// hostile (see package safetar for the policy): it is extracted into a
// fresh staging directory beside the destination and renamed into place,
// so a failed download leaves nothing behind. An existing regular file at
// the destination is replaced; an existing directory is not merged into.
func (s *Sandbox) Download(ctx context.Context, src, dst string) (rep DownloadReport, err error) {
	ctx, hookDone := s.hooks.StartDownload(ctx)
	defer func() { hookDone(telemetry.DownloadDone{Files: rep.Files, Bytes: rep.Bytes, Err: err}) }()
	err = s.copying(ctx, func(ctx context.Context, f transfer.Sandbox) error {
		final, r, err := transfer.Download(ctx, f, src, dst, s.limits())
		rep = DownloadReport{Path: final, Files: r.Files, Dirs: r.Dirs, Bytes: r.Bytes, Skipped: r.Skipped, SkippedOmitted: r.SkippedOmitted}
		return err
	})
	return rep, err
}

// UploadTar extracts the tar stream r at the container directory dst
// (created when missing). The archive is checked on the host first, by
// the download rules (package safetar: only regular files and
// directories, no name outside dst, within the download limits), into a
// staging directory that is then uploaded: a rejected archive
// (ErrUnsafeArchive, ErrLimitExceeded) leaves nothing in the sandbox. The
// report lists the entries left out (links, devices, ...).
func (s *Sandbox) UploadTar(ctx context.Context, dst string, r io.Reader) (safetar.Report, error) {
	// The caller's stream is read under the caller's ctx alone; the
	// upload of what passed gets the copy timeout.
	top, dir, rep, err := transfer.StageTar(ctx, dst, r, s.limits())
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(dir)
	return rep, s.Upload(ctx, top, dst)
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
	return safetar.PackStaged(ctx, rep.Path, filepath.Base(rep.Path), staging), rep, nil
}
