package gc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
)

// CheckpointOptions selects the checkpoints Checkpoints removes.
type CheckpointOptions struct {
	// Retention: a checkpoint older than this is removed, unless a server
	// owns it (Checkpoint.Owner: the server prunes its own) or an agent
	// still runs on it. Zero or less: none is old enough.
	Retention time.Duration
	// DryRun reports without removing. It cannot tell a checkpoint in
	// use (the engine says so only when asked to remove it): those are
	// reported as would-be removed.
	DryRun bool
}

// CheckpointResult lists what Checkpoints removed (or would remove) and
// the checkpoints past their retention it kept, with the reasons.
type CheckpointResult struct {
	Removed []CheckpointEntry
	Kept    []CheckpointEntry
	// Leftovers are the folders under the checkpoint root of archives
	// never completed (their process died while it made them), removed
	// (or that would be) an hour after.
	Leftovers []string
}

// CheckpointEntry is one checkpoint Checkpoints looked at.
type CheckpointEntry struct {
	Checkpoint sandboxagent.Checkpoint
	Reason     string
}

// leftoverAge is how old an unfinished archive folder must be before
// checkpoint.Prune removes it (the same hour): what a dry run reports.
const leftoverAge = time.Hour

// Checkpoints removes the checkpoints past opts.Retention that no server
// owns and no agent runs on: eng's committed images (nil: none, as on
// Kubernetes) and the archives under root ("": none), and the archive
// folders left half-made. It goes on past a failure and returns them all.
func Checkpoints(ctx context.Context, eng checkpoint.Engine, root string, opts CheckpointOptions) (CheckpointResult, error) {
	var res CheckpointResult
	now := time.Now()
	list, err := checkpoint.List(ctx, eng, root)
	if err != nil {
		return res, fmt.Errorf("gc checkpoints: %w", err)
	}
	var errs []error
	for _, c := range list {
		if opts.Retention <= 0 || now.Sub(c.Created) <= opts.Retention {
			continue
		}
		if c.Owner != "" {
			res.Kept = append(res.Kept, CheckpointEntry{c, "owned by server " + c.Owner})
			continue
		}
		e := CheckpointEntry{c, "older than " + opts.Retention.String()}
		if opts.DryRun {
			res.Removed = append(res.Removed, e)
			continue
		}
		switch err := checkpoint.Remove(ctx, eng, root, c); {
		case err == nil:
			res.Removed = append(res.Removed, e)
		case errors.Is(err, checkpoint.ErrInUse):
			res.Kept = append(res.Kept, CheckpointEntry{c, "in use: an agent still runs on it"})
		case errors.Is(err, checkpoint.ErrNotFound): // removed meanwhile
		default:
			errs = append(errs, fmt.Errorf("remove checkpoint %s: %w", c.ID, err))
		}
	}
	if root == "" {
		return res, errors.Join(errs...)
	}
	stale := staleLeftovers(root, now)
	if opts.DryRun {
		res.Leftovers = stale
		return res, errors.Join(errs...)
	}
	// Prune keeping every checkpoint removes the leftovers alone, by the
	// library's own rule; those gone afterwards are reported.
	if _, err := checkpoint.Prune(ctx, eng, root, func(sandboxagent.Checkpoint) bool { return true }); err != nil {
		errs = append(errs, fmt.Errorf("gc checkpoint leftovers: %w", err))
	}
	for _, dir := range stale {
		if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
			res.Leftovers = append(res.Leftovers, dir)
		}
	}
	return res, errors.Join(errs...)
}

// staleLeftovers are the folders under root named as a checkpoint, without
// their checkpoint.json, older than leftoverAge.
func staleLeftovers(root string, now time.Time) []string {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() || !checkpointID(e.Name()) {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if _, err := os.Lstat(filepath.Join(dir, "checkpoint.json")); !errors.Is(err, os.ErrNotExist) {
			continue
		}
		if fi, err := os.Lstat(dir); err == nil && now.Sub(fi.ModTime()) > leftoverAge {
			out = append(out, dir)
		}
	}
	return out
}

// checkpointID: "ck-" and hex digits, as the library names checkpoints.
func checkpointID(name string) bool {
	hex, ok := strings.CutPrefix(name, "ck-")
	if !ok || hex == "" || len(name) > 64 {
		return false
	}
	return strings.Trim(hex, "0123456789abcdef") == ""
}
