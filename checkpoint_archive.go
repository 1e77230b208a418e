package sandboxagent

// Checkpoints on engines without commits (Kubernetes): the working
// directory comes out as a hostile archive (the download rules: regular
// files and directories only, within the checkpoint's size), the session
// as the driver's dump, both into a folder of the host's.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sandbox-agent/sandbox-agent/internal/transfer"
	"github.com/sandbox-agent/sandbox-agent/safetar"
)

// The files of an archived checkpoint, in its folder.
const (
	archiveFiles   = "files"           // the working directory
	archiveSession = "session.json"    // the CLI's session (SessionDump)
	archiveMeta    = "checkpoint.json" // the Checkpoint; written last
)

// maxArchiveEntries is the least number of entries an archived working
// directory may hold (max_download_entries when it is larger).
const maxArchiveEntries = 1_000_000

// maxSessionDump bounds a session dump read back from an archive.
const maxSessionDump = 256 << 20

// label is c as the value of the checkpoint label.
func (c Checkpoint) label() string {
	b, _ := json.Marshal(c) // strings, numbers and a time: it cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

// checkpointRoot makes (or checks) the folder of archived checkpoints:
// absolute, a directory of ours that nobody else can read.
func checkpointRoot(root string) (string, error) {
	if !filepath.IsAbs(root) {
		return "", fmt.Errorf("%w: checkpoint_root %q: want an absolute path", ErrInvalidArgument, root)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmt.Errorf("checkpoint_root: %w", err)
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return "", fmt.Errorf("checkpoint_root: %w", err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 || (st != nil && int(st.Uid) != os.Getuid()) {
		return "", fmt.Errorf("%w: checkpoint_root %s: want a directory of this user's with mode 0700, found %v", ErrInvalidArgument, root, fi.Mode())
	}
	return filepath.Clean(root), nil
}

// archived checks that archived checkpoint c is one of ours (under the
// configured root, named by c's id, complete) and returns it as its
// folder recorded it: the caller's value names it, the folder says what
// it is.
func archived(cfg Config, c Checkpoint) (Checkpoint, error) {
	root, err := checkpointRoot(cfg.withDefaults().CheckpointRoot)
	if err != nil {
		return Checkpoint{}, err
	}
	if err := c.Check(root); err != nil {
		return Checkpoint{}, err
	}
	dir := filepath.Join(root, c.ID)
	b, err := os.ReadFile(filepath.Join(dir, archiveMeta))
	var meta Checkpoint
	if err == nil {
		err = json.Unmarshal(b, &meta)
	}
	if err != nil || meta.ID != c.ID || meta.Check(root) != nil {
		return Checkpoint{}, fmt.Errorf("%w: checkpoint %s: its archive is missing or incomplete (%v)", ErrInvalidArgument, c.ID, err)
	}
	return meta, nil
}

// archive writes the checkpoint's folder; on failure nothing remains.
func (a *Agent) archive(ctx context.Context, c *Checkpoint) (err error) {
	root, err := checkpointRoot(a.cfg.CheckpointRoot)
	if err != nil {
		return err
	}
	dir := filepath.Join(root, c.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if c.WorkDir == "" { // the image's: the archive needs its path
		res, err := a.sb.Exec(ctx, []string{"pwd"})
		if err != nil {
			return fmt.Errorf("find the working directory: %w", err)
		}
		if wd := strings.TrimSpace(string(res.Stdout)); res.ExitCode != 0 || !filepath.IsAbs(wd) {
			return fmt.Errorf("find the working directory: pwd printed %q (exit %d)", cut(res.Stdout), res.ExitCode)
		}
		c.WorkDir = strings.TrimSpace(string(res.Stdout))
	}
	lim := a.sb.limits()
	lim.MaxBytes = a.cfg.CheckpointMaxBytes
	lim.MaxEntries = max(lim.MaxEntries, maxArchiveEntries) // a repository with its node_modules
	var rep safetar.Report
	err = a.sb.copying(ctx, func(ctx context.Context, f transfer.Sandbox) (err error) {
		_, rep, err = transfer.Download(ctx, f, c.WorkDir, filepath.Join(dir, archiveFiles), lim)
		return err
	})
	if bytesExceeded(err) {
		return fmt.Errorf("%w: the working directory: %w", ErrCheckpointSize, err)
	}
	if err != nil {
		return fmt.Errorf("the working directory: %w", err)
	}
	c.Size = rep.Bytes
	if c.Session != "" {
		st, ok := a.drv.(SessionStore)
		if !ok {
			return fmt.Errorf("%w: %s cannot dump its session", ErrUnsupported, a.drv.Name())
		}
		d, err := st.DumpSession(ctx, a.sb, c.Session)
		if err != nil {
			return fmt.Errorf("dump the session: %w", err)
		}
		b, err := json.Marshal(d)
		if err != nil {
			return err
		}
		if c.Size += int64(len(b)); c.Size > a.cfg.CheckpointMaxBytes || len(b) > maxSessionDump {
			return fmt.Errorf("%w: %d bytes with the session, limit %d", ErrCheckpointSize, c.Size, a.cfg.CheckpointMaxBytes)
		}
		if err := os.WriteFile(filepath.Join(dir, archiveSession), b, 0o600); err != nil {
			return err
		}
	}
	c.Archive = dir
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, archiveMeta+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, archiveMeta))
}

// restore puts an archived checkpoint's files and session in the agent's
// fresh sandbox.
func (a *Agent) restore(ctx context.Context, c Checkpoint) error {
	dir := c.Archive // archived: checked
	wd := a.sb.workdir
	if wd == "" {
		wd = c.WorkDir
	}
	if _, err := os.Lstat(filepath.Join(dir, archiveFiles)); err == nil {
		if err := a.sb.Upload(ctx, filepath.Join(dir, archiveFiles), wd); err != nil {
			return fmt.Errorf("the working directory: %w", err)
		}
	}
	f, err := os.Open(filepath.Join(dir, archiveSession))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	var d SessionDump
	if err := json.NewDecoder(io.LimitReader(f, maxSessionDump)).Decode(&d); err != nil {
		return fmt.Errorf("the session: %w", err)
	}
	_, err = a.LoadSession(ctx, d)
	return err
}

// cut is at most 200 bytes of b, for an error message.
func cut(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// bytesExceeded says whether err is the archive's byte budget running out
// (the checkpoint's size), not its entries or depth: the reason says
// which, not the hostile entry name.
func bytesExceeded(err error) bool {
	var se *safetar.Error
	return errors.As(err, &se) && errors.Is(se, safetar.ErrLimit) && strings.Contains(se.Reason, "bytes")
}
