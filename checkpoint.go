package sandboxagent

// Checkpoints: the whole sandbox (its files and the CLI's session) kept,
// to start new agents on it (StartFrom) or to fork one agent into several
// (Fork). Docker and Podman commit the container; an engine without
// commits (Kubernetes) gets the working directory and the session as a
// folder on the host (checkpoint_archive.go).

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/sandbox-agent/sandbox-agent/internal/labels"
	"github.com/sandbox-agent/sandbox-agent/internal/lazyre"
	"github.com/sandbox-agent/sandbox-agent/metering"
)

// Checkpoint is a kept sandbox: what Agent.Checkpoint made and StartFrom
// starts. Only its files and the CLI's session are carried; running
// processes are not (the CLI restarts on its session), nor the model
// proxy's token, the environment or the hardening: StartFrom's caller
// decides those.
type Checkpoint struct {
	ID      string    `json:"id"`
	Name    string    `json:"name,omitempty"`
	Created time.Time `json:"created"`
	Parent  string    `json:"parent"` // the sandbox checkpointed
	Owner   string    `json:"owner,omitempty"`
	Driver  string    `json:"driver"`
	Model   string    `json:"model,omitempty"`
	// BaseImage is the image the parent ran; Image the committed one
	// (Docker, Podman), Archive the host folder (engines without commits).
	BaseImage string `json:"base_image"`
	Image     string `json:"image,omitempty"`
	Archive   string `json:"archive,omitempty"`
	// Size is what the checkpoint adds to its base: the committed layer,
	// or the archive's bytes.
	Size       int64    `json:"size"`
	Session    string   `json:"session,omitempty"`
	WorkDir    string   `json:"workdir,omitempty"`
	Egress     Egress   `json:"egress"`
	AllowHosts []string `json:"allow_hosts,omitempty"`
	// The parent's limits, for the record: StartFrom takes the caller's.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	PidsLimit   int64 `json:"pids_limit,omitempty"`
}

// CheckpointRepo is the image repository of committed checkpoints (tag:
// the checkpoint's id).
const CheckpointRepo = "sandbox-agent-checkpoint"

// committer is a Runtime that can commit a container as a local image
// (runtime/docker): paused while it runs, labelled (labels gets the size
// of the container's changes), with the container's
// environment and labels reset to its base image's; past maxBytes it
// fails with ErrCheckpointSize and leaves no image. ErrUnsupportedByRuntime:
// the engine cannot commit (a wrapper over one that cannot).
type committer interface {
	Commit(ctx context.Context, id, ref string, labels func(changed int64) map[string]string, maxBytes int64) (int64, error)
}

// checkpointID is the form of newCheckpointID's ids.
var checkpointID = lazyre.New(`^ck-[0-9a-f]{1,61}$`)

// Check reports whether c names only what a checkpoint of ours can: an id
// of Checkpoint's form, and either its image (CheckpointRepo:id) or its
// folder under root (root/id). A Checkpoint read from a store, a label or
// a file is checked before it is used (ErrInvalidArgument).
func (c Checkpoint) Check(root string) error {
	switch {
	case !checkpointID.MatchString(c.ID):
		return fmt.Errorf("%w: checkpoint id %q", ErrInvalidArgument, c.ID)
	case (c.Image == "") == (c.Archive == ""):
		return fmt.Errorf("%w: checkpoint %s: want an image or an archive", ErrInvalidArgument, c.ID)
	case c.Image != "" && c.Image != CheckpointRepo+":"+c.ID:
		return fmt.Errorf("%w: checkpoint %s names image %q: want %s:<its id>", ErrInvalidArgument, c.ID, c.Image, CheckpointRepo)
	case c.Archive != "" && (!filepath.IsAbs(root) || filepath.Clean(c.Archive) != filepath.Join(root, c.ID)):
		return fmt.Errorf("%w: checkpoint %s: its archive %q is not its folder under checkpoint_root %q", ErrInvalidArgument, c.ID, c.Archive, root)
	}
	return nil
}

// maxFork is the most branches one Fork makes.
const maxFork = 100

func newCheckpointID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "ck-" + hex.EncodeToString(b)
}

// Checkpoint keeps the sandbox's files and the CLI's session under name
// (free text, for people). It waits for a running turn and holds the next
// ones while it runs; the agent goes on afterwards. A sandbox grown past
// Config.CheckpointMaxBytes fails with ErrCheckpointSize, leaving nothing.
func (a *Agent) Checkpoint(ctx context.Context, name string) (Checkpoint, error) {
	return a.checkpoint(ctx, name, a.opts.owner)
}

func (a *Agent) checkpoint(ctx context.Context, name, owner string) (Checkpoint, error) {
	unlock, err := a.lockTurn(ctx)
	if err != nil {
		return Checkpoint{}, err
	}
	defer unlock()
	sb := a.sb
	c := Checkpoint{
		ID: newCheckpointID(), Name: name, Created: time.Now().UTC().Truncate(time.Second), Parent: sb.name, Owner: owner,
		Driver: a.drv.Name(), Model: a.model, BaseImage: a.image, Session: a.SessionID(), WorkDir: sb.workdir,
		Egress: sb.egress, AllowHosts: slices.Clone(sb.allow), MemoryBytes: sb.memoryBytes, PidsLimit: sb.pidsLimit,
	}
	if cm, ok := sb.rt.(committer); ok {
		c.Image = CheckpointRepo + ":" + c.ID
		_, err := cm.Commit(ctx, sb.id, c.Image, func(changed int64) map[string]string {
			c.Size = changed // the label holds the size, as the engine measured the changes
			return map[string]string{labels.Checkpoint: c.label()}
		}, a.cfg.CheckpointMaxBytes)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, ErrUnsupportedByRuntime) {
			return Checkpoint{}, fmt.Errorf("checkpoint %s: %w", sb.name, err)
		}
		c.Image = ""
	}
	if err := a.archive(ctx, &c); err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %s: %w", sb.name, err)
	}
	return c, nil
}

