package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/docker/go-units"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
)

// checkpointUsage is the help of `checkpoint`.
const checkpointUsage = `usage: sandbox-agent checkpoint COMMAND [ARGS...]

commands:
  list [--json]   the checkpoints, newest first: ID, NAME, DRIVER, SIZE, CREATED, PARENT,
                  KIND (image: committed by the engine; archive: a folder under
                  checkpoint_root); --json: a JSON array of them
  inspect ID      one checkpoint, as JSON
  rm [--force] ID...
                  remove checkpoints (an image still in use by an agent is kept; one a server
                  owns only with --force)

Checkpoints are made by 'ask --checkpoint NAME' and the library (Agent.Checkpoint,
Agent.Fork); 'ask --from-checkpoint ID' starts an agent on one; 'gc' removes those
older than checkpoint_retention that no server owns.
`

// Checkpoint kinds, as list prints them.
const (
	kindImage   = "image"
	kindArchive = "archive"
)

// checkpointJSON is a checkpoint as list --json and inspect print it: the
// library's fields (the archive's path included: the host's own user
// reads it) and its kind.
type checkpointJSON struct {
	sandboxagent.Checkpoint
	Kind string `json:"kind"`
}

func checkpointKind(c sandboxagent.Checkpoint) string {
	if c.Image != "" {
		return kindImage
	}
	return kindArchive
}

// checkpointEngine is the engine whose committed images are checkpoints:
// the runtime's, when it can list and remove images (Docker, Podman); nil
// on Kubernetes, whose checkpoints are archives only (no connection is
// made).
func (a *app) checkpointEngine(ctx context.Context) (checkpoint.Engine, error) {
	if a.ckEngine != nil {
		return a.ckEngine, nil
	}
	if a.cli.runtime == "kubernetes" {
		return nil, nil
	}
	rt, err := a.runtime(ctx)
	if err != nil {
		return nil, err
	}
	eng, _ := rt.(checkpoint.Engine)
	return eng, nil
}

// findCheckpoint is the checkpoint with that id, of the engine's images
// or the archives under checkpoint_root.
func (a *app) findCheckpoint(ctx context.Context, id string) (sandboxagent.Checkpoint, error) {
	eng, err := a.checkpointEngine(ctx)
	if err != nil {
		return sandboxagent.Checkpoint{}, err
	}
	c, err := checkpoint.Get(ctx, eng, a.cfg.CheckpointRoot, id)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return c, errNoCheckpoint(id)
	}
	return c, err
}

// checkpoints are the engine (nil on Kubernetes) and every checkpoint of
// its images and of checkpoint_root's archives.
func (a *app) checkpoints(ctx context.Context) (checkpoint.Engine, []sandboxagent.Checkpoint, error) {
	eng, err := a.checkpointEngine(ctx)
	if err != nil {
		return nil, nil, err
	}
	list, err := checkpoint.List(ctx, eng, a.cfg.CheckpointRoot)
	return eng, list, err
}

// errNoCheckpoint: no checkpoint has that id (checkpoint.ErrNotFound).
func errNoCheckpoint(id string) error {
	return fmt.Errorf("%w: %q (see 'sandbox-agent checkpoint list')", checkpoint.ErrNotFound, id)
}

// runCheckpoint lists, inspects and removes checkpoints.
func runCheckpoint(ctx context.Context, a *app, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(a.stderr, checkpointUsage)
		return exitError
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(a.stdout, checkpointUsage)
		return exitOK
	case "list", "ls":
		return checkpointList(ctx, a, args[1:])
	case "inspect":
		return checkpointInspect(ctx, a, args[1:])
	case "rm", "remove":
		return checkpointRemove(ctx, a, args[1:])
	}
	fmt.Fprintf(a.stderr, "sandbox-agent: checkpoint: unknown command %q\n", args[0])
	fmt.Fprint(a.stderr, checkpointUsage)
	return exitError
}

func checkpointFlags(a *app, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("checkpoint "+name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() { fmt.Fprint(a.stderr, checkpointUsage) }
	return fs
}

// parseCheckpointFlags parses a subcommand's flags; code is the exit code
// when done.
func parseCheckpointFlags(fs *flag.FlagSet, args []string) (pos []string, code int, done bool) {
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, exitOK, true
	}
	if err != nil {
		return nil, exitError, true
	}
	return pos, 0, false
}

