package repo

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// local is a Sandbox whose "container" is a host folder: the scripts run
// there with sh, as they would in a sandbox.
type local struct{ dir string }

func (l local) Run(ctx context.Context, cmd []string, env map[string]string, stdin io.Reader, stdout io.Writer) (int, []byte, error) {
	c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
	c.Dir = l.dir
	c.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + l.dir}
	for k, v := range env {
		c.Env = append(c.Env, k+"="+v)
	}
	var errb bytes.Buffer
	c.Stdin, c.Stdout, c.Stderr = stdin, stdout, &errb
	err := c.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), errb.Bytes(), nil
	}
	return 0, errb.Bytes(), err
}

// sh runs a shell script in dir with a fixed identity, failing the test
// on error; it returns stdout.
func sh(t *testing.T, dir, script string) string {
	t.Helper()
	c := exec.Command("sh", "-ec", script)
	c.Dir = dir
	c.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return strings.TrimSpace(string(out))
}

// hostRepo makes a host repository with two commits and uncommitted work
// (a modified file, an untracked one, an ignored one).
func hostRepo(t *testing.T) string {
	dir := t.TempDir()
	sh(t, dir, `git init -q -b main .
echo one > a.txt; echo ignored.log > .gitignore; git add .; git commit -qm one
echo two >> a.txt; git commit -qam two
echo dirty >> a.txt; echo new > untracked.txt; echo secret > ignored.log`)
	return dir
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	host := hostRepo(t)
	headBefore := sh(t, host, "git rev-parse HEAD")
	statusBefore := sh(t, host, "git status --porcelain")
	r, err := Open(ctx, host, "t1", Options{Worktree: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sbDir := t.TempDir()
	sb := local{sbDir}
	if err := r.Put(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, sbDir, "cat a.txt; ls"); !strings.Contains(got, "dirty") || !strings.Contains(got, "untracked.txt") || strings.Contains(got, "ignored.log") {
		t.Fatalf("sandbox work tree:\n%s", got)
	}
	if got := sh(t, sbDir, "git status --porcelain"); got != "" {
		t.Fatalf("sandbox status not clean after put: %q", got)
	}
	// Turn 1: a commit and uncommitted work.
	sh(t, sbDir, `echo agent > b.txt; git add b.txt; git commit -qm "agent one"; echo later > c.txt`)
	ch, err := r.Sync(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	if !ch.Uncommitted || ch.Rewritten || len(ch.Commits) != 3 || ch.Branch != "sandbox-agent/t1" {
		t.Fatalf("first sync: %+v", ch)
	}
	if got := sh(t, host, "git log --format=%s sandbox-agent/t1"); got != "sandbox-agent: uncommitted work\nagent one\nsandbox-agent: uncommitted work from the host\ntwo\none" {
		t.Fatalf("branch log:\n%s", got)
	}
	if got := sh(t, host, "git show sandbox-agent/t1:c.txt"); got != "later" {
		t.Fatalf("c.txt = %q", got)
	}
	// Turn 2: only the new commit comes.
	sh(t, sbDir, `git add c.txt; git commit -qm "agent two"`)
	ch, err = r.Sync(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Uncommitted || ch.Rewritten || len(ch.Commits) != 1 {
		t.Fatalf("second sync: %+v", ch)
	}
	tip2 := ch.Tip
	// Nothing new.
	ch, err = r.Sync(ctx, sb)
	if err != nil || !ch.Unchanged || len(ch.Commits) != 0 {
		t.Fatalf("third sync: %+v %v", ch, err)
	}
	// Turn 3: an amend.
	sh(t, sbDir, `git commit -q --amend -m "agent two, amended"`)
	ch, err = r.Sync(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	if !ch.Rewritten || ch.Previous != "sandbox-agent/t1-previous-1" {
		t.Fatalf("amend sync: %+v", ch)
	}
	if got := sh(t, host, "git rev-parse sandbox-agent/t1-previous-1"); got != tip2 {
		t.Fatalf("previous tip %s, want %s", got, tip2)
	}
	if sh(t, host, "git rev-parse HEAD") != headBefore || sh(t, host, "git status --porcelain") != statusBefore {
		t.Fatal("the host's HEAD or work tree changed")
	}
	sh(t, host, "git fsck --strict --no-dangling")
}

// TestCheckedOutBranch: a sync never moves a branch a host work tree has
// checked out (its files would then read as the agent's work reverted).
func TestCheckedOutBranch(t *testing.T) {
	ctx := context.Background()
	host := hostRepo(t)
	if _, err := Open(ctx, host, "x", Options{Branch: "main"}); !errors.Is(err, ErrBranchExists) {
		t.Fatalf("Open with the checked-out branch: %v; want ErrBranchExists", err)
	}
	// Checked out after Open, before the sync: refused then too.
	sh(t, host, "git branch later")
	r, sb := putLocal(t, host, "x", Options{Branch: "later"})
	sh(t, sb.dir, "echo x > x.txt; git add x.txt; git commit -qm x")
	sh(t, host, "git worktree add -q ../wt-later later")
	t.Cleanup(func() { os.RemoveAll(host + "/../wt-later") })
	before := sh(t, host, "git rev-parse later")
	if _, err := r.Sync(ctx, sb); !errors.Is(err, ErrBranchExists) {
		t.Fatalf("Sync onto a branch checked out in another work tree: %v; want ErrBranchExists", err)
	}
	if after := sh(t, host, "git rev-parse later"); after != before {
		t.Fatalf("the branch moved: %s → %s", before, after)
	}
}

// TestOptions: bad options are refused before any git runs.
func TestOptions(t *testing.T) {
	for _, o := range []Options{
		{Depth: -1},
		{Mode: "zip"},
		{Mode: ModePatch},
		{Branch: "a..b"},
		{Branch: "-x"},
		{Branch: "x.lock"},
		{Branch: "a b"},
		{AuthorName: "a\nb"},
		{AuthorEmail: "<x>"},
	} {
		if _, err := o.check("n"); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	o, err := Options{}.check("sandbox-agent-abc")
	if err != nil || o.Branch != "sandbox-agent/abc" || o.Mode != ModeBranch || o.Limits != DefaultLimits {
		t.Fatalf("defaults: %+v %v", o, err)
	}
}

// TestResume: a repository resumed from its State goes on where the
// last sync left off (one new commit, the branch fast-forwarded), and an
// amend after the resume is still seen as a rewrite.
func TestResume(t *testing.T) {
	ctx := context.Background()
	host := hostRepo(t)
	r, sb := putLocal(t, host, "res", Options{})
	sh(t, sb.dir, "echo 1 > one.txt; git add one.txt; git commit -qm one")
	if _, err := r.Sync(ctx, sb); err != nil {
		t.Fatal(err)
	}
	st := r.State()
	r.Close()
	r2, err := Resume(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	sh(t, sb.dir, "echo 2 > two.txt; git add two.txt; git commit -qm two")
	ch, err := r2.Sync(ctx, sb)
	if err != nil || len(ch.Commits) != 1 || ch.Rewritten || ch.Branch != "sandbox-agent/res" {
		t.Fatalf("sync after resume: %+v %v", ch, err)
	}
	sh(t, sb.dir, "git commit -q --amend -m two-amended")
	if ch, err = r2.Sync(ctx, sb); err != nil || !ch.Rewritten || ch.Previous == "" {
		t.Fatalf("amend after resume: %+v %v", ch, err)
	}
	bad := st
	bad.Base = "not-a-commit"
	if _, err := Resume(ctx, bad); err == nil {
		t.Fatal("Resume with a bad base: no error")
	}
}

// TestSymlinkClimb: the rule for a link's target, by hand.
func TestSymlinkClimb(t *testing.T) {
	for _, tc := range []struct {
		target string
		climb  int
		ok     bool
	}{
		{"a.txt", 0, true}, {"../a", 1, true}, {"../../x/y", 2, true}, {"./x", 0, true},
		{"/etc/passwd", 0, false}, {"x/../../y", 0, false}, {`a\..\..\x`, 0, false}, {"C:/x", 0, false}, {"", 0, false},
	} {
		n, err := symlinkClimb("b", tc.target)
		if (err == nil) != tc.ok || n != tc.climb {
			t.Errorf("%q: climb %d, err %v; want %d, ok %v", tc.target, n, err, tc.climb, tc.ok)
		}
	}
}

// TestGitMemoryCap: the address-space cap reaches git (a git without
// room to load fails; with room it runs).
func TestGitMemoryCap(t *testing.T) {
	ctx := context.Background()
	if _, err := (git{dir: t.TempDir(), maxVM: 1 << 30}).out(ctx, "version"); err != nil {
		t.Fatalf("git version with 1 GiB: %v", err)
	}
	if _, err := (git{dir: t.TempDir(), maxVM: 1 << 20}).out(ctx, "version"); err == nil {
		t.Fatal("git version with 1 MiB of address space ran: the cap does not apply")
	}
	if m := indexPackMemory(DefaultLimits); m < 1<<30 || m > 4<<30 {
		t.Fatalf("index-pack's memory under the default limits: %d", m)
	}
}

// TestPreviousNameBlocked: a ref under the first previous-N name (which
// blocks creating it) moves the kept tip on to the next name.
func TestPreviousNameBlocked(t *testing.T) {
	ctx := context.Background()
	host := hostRepo(t)
	r, sb := putLocal(t, host, "blk", Options{})
	sh(t, sb.dir, "echo 1 > one.txt; git add one.txt; git commit -qm one")
	ch, err := r.Sync(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	sh(t, host, "git update-ref refs/heads/sandbox-agent/blk-previous-1/x HEAD")
	sh(t, sb.dir, "git commit -q --amend -m one-amended")
	ch2, err := r.Sync(ctx, sb)
	if err != nil || !ch2.Rewritten || ch2.Previous != "sandbox-agent/blk-previous-2" {
		t.Fatalf("amend with previous-1 blocked: %+v %v", ch2, err)
	}
	if got := sh(t, host, "git rev-parse sandbox-agent/blk-previous-2"); got != ch.Tip {
		t.Fatalf("previous-2 is %s, want %s", got, ch.Tip)
	}
}

// putLocal opens the host repository and puts it in a local sandbox;
// the repository is closed when the test ends.
func putLocal(t *testing.T, host, name string, o Options) (*Repo, local) {
	t.Helper()
	r, err := Open(context.Background(), host, name, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	sb := local{t.TempDir()}
	if err := r.Put(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	return r, sb
}
