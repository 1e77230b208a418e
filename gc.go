package sandboxagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sandbox-agent/sandbox-agent/internal/boundary"
)

// GCOptions selects which leftovers GC removes.
type GCOptions struct {
	// All removes every sandbox of ours, including ones whose owner is
	// still running. Without it GC removes sandboxes that stopped, and
	// running ones whose owner process on this host is gone, unless a
	// server owns them (label sandbox-agent.owner): it may be restarting to adopt them.
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
		case c.Labels[labelOwner] != "" && c.Running:
			e.Reason = "owned by server " + c.Labels[labelOwner]
			res.Kept = append(res.Kept, e)
			continue
		case c.Labels[labelOwner] != "" && c.Status != StatusCreated:
			e.Reason = "not running (" + string(c.Status) + ")"
		case sameHost && boundary.ProcessAlive(c.Labels[LabelPID]):
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
				boundary.RemoveSocketDir(c.Labels[labelSockets])
			}
		}
		res.Removed = append(res.Removed, e)
		gone[c.ID] = true
	}
	inUse := map[string]bool{}
	for _, c := range list {
		if !gone[c.ID] {
			inUse[c.Labels[labelSockets]] = true
		}
	}
	if root, err := boundary.SocketRoot(); err == nil {
		res.SocketDirs = boundary.SweepSocketDirs(root, func(name string) bool { return inUse[name] }, opts.DryRun)
	}
	return res, errors.Join(errs...)
}

// sweepLeftoverSockets removes, once per process and in the background,
// the socket folders of owners that died and whose sandboxes removed
// themselves (gc does the same). A folder whose container rt cannot rule
// out is kept.
func sweepLeftoverSockets(rt Runtime) {
	boundary.SweepOnce(func(ctx context.Context, name string) bool {
		list, err := rt.List(ctx, map[string]string{LabelManaged: "true", labelSockets: name})
		return err != nil || len(list) > 0
	})
}
