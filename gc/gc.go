// Package gc removes the sandboxes sandbox-agent left behind: containers
// whose owner process died, that stopped, or (All) every one of ours, and
// the host-side socket folders of dead owners. It is a client of the
// engine's List and Remove, as the command line's "gc" is of it.
package gc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/boundary"
	"github.com/sandbox-agent/sandbox-agent/internal/labels"
)

// Options selects which leftovers Run removes.
type Options struct {
	// All removes every sandbox of ours, including ones whose owner is
	// still running. Without it Run removes sandboxes that stopped, and
	// running ones whose owner process on this host is gone, unless a
	// server owns them (label sandbox-agent.owner): it may be restarting to adopt them.
	All bool
	// DryRun reports without removing.
	DryRun bool
}

// Result lists what Run removed (or would remove) and why.
type Result struct {
	Removed []Entry
	Kept    []Entry
	// SocketDirs are the host-side socket folders removed (or that would
	// be) because their owner process is gone and no container names
	// them: those of sandboxes that removed themselves.
	SocketDirs []string
}

// Entry is one sandbox container Run looked at.
type Entry struct {
	ID, Name, Reason string
}

// Runtime is what gc needs of an engine.
type Runtime interface {
	List(ctx context.Context, labels map[string]string) ([]sandboxagent.ContainerState, error)
	Remove(ctx context.Context, id string) error
}

// Run removes sandbox containers left behind, found by our label. It
// never touches a container without sandboxagent.LabelManaged=true.
func Run(ctx context.Context, rt Runtime, opts Options) (Result, error) {
	list, err := rt.List(ctx, map[string]string{sandboxagent.LabelManaged: "true"})
	if err != nil {
		return Result{}, fmt.Errorf("gc: %w", err)
	}
	host, _ := os.Hostname()
	var res Result
	var errs []error
	gone := map[string]bool{} // removed (or, dry, would be)
	for _, c := range list {
		if c.Labels[sandboxagent.LabelManaged] != "true" { // never trust the engine's filter alone
			continue
		}
		e := Entry{ID: c.ID, Name: c.Name}
		sameHost := c.Labels[sandboxagent.LabelHost] == host
		switch {
		case opts.All:
			e.Reason = "--all"
		case c.Labels[labels.Owner] != "" && c.Running:
			e.Reason = "owned by server " + c.Labels[labels.Owner]
			res.Kept = append(res.Kept, e)
			continue
		case c.Labels[labels.Owner] != "" && c.Status != sandboxagent.StatusCreated:
			e.Reason = "not running (" + string(c.Status) + ")"
		case sameHost && boundary.ProcessAlive(c.Labels[sandboxagent.LabelPID]):
			e.Reason = "owner process " + c.Labels[sandboxagent.LabelPID] + " is alive"
			res.Kept = append(res.Kept, e)
			continue
		case sameHost:
			e.Reason = "owner process " + c.Labels[sandboxagent.LabelPID] + " is gone"
		case c.Status == sandboxagent.StatusCreated && time.Since(c.Created) < 10*time.Minute:
			// Possibly being started right now by its owner elsewhere.
			e.Reason = "being created on host " + c.Labels[sandboxagent.LabelHost]
			res.Kept = append(res.Kept, e)
			continue
		case !c.Running:
			e.Reason = "not running (" + string(c.Status) + ")"
		default:
			e.Reason = "running, owned by host " + c.Labels[sandboxagent.LabelHost]
			res.Kept = append(res.Kept, e)
			continue
		}
		if !opts.DryRun {
			if err := rt.Remove(ctx, c.ID); err != nil {
				errs = append(errs, err)
				continue
			}
			if sameHost {
				boundary.RemoveSocketDir(c.Labels[labels.Sockets])
			}
		}
		res.Removed = append(res.Removed, e)
		gone[c.ID] = true
	}
	inUse := map[string]bool{}
	for _, c := range list {
		if !gone[c.ID] {
			inUse[c.Labels[labels.Sockets]] = true
		}
	}
	if root, err := boundary.SocketRoot(); err == nil {
		res.SocketDirs = boundary.SweepSocketDirs(root, func(name string) bool { return inUse[name] }, opts.DryRun)
	}
	return res, errors.Join(errs...)
}