// StartFrom starts a new agent on checkpoint c: a fresh sandbox (its own
// name, proxy token and keepalive), hardened and with the egress that
// opts ask (as Start: the checkpoint's never loosen them), with c's files,
// continuing c's session. drv is built as for Start and must be c's
// driver. The checkpoint's model and working directory apply unless opts
// name others.
func StartFrom(ctx context.Context, rt Runtime, drv Driver, c Checkpoint, opts ...AgentOption) (*Agent, error) {
	if drv == nil {
		return nil, fmt.Errorf("%w: nil driver", ErrInvalidArgument)
	}
	if c.Driver != drv.Name() {
		return nil, fmt.Errorf("%w: checkpoint %s is of a %s agent, not %s", ErrInvalidArgument, c.ID, c.Driver, drv.Name())
	}
	o, cfg := applyOptions(opts)
	// A Checkpoint may come from a store or a label: it starts only an
	// image of ours, the one its id names, or its folder.
	if err := c.Check(cfg.CheckpointRoot); err != nil {
		return nil, err
	}
	if c.Archive != "" {
		stored, err := archived(cfg, c)
		if err != nil {
			return nil, err
		}
		if stored.Driver != drv.Name() {
			return nil, fmt.Errorf("%w: checkpoint %s is of a %s agent, not %s", ErrInvalidArgument, c.ID, stored.Driver, drv.Name())
		}
		c = stored // the folder's record, not the caller's copy
	}
	first := []AgentOption{WithModel(cmp.Or(o.model, c.Model)), WithWorkDir(cmp.Or(o.workdir, c.WorkDir))}
	if c.Image != "" {
		// A committed image is ours and local: nothing to pull, build
		// or check against the released digests (its base was).
		first = append(first, WithImage(c.Image), WithSandbox(func(s *SandboxOptions) { s.Images = nil }))
	} else {
		first = append(first, WithImage(c.BaseImage))
	}
	a, err := Start(ctx, rt, drv, slices.Concat(opts, first)...) // never into the caller's array
	if err != nil {
		return nil, err
	}
	if c.Archive != "" {
		err = a.restore(ctx, c)
	} else if c.Session != "" {
		a.SetSession(c.Session)
	}
	if err != nil {
		a.Close()
		return nil, fmt.Errorf("start from checkpoint %s: %w", c.ID, err)
	}
	return a, nil
}

// Fork checkpoints the agent and starts n agents on the checkpoint at
// once and returns them: each with the agent's own options (engine,
// driver, resources, owner) and its sandbox's egress, allowed hosts,
// working directory and user, counting on a meter of its own whose parent
// is the agent's (the branches spend the agent's budget). The branches
// see none of each other's files or turns, nor the agent's after the
// fork. All or none: when one fails to start, the others are closed and
// the checkpoint removed. An archived checkpoint goes once the branches
// have it; an image stays while they run on it, for gc to prune after
// checkpoint_retention.
func (a *Agent) Fork(ctx context.Context, n int) ([]*Agent, error) {
	if n < 1 || n > maxFork {
		return nil, fmt.Errorf("%w: fork into %d: want 1 to %d", ErrInvalidArgument, n, maxFork)
	}
	c, err := a.checkpoint(ctx, "fork", "") // no owner: gc's to prune
	if err != nil {
		return nil, err
	}
	drv := a.drv
	if d, ok := a.router.(Driver); ok {
		drv = d // the unrouted driver: each branch gets its own proxy
	}
	opts, sb := a.opts, a.sb
	opts.meter = nil
	base := []AgentOption{
		func(o *agentOptions) { *o = opts },
		WithEgress(sb.egress, sb.allow...), // an adopted agent's are its state's, not its options'
		WithSandbox(func(s *SandboxOptions) {
			if s.User == "" {
				s.User = sb.user
			}
		}),
	}
	branches := make([][]AgentOption, n)
	for i := range branches {
		branches[i] = base
		if a.meter != nil {
			m, err := metering.NewMeter(metering.MeterOptions{Parent: a.meter, Prices: a.cfg.Prices})
			if err != nil {
				return nil, errors.Join(err, a.dropCheckpoint(ctx, c))
			}
			branches[i] = append(slices.Clip(base), WithMeter(m))
		}
	}
	out := make([]*Agent, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() { out[i], errs[i] = StartFrom(ctx, sb.rt, drv, c, branches[i]...) })
	}
	wg.Wait()
	err = errors.Join(errs...)
	if err != nil {
		for _, b := range out {
			if b != nil {
				b.Close()
			}
		}
	}
	if err != nil || c.Archive != "" {
		if rerr := a.dropCheckpoint(ctx, c); rerr != nil && err != nil {
			err = fmt.Errorf("%w (and its checkpoint %s remains: %v)", err, c.ID, rerr)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", sb.name, err)
	}
	return out, nil
}

// dropCheckpoint removes a checkpoint Fork made.
func (a *Agent) dropCheckpoint(ctx context.Context, c Checkpoint) error {
	if c.Archive != "" {
		return os.RemoveAll(c.Archive)
	}
	if r, ok := a.sb.rt.(interface {
		RemoveImage(ctx context.Context, ref string) error
	}); ok {
		return r.RemoveImage(context.WithoutCancel(ctx), c.Image)
	}
	return nil
}
