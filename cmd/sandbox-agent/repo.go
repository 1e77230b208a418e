package main

import (
	"flag"
	"fmt"
	"io"
	"net/mail"
	"os"
	"path/filepath"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/repo"
)

// repoFlags are ask's flags of a repository in and its changes out.
type repoFlags struct {
	dir, branch, changes, out, author string
	depth                             int
	worktree                          bool
}

func (f *repoFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dir, "repo", "", "put the git repository at `DIR` in the sandbox's working directory; after the turn the agent's commits (and its uncommitted work, as one last commit) come back as a branch of it")
	fs.IntVar(&f.depth, "repo-depth", 0, "with --repo: how many commits of HEAD's history go in (0: all)")
	fs.BoolVar(&f.worktree, "repo-worktree", false, "with --repo: the uncommitted and untracked (not ignored) files go in too, as one commit on top of HEAD")
	fs.StringVar(&f.branch, "branch", "", "with --repo: the branch the changes come back as (default sandbox-agent/<sandbox name>)")
	fs.StringVar(&f.changes, "changes", "branch", "with --repo: `MODE` the changes come back as: branch, patch (format-patch files in a folder) or bundle (a git bundle file)")
	fs.StringVar(&f.out, "changes-out", "", "with --changes patch|bundle: the folder or file to write (default sandbox-agent-<the repository folder's name>.patches or .bundle in the current folder)")
	fs.StringVar(&f.author, "author", "", "with --repo: the identity of the agent's commits, `\"NAME <EMAIL>\"` (default sandbox-agent <agent@sandbox-agent.invalid>)")
}

// option is the WithRepo option the flags ask for (nil: no --repo).
func (f *repoFlags) option(fs *flag.FlagSet) (sandboxagent.AgentOption, error) {
	if f.dir == "" {
		var stray string
		fs.Visit(func(fl *flag.Flag) {
			switch fl.Name {
			case "repo-depth", "repo-worktree", "branch", "changes", "changes-out", "author":
				stray = fl.Name
			}
		})
		if stray != "" {
			return nil, fmt.Errorf("%w: --%s needs --repo", sandboxagent.ErrInvalidArgument, stray)
		}
		return nil, nil
	}
	mode, err := repo.ParseMode(f.changes)
	if err != nil {
		return nil, err
	}
	o := repo.Options{Depth: f.depth, Worktree: f.worktree, Branch: f.branch, Mode: mode, Output: f.out}
	if f.author != "" {
		addr, err := mail.ParseAddress(f.author)
		if err != nil {
			return nil, fmt.Errorf("%w: --author %q: want \"NAME <EMAIL>\"", sandboxagent.ErrInvalidArgument, f.author)
		}
		o.AuthorName, o.AuthorEmail = addr.Name, addr.Address
	}
	if mode != repo.ModeBranch && o.Output == "" {
		ext := ".patches"
		if mode == repo.ModeBundle {
			ext = ".bundle"
		}
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		o.Output = filepath.Join(wd, "sandbox-agent-"+filepath.Base(f.dir)+ext)
	}
	if o.Output != "" {
		if o.Output, err = filepath.Abs(o.Output); err != nil {
			return nil, err
		}
	}
	return sandboxagent.WithRepo(f.dir, o), nil
}

// printChanges prints a sync's outcome after the reply: the branch (or
// output) and what is in it.
func printChanges(w io.Writer, ch *repo.Changes) {
	if ch.Branch != "" {
		fmt.Fprintf(w, "branch: %s\n", line(ch.Branch))
	}
	if ch.Output != "" {
		fmt.Fprintf(w, "changes: %s\n", line(ch.Output))
	}
	note := ""
	if ch.Uncommitted {
		note = " (the last holds the uncommitted work)"
	}
	fmt.Fprintf(w, "commits: %d new%s, tip %s\n", len(ch.Commits), note, line(ch.Tip))
	if ch.Rewritten {
		fmt.Fprintf(w, "rewritten: the agent rewrote history; the previous tip is %s\n", line(ch.Previous))
	}
}
