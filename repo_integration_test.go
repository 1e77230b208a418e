//go:build integration

package sandboxagent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/gittest"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/repo"
)

// userRepo is a host repository with history and the user's uncommitted
// work (a modified file, an untracked one) that no sync may touch.
func userRepo(t *testing.T) string {
	dir := t.TempDir()
	gittest.Run(t, dir, "init", "-q", "-b", "main")
	for i, s := range []string{"one", "two"} {
		if err := os.WriteFile(dir+"/readme.txt", []byte(strings.Repeat(s+"\n", i+1)), 0o644); err != nil {
			t.Fatal(err)
		}
		gittest.Run(t, dir, "add", "-A")
		gittest.Run(t, dir, "commit", "-qm", s)
	}
	if err := os.WriteFile(dir+"/readme.txt", []byte("the user's unsaved edit\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/notes.txt", []byte("the user's untracked notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestIntegrationRepo drives a real CLI against the fake model over
// three turns in a repository from the host: the agent commits and
// leaves work uncommitted, commits again, then amends. Each sync brings
// only what is new as the branch; the amend is reported and the previous
// tip kept; the host's HEAD, index and work tree never change.
func TestIntegrationRepo(t *testing.T) {
	gittest.Need(t)
	rt := testenv.Runtime(t)
	for _, tc := range []struct {
		driver   string
		worktree bool
		adopt    bool // the second turn and later on an agent adopted from the first's state
	}{{"pi", true, true}, {"claude", false, false}} {
		t.Run(tc.driver, func(t *testing.T) {
			srv := drivertest.FakeModel(t, fakemodel.Script{Responses: []fakemodel.Step{
				{Tool: fakemodel.ToolShell, Command: "echo one > agent1.txt && git add agent1.txt && git commit -qm 'agent one' && echo wip > wip.txt"},
				{Text: "DONE"},
				{Tool: fakemodel.ToolShell, Command: "git add wip.txt && git commit -qm 'agent two'"},
				{Text: "DONE"},
				{Tool: fakemodel.ToolShell, Command: "git commit -q --amend -m 'agent two, amended'"},
				{Text: "DONE"},
			}})
			host := userRepo(t)
			head, status := gittest.Run(t, host, "rev-parse", "HEAD"), gittest.Run(t, host, "status", "--porcelain")
			refsBefore := gittest.Run(t, host, "for-each-ref", "--format=%(refname)")
			a := drivertest.StartAgent(t, rt, adoptDriver(tc.driver, srv.URL()), drivertest.AuditRoot(t),
				sandboxagent.WithRepo(host, repo.Options{Worktree: tc.worktree, AuthorName: "Agent", AuthorEmail: "agent@example.com"}))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			untouched := func(when string) {
				t.Helper()
				if h, s := gittest.Run(t, host, "rev-parse", "HEAD"), gittest.Run(t, host, "status", "--porcelain"); h != head || s != status {
					t.Fatalf("%s: the host's HEAD or work tree changed: %s %q (was %s %q)", when, h, s, head, status)
				}
				gittest.Run(t, host, "fsck", "--strict", "--no-dangling")
			}
			turn := func(n int) repo.Changes {
				t.Helper()
				if _, err := a.Ask(ctx, "work"); err != nil {
					t.Fatalf("turn %d: %v", n, err)
				}
				ch, err := a.Changes(ctx)
				if err != nil {
					t.Fatalf("changes after turn %d: %v", n, err)
				}
				t.Logf("turn %d: %+v", n, ch)
				untouched(fmt.Sprintf("turn %d", n))
				return ch
			}

			ch := turn(1)
			branch := ch.Branch
			if !strings.HasPrefix(branch, "sandbox-agent/") || !ch.Uncommitted || ch.Rewritten {
				t.Fatalf("first sync: %+v", ch)
			}
			want := []string{"sandbox-agent: uncommitted work", "agent one"}
			if tc.worktree {
				want = append(want, "sandbox-agent: uncommitted work from the host")
			}
			want = append(want, "two", "one")
			if got := gittest.Run(t, host, "log", "--format=%s", branch); got != strings.Join(want, "\n") {
				t.Fatalf("the branch's log:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
			}
			if len(ch.Commits) != len(want)-2 {
				t.Fatalf("first sync: %d new commits, want %d", len(ch.Commits), len(want)-2)
			}
			if got := gittest.Run(t, host, "show", branch+":wip.txt"); got != "wip" {
				t.Fatalf("the uncommitted file on the branch: %q", got)
			}
			if got := gittest.Run(t, host, "log", "-1", "--format=%an <%ae>", branch+"~1"); got != "Agent <agent@example.com>" {
				t.Fatalf("the agent's commit is by %q", got)
			}
			readme := gittest.Run(t, host, "show", branch+":readme.txt")
			if tc.worktree != (readme == "the user's unsaved edit") {
				t.Fatalf("worktree %v: readme.txt on the branch is %q", tc.worktree, readme)
			}

			if tc.adopt {
				st := a.State()
				if st.Repo == nil || st.Repo.LastTip != ch.Tip {
					t.Fatalf("the agent's state carries the repository %+v; want its last tip %s", st.Repo, ch.Tip)
				}
				if err := a.Detach(); err != nil {
					t.Fatal(err)
				}
				cfg := testenv.Config()
				cfg.AuditRoot = drivertest.AuditRoot(t)
				cfg.Timeouts.Ask = 4 * time.Minute
				b, err := sandboxagent.Adopt(ctx, rt, adoptDriver(tc.driver, srv.URL()), st, sandboxagent.WithConfig(cfg))
				if err != nil {
					t.Fatalf("Adopt: %v", err)
				}
				t.Cleanup(func() { b.Close() })
				if b.Repo() == nil {
					t.Fatal("the adopted agent has no repository")
				}
				a = b
			}
			ch = turn(2)
			if ch.Branch != branch || ch.Uncommitted || ch.Rewritten || len(ch.Commits) != 1 {
				t.Fatalf("second sync (one new commit): %+v", ch)
			}
			if got := gittest.Run(t, host, "log", "-1", "--format=%s", branch); got != "agent two" {
				t.Fatalf("the branch's tip after the second sync: %q", got)
			}
			tip2 := ch.Tip

			ch = turn(3)
			if !ch.Rewritten || ch.Previous != branch+"-previous-1" || len(ch.Commits) != 1 {
				t.Fatalf("third sync (an amend): %+v", ch)
			}
			if got := gittest.Run(t, host, "rev-parse", ch.Previous); got != tip2 {
				t.Fatalf("the previous tip kept as %s is %s, want %s", ch.Previous, got, tip2)
			}
			refs := gittest.Run(t, host, "for-each-ref", "--format=%(refname)")
			if want := refsBefore + "\nrefs/heads/" + branch + "\nrefs/heads/" + ch.Previous; refs != want {
				t.Fatalf("the host's refs:\n%s\nwant:\n%s", refs, want)
			}
		})
	}
}

// TestIntegrationRepoNoGit: an image without git gets repo.ErrNoGit
// from Start, and no sandbox is left behind.
func TestIntegrationRepoNoGit(t *testing.T) {
	rt := testenv.Runtime(t)
	srv := drivertest.FakeModel(t, fakemodel.Script{Responses: []fakemodel.Step{{Text: "OK"}}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := testenv.Config()
	cfg.AuditRoot = drivertest.AuditRoot(t)
	a, err := sandboxagent.Start(ctx, rt, adoptDriver("dsh", srv.URL()), sandboxagent.WithConfig(cfg),
		sandboxagent.WithImage(testenv.Image()), sandboxagent.WithRepo(userRepo(t)))
	if err == nil {
		a.Close()
		t.Fatalf("Start with a repository in %s (no git): no error", testenv.Image())
	}
	if !errors.Is(err, repo.ErrNoGit) {
		t.Fatalf("Start with a repository in an image without git: %v; want repo.ErrNoGit", err)
	}
	t.Logf("refused: %v", err)
}
