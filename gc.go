package sandboxagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// GCOptions selects which leftovers GC removes.
type GCOptions struct {
	// All removes every sandbox of ours, including ones whose owner is
	// still running. Without it GC removes sandboxes that stopped, and
	// running ones whose owner process on this host is gone.
	All bool
	// DryRun reports without removing.
	DryRun bool
}

// GCResult lists what GC removed (or would remove) and why.
type GCResult struct {
	Removed []GCEntry
	Kept    []GCEntry
	// SocketDirs are the host-side socket folders removed (or that would
	// be) because their owner process is gone and no container names
	// them: those of sandboxes that removed themselves.
	SocketDirs []string
}

// GCEntry is one sandbox container GC looked at.
type GCEntry struct {
	ID, Name, Reason string
}

// GC removes sandbox containers left behind, found by our label. It never
// touches a container without LabelManaged=true.
func GC(ctx context.Context, rt Runtime, opts GCOptions) (GCResult, error) {
	list, err := rt.List(ctx, map[string]string{LabelManaged: "true"})
	if err != nil {
		return GCResult{}, fmt.Errorf("gc: %w", err)
	}
	host, _ := os.Hostname()
	var res GCResult
	var errs []error
	gone := map[string]bool{} // removed (or, dry, would be)
	for _, c := range list {
		if c.Labels[LabelManaged] != "true" { // never trust the engine's filter alone
			continue
		}
		e := GCEntry{ID: c.ID, Name: c.Name}
		sameHost := c.Labels[LabelHost] == host
		switch {
		case opts.All:
			e.Reason = "--all"
		case sameHost && processAlive(c.Labels[LabelPID]):
			e.Reason = "owner process " + c.Labels[LabelPID] + " is alive"
			res.Kept = append(res.Kept, e)
			continue
		case sameHost:
			e.Reason = "owner process " + c.Labels[LabelPID] + " is gone"
		case c.Status == StatusCreated && time.Since(c.Created) < 10*time.Minute:
			// Possibly being started right now by its owner elsewhere.
			e.Reason = "being created on host " + c.Labels[LabelHost]
			res.Kept = append(res.Kept, e)
			continue
		case !c.Running:
			e.Reason = "not running (" + string(c.Status) + ")"
		default:
			e.Reason = "running, owned by host " + c.Labels[LabelHost]
			res.Kept = append(res.Kept, e)
			continue
		}
		if !opts.DryRun {
			if err := rt.Remove(ctx, c.ID); err != nil {
				errs = append(errs, err)
				continue
			}
			if sameHost {
				removeSocketDir(c.Labels[LabelSockets])
			}
		}
		res.Removed = append(res.Removed, e)
		gone[c.ID] = true
	}
	inUse := map[string]bool{}
	for _, c := range list {
		if !gone[c.ID] {
			inUse[c.Labels[LabelSockets]] = true
		}
	}
	if root, err := socketRoot(); err == nil {
		res.SocketDirs = sweepSocketDirs(root, func(name string) bool { return inUse[name] }, opts.DryRun)
	}
	return res, errors.Join(errs...)
}

// processAlive reports whether pid names a live process on this host.
func processAlive(pid string) bool {
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return false
	}
	err = syscall.Kill(n, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// socketDirName is the shape of a socket folder: s-<PID>-<random> (the
// PID of its owner), or s-<random> as made before the PID was in it.
var (
	socketDirName  = regexp.MustCompile(`^s-[0-9]+(-[0-9]+)?$`)
	socketDirOwner = regexp.MustCompile(`^s-([0-9]+)-[0-9]+$`)
)

// removeSocketDir removes the socket folder a dead owner left behind. The
// label names only the folder's base name, and only one of the shape
// openHostSide makes is removed from this user's socket root.
func removeSocketDir(name string) {
	if !socketDirName.MatchString(name) {
		return
	}
	root, err := socketRoot()
	if err != nil {
		return
	}
	_ = os.RemoveAll(filepath.Join(root, name))
}

// sweepSocketDirs removes the socket folders under root that no process
// serves any more and that no container names (inUse, asked last: it may
// cost an engine call), and returns them. dryRun only lists them.
func sweepSocketDirs(root string, inUse func(name string) bool, dryRun bool) []string {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		name := e.Name()
		dir := filepath.Join(root, name)
		if !e.IsDir() || !socketDirName.MatchString(name) || !socketDirStale(dir, name) || inUse(name) {
			continue
		}
		if !dryRun && os.RemoveAll(dir) != nil {
			continue
		}
		out = append(out, dir)
	}
	return out
}

// socketDirStale reports whether a socket folder's owner is gone: the
// PID in its name names no process (a folder of the old shape, without
// it, must be a day old) and none of its sockets accepts a connection.
// The sockets are asked too because a PID only means something in our
// pid namespace: a live owner in another one sharing this folder (two
// containers with one /tmp) still listens.
func socketDirStale(dir, name string) bool {
	if m := socketDirOwner.FindStringSubmatch(name); m != nil {
		if processAlive(m[1]) {
			return false
		}
	} else if fi, err := os.Stat(dir); err != nil || time.Since(fi.ModTime()) < 24*time.Hour {
		return false
	}
	socks, err := filepath.Glob(filepath.Join(dir, "*.sock"))
	if err != nil {
		return false
	}
	for _, p := range socks {
		c, err := net.DialTimeout("unix", p, time.Second)
		if err == nil {
			c.Close()
			return false
		}
		// Only a certain "nobody listens" proves it; a full backlog or a
		// timeout is somebody.
		if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT) {
			return false
		}
	}
	return true
}

var sweepOnce sync.Once

// sweepLeftoverSockets removes, once per process and in the background,
// the socket folders of owners that died and whose sandboxes removed
// themselves (gc does the same). A folder whose container rt cannot rule
// out is kept.
func sweepLeftoverSockets(rt Runtime) {
	sweepOnce.Do(func() {
		go func() {
			root, err := socketRoot()
			if err != nil {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sweepSocketDirs(root, func(name string) bool {
				list, err := rt.List(ctx, map[string]string{LabelManaged: "true", LabelSockets: name})
				return err != nil || len(list) > 0
			}, false)
		}()
	})
}
