package sandboxagent

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sandbox-agent/sandbox-agent/repo"
)

// ErrNoRepo: the agent was started without a repository (WithRepo).
var ErrNoRepo = errors.New("the agent has no repository")

// WithRepo puts the host git repository at dir into the sandbox's
// working directory when the agent starts: HEAD's history (to
// o.Depth), a clean git config with the agent's identity and, with
// o.Worktree, the uncommitted and untracked files as one commit on top.
// Agent.Changes brings the agent's work home (see package repo). At most
// one repo.Options applies.
func WithRepo(dir string, o ...repo.Options) AgentOption {
	return func(a *agentOptions) {
		a.repoDir = dir
		a.repo = repo.Options{}
		if len(o) > 0 {
			a.repo = o[0]
		}
	}
}

// Repo is the agent's repository (nil without WithRepo).
func (a *Agent) Repo() *repo.Repo { return a.repo }

// Changes brings home what the agent did in its repository since the
// last call: its new commits and, as one last commit, what it left
// uncommitted, as a branch of the host repository (or patches, or a
// bundle; repo.Options.Mode). It waits for a running turn; the sync
// (the sandbox's part and the host's checks) runs under the copy
// timeout (Config.Timeouts.Copy).
func (a *Agent) Changes(ctx context.Context) (repo.Changes, error) {
	if a.repo == nil {
		return repo.Changes{}, ErrNoRepo
	}
	unlock, err := a.lockTurn(ctx)
	if err != nil {
		return repo.Changes{}, err
	}
	defer unlock()
	// The whole sync, the host's checks too, under the copy timeout: a
	// pack that is slow to check holds the agent's turn lock.
	sctx, cancel := context.WithTimeout(ctx, a.cfg.Timeouts.Copy)
	defer cancel()
	ch, err := a.repo.Sync(sctx, repoSandbox{a.sb})
	if err != nil && ctx.Err() == nil && sctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("%w: the sync ran past the copy timeout (%s): %w", ErrTimeout, a.cfg.Timeouts.Copy, err)
	}
	return ch, err
}

// openRepo checks the repository before the sandbox starts.
func (o *agentOptions) openRepo(ctx context.Context, name string) (*repo.Repo, error) {
	if o.repoDir == "" {
		return nil, nil
	}
	r, err := repo.Open(ctx, o.repoDir, name, o.repo)
	if err != nil {
		return nil, fmt.Errorf("repository %s: %w", o.repoDir, err)
	}
	return r, nil
}

// repoSandbox runs package repo's scripts as the sandbox's user in its
// working directory, under the copy timeout.
type repoSandbox struct{ s *Sandbox }

func (r repoSandbox) Run(ctx context.Context, cmd []string, env map[string]string, stdin io.Reader, stdout io.Writer) (int, []byte, error) {
	res, err := r.s.Run(ctx, ExecRequest{Cmd: cmd, Env: env, Stdin: stdin, Stdout: stdout, MaxOutputBytes: 64 << 10, Timeout: r.s.cfg.Timeouts.Copy})
	if err == nil && res.TimedOut {
		err = fmt.Errorf("%w after %s", ErrTimeout, r.s.cfg.Timeouts.Copy)
	}
	return res.ExitCode, res.Stderr, err
}