func checkpointList(ctx context.Context, a *app, args []string) int {
	fs := checkpointFlags(a, "list")
	asJSON := fs.Bool("json", false, "print a JSON array")
	pos, code, done := parseCheckpointFlags(fs, args)
	if done {
		return code
	}
	if len(pos) > 0 {
		return a.fail(fmt.Errorf("%w: checkpoint list takes no arguments", sandboxagent.ErrInvalidArgument))
	}
	_, list, err := a.checkpoints(ctx)
	if err != nil {
		return a.fail(err)
	}
	if *asJSON {
		out := make([]checkpointJSON, 0, len(list))
		for _, c := range list {
			out = append(out, checkpointJSON{c, checkpointKind(c)})
		}
		_ = a.jsonOut().Encode(out)
		return exitOK
	}
	a.printCheckpoints(list)
	return exitOK
}

// printCheckpoints prints the table of list. Every cell may come from a
// checkpoint's label (a name is free text): one line each.
func (a *app) printCheckpoints(list []sandboxagent.Checkpoint) {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tDRIVER\tSIZE\tCREATED\tPARENT\tKIND")
	for _, c := range list {
		name := c.Name
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", line(c.ID), line(name), line(c.Driver),
			units.BytesSize(float64(c.Size)), c.Created.UTC().Format(time.RFC3339), line(c.Parent), checkpointKind(c))
	}
	_ = tw.Flush()
}

func checkpointInspect(ctx context.Context, a *app, args []string) int {
	fs := checkpointFlags(a, "inspect")
	pos, code, done := parseCheckpointFlags(fs, args)
	if done {
		return code
	}
	if len(pos) != 1 {
		return a.fail(fmt.Errorf("%w: usage: sandbox-agent checkpoint inspect ID", sandboxagent.ErrInvalidArgument))
	}
	c, err := a.findCheckpoint(ctx, pos[0])
	if err != nil {
		return a.fail(err)
	}
	enc := a.jsonOut()
	enc.SetIndent("", "  ")
	_ = enc.Encode(checkpointJSON{c, checkpointKind(c)})
	return exitOK
}

// checkpointRemove removes each checkpoint named, going on past a failure
// (as docker rm does): it prints the id of each one removed, the reason
// of each one not, and exits 125 when one was not.
func checkpointRemove(ctx context.Context, a *app, args []string) int {
	fs := checkpointFlags(a, "rm")
	force := fs.Bool("force", false, "also remove checkpoints a server owns (serve's: its store then names a checkpoint that is gone)")
	ids, code, done := parseCheckpointFlags(fs, args)
	if done {
		return code
	}
	if len(ids) == 0 {
		return a.fail(fmt.Errorf("%w: usage: sandbox-agent checkpoint rm ID...", sandboxagent.ErrInvalidArgument))
	}
	eng, list, err := a.checkpoints(ctx)
	if err != nil {
		return a.fail(err)
	}
	byID := make(map[string]sandboxagent.Checkpoint, len(list))
	for _, c := range list {
		byID[c.ID] = c
	}
	code = exitOK
	for _, id := range ids {
		c, ok := byID[id]
		if !ok {
			code = a.fail(errNoCheckpoint(id))
			continue
		}
		if c.Owner != "" && !*force {
			code = a.fail(fmt.Errorf("%w: checkpoint %s belongs to server %s: delete it through its API (DELETE /v1/checkpoints/%s), or use --force", sandboxagent.ErrInvalidArgument, id, line(c.Owner), id))
			continue
		}
		switch err := checkpoint.Remove(ctx, eng, a.cfg.CheckpointRoot, c); {
		case err == nil:
			fmt.Fprintln(a.stdout, line(id))
			delete(byID, id) // named twice: the second is not found
		case errors.Is(err, checkpoint.ErrInUse):
			code = a.fail(fmt.Errorf("checkpoint %s is in use: an agent still runs on it (close the agent first): %w", id, err))
		case errors.Is(err, checkpoint.ErrNotFound):
			code = a.fail(errNoCheckpoint(id))
		default:
			code = a.fail(fmt.Errorf("remove checkpoint %s: %w", id, err))
		}
	}
	return code
}
