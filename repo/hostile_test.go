package repo

// The hostile suite: what a sandbox may send back, crafted with real git
// (hash-object --literally, mktree, commit-tree, bundle create) and fed to
// Repo.Sync by a fake Sandbox, must be refused with ErrUnsafe or
// ErrLimitExceeded and leave the host repository as it was: its refs,
// HEAD, status and work tree unchanged, no host hook run, fsck clean.
// Where git's own fsck (on in the quarantine's fetch) refuses a case
// first, the same objects are also given to quarantine.check directly
// (no fsck on the way in), so that each of the package's own rules is
// exercised and a test fails when one is removed.

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// crafted is a Sandbox whose every command answers out (an answer line
// and bundle bytes, as the sync script would), in chunks, exit 0.
type crafted struct{ out []byte }

func (c crafted) Run(ctx context.Context, cmd []string, env map[string]string, stdin io.Reader, stdout io.Writer) (int, []byte, error) {
	for p := c.out; len(p) > 0; {
		n := min(len(p), 32<<10)
		if _, err := stdout.Write(p[:n]); err != nil {
			return 0, nil, err
		}
		p = p[n:]
	}
	return 0, nil, ctx.Err()
}

// shEnv is sh with more environment.
func shEnv(t *testing.T, dir string, env []string, script string) string {
	t.Helper()
	c := exec.Command("sh", "-ec", script)
	c.Dir = dir
	c.Env = append(append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
		"GIT_AUTHOR_DATE=1700000000 +0000", "GIT_COMMITTER_DATE=1700000000 +0000"), env...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		t.Fatalf("%s: %v\n%s%s", script, err, out.String(), errb.String())
	}
	return strings.TrimSpace(out.String())
}

// craftLib are shell functions for crafting objects without git's checks.
const craftLib = `
blob() { printf '%s' "$1" | git hash-object -w --literally --stdin; }
tree() { printf '%s\n' "$@" | git mktree; }
`

// hostile is a host repository put into a local sandbox, with host hooks
// that would leave a marker if they ran.
type hostile struct {
	host, sbDir, scratch string
	marker               string
	base                 string
	r                    *Repo
}

func newHostile(t *testing.T, lim Limits) *hostile {
	t.Helper()
	ctx := context.Background()
	h := &hostile{host: hostRepo(t), marker: filepath.Join(t.TempDir(), "host-hook-ran")}
	hooks := filepath.Join(h.host, ".git", "hooks")
	if err := os.MkdirAll(hooks, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"reference-transaction", "post-checkout"} {
		script := fmt.Sprintf("#!/bin/sh\necho %s >> '%s'\n", name, h.marker)
		if err := os.WriteFile(filepath.Join(hooks, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The hooks do run for a git without the package's hardening: the
	// marker is a real witness.
	sh(t, h.host, "git update-ref refs/probe HEAD; git update-ref -d refs/probe")
	if _, err := os.Stat(h.marker); err != nil {
		t.Fatalf("the host hook did not run for a plain git: %v", err)
	}
	os.Remove(h.marker)

	h.base = sh(t, h.host, "git rev-parse HEAD")
	r, err := Open(ctx, h.host, "hostile", Options{Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	h.r = r
	h.sbDir = t.TempDir()
	if err := r.Put(ctx, local{h.sbDir}); err != nil {
		t.Fatal(err)
	}
	h.assertNoHook(t)
	h.scratch = filepath.Join(t.TempDir(), "scratch")
	sh(t, h.host, "git clone -q --no-hardlinks . '"+h.scratch+"'")
	return h
}

func (h *hostile) assertNoHook(t *testing.T) {
	t.Helper()
	if b, err := os.ReadFile(h.marker); err == nil {
		t.Fatalf("a host hook ran: %s", b)
	}
}

// commit crafts, in the scratch clone, a commit on the base whose root
// tree the script (with craftLib) prints; it returns the commit.
func (h *hostile) commit(t *testing.T, script string) string {
	t.Helper()
	return craftCommit(t, h.scratch, nil, h.base, script)
}

func craftCommit(t *testing.T, dir string, env []string, base, script string) string {
	t.Helper()
	return shEnv(t, dir, append(env, "BASE="+base), craftLib+"build() {\n"+script+"\n}\nroot=$(build)\ngit commit-tree -p \"$BASE\" -m hostile \"$root\"\n")
}

// bundle makes a bundle of refs (name=commit) less the base, in the
// scratch clone, and returns its bytes.
func (h *hostile) bundle(t *testing.T, refs map[string]string) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "b.bundle")
	script := ""
	var names []string
	for ref, c := range refs {
		script += fmt.Sprintf("git update-ref '%s' %s\n", ref, c)
		names = append(names, "'"+ref+"'")
	}
	script += fmt.Sprintf("git bundle create -q '%s' %s ^%s\n", path, strings.Join(names, " "), h.base)
	sh(t, h.scratch, script)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// answer is what a well-formed sync script would print for the commit c
// (no uncommitted work) and its bundle.
func answer(c string, bundle []byte) []byte {
	return append([]byte(c+" - "+c+"\n"), bundle...)
}

// hostState is what a refused sync must leave as it was.
type hostState struct {
	refs, head, status, config string
	files                      map[string]string
}

func snapshot(t *testing.T, dir string) hostState {
	t.Helper()
	s := hostState{
		refs:   sh(t, dir, "git for-each-ref --format='%(refname) %(objectname)'"),
		head:   sh(t, dir, "git symbolic-ref HEAD; git rev-parse HEAD"),
		status: sh(t, dir, "git --no-optional-locks status --porcelain --untracked-files=all --ignored"),
		files:  map[string]string{},
	}
	cfg, err := os.ReadFile(filepath.Join(dir, ".git", "config"))
	if err != nil {
		t.Fatal(err)
	}
	s.config = string(cfg)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == ".git" {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			v += " -> " + l
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += " " + string(b)
		}
		s.files[rel] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// assertSame fails unless after is before, but for newRefs (lines of
// for-each-ref that may appear).
func assertSame(t *testing.T, before, after hostState, newRefs ...string) {
	t.Helper()
	want := before.refs
	if len(newRefs) > 0 {
		lines := append(strings.Split(before.refs, "\n"), newRefs...)
		want = strings.Join(sortedLines(lines), "\n")
	}
	if got := strings.Join(sortedLines(strings.Split(after.refs, "\n")), "\n"); got != want {
		t.Errorf("host refs changed:\nbefore\n%s\nafter\n%s\nwant\n%s", before.refs, after.refs, want)
	}
	if before.head != after.head {
		t.Errorf("host HEAD changed: %q → %q", before.head, after.head)
	}
	if before.status != after.status {
		t.Errorf("host status changed:\n%s\n→\n%s", before.status, after.status)
	}
	if before.config != after.config {
		t.Errorf("host .git/config changed:\n%s\n→\n%s", before.config, after.config)
	}
	for f, v := range before.files {
		if after.files[f] != v {
			t.Errorf("host work tree: %s changed (%q → %q)", f, v, after.files[f])
		}
	}
	for f := range after.files {
		if _, ok := before.files[f]; !ok {
			t.Errorf("host work tree: %s appeared", f)
		}
	}
}

func sortedLines(l []string) []string {
	out := make([]string, 0, len(l))
	for _, s := range l {
		if s != "" {
			out = append(out, s)
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// refused syncs with sb and asserts the error is want (ErrUnsafe or
// ErrLimitExceeded) whose message matches reason, and that the host
// gained nothing. It returns the error.
func (h *hostile) refused(t *testing.T, sb Sandbox, want error, reason string) error {
	t.Helper()
	before := snapshot(t, h.host)
	_, err := h.r.Sync(context.Background(), sb)
	if !errors.Is(err, want) {
		t.Fatalf("sync: got %v, want %v", err, want)
	}
	if want == ErrUnsafe {
		var ue *UnsafeError
		if !errors.As(err, &ue) || strings.TrimSpace(ue.Reason) == "" {
			t.Fatalf("sync: %v is not an UnsafeError with a reason", err)
		}
	}
	if reason != "" && !regexp.MustCompile(reason).MatchString(err.Error()) {
		t.Errorf("sync: error %q does not match %q", err, reason)
	}
	assertSame(t, before, snapshot(t, h.host))
	h.assertNoHook(t)
	sh(t, h.host, "git fsck --strict --no-dangling --no-progress")
	return err
}

// accepted syncs with sb and asserts it succeeded, moving only the
// package's branch to tip.
func (h *hostile) accepted(t *testing.T, sb Sandbox, tip string) {
	t.Helper()
	before := snapshot(t, h.host)
	ch, err := h.r.Sync(context.Background(), sb)
	if err != nil {
		t.Fatalf("sync: %v", err)
	}
	if ch.Tip != tip {
		t.Fatalf("sync: tip %s, want %s", ch.Tip, tip)
	}
	assertSame(t, before, snapshot(t, h.host), "refs/heads/"+h.r.Branch()+" "+tip)
	h.assertNoHook(t)
	sh(t, h.host, "git fsck --strict --no-dangling --no-progress")
}

// checkDirect crafts the commit in a fresh quarantine, with no fsck on
// the way in, and returns what the package's own check says of its new
// objects.
func checkDirect(t *testing.T, h *hostile, script string, lim Limits) error {
	t.Helper()
	ctx := context.Background()
	objects := filepath.Join(h.host, ".git", "objects")
	q, err := newQuarantine(ctx, objects, "sha1")
	if err != nil {
		t.Fatal(err)
	}
	defer q.close()
	craftCommit(t, h.scratch, []string{"GIT_DIR=" + q.dir}, h.base, script)
	var oids []string
	dirs, _ := filepath.Glob(filepath.Join(q.dir, "objects", "[0-9a-f][0-9a-f]"))
	for _, d := range dirs {
		es, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			oids = append(oids, filepath.Base(d)+e.Name())
		}
	}
	if len(oids) == 0 {
		t.Fatal("no object crafted")
	}
	return check(ctx, q.git, q.hexLen, oids, lim.withDefaults())
}

// nest is a script for a tree holding dirs.../post-checkout, a hook.
func nest(dirs ...string) string {
	s := "hook=$(blob '#!/bin/sh\ntouch /tmp/sandbox-agent-pwned\n')\nt=$(tree \"100755 blob $hook\tpost-checkout\")\n"
	for i := len(dirs) - 1; i >= 0; i-- {
		s += fmt.Sprintf("t=$(tree \"040000 tree $t\t%s\")\n", dirs[i])
	}
	return s + "echo $t\n"
}

// gitmodules is a script for a tree with a .gitmodules of content.
func gitmodules(content string) string {
	return fmt.Sprintf("m=$(blob '%s')\ntree \"100644 blob $m\t.gitmodules\"\n", content)
}

// treeCase is a crafted commit's root tree and what must refuse it.
type treeCase struct {
	name   string
	script string // prints the root tree (craftLib's functions at hand)
	ours   string // what the package's own check says of it (a regexp); "" for an allowed tree
	limit  bool   // ErrLimitExceeded rather than ErrUnsafe
}

// runTreeCases syncs each case's commit through a crafted bundle (it
// must be refused, or accepted when ours is "") and gives the same
// objects to quarantine.check directly.
func runTreeCases(t *testing.T, lim Limits, cases []treeCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostile(t, lim)
			c := h.commit(t, tc.script)
			sb := crafted{answer(c, h.bundle(t, map[string]string{outRef: c}))}
			direct := checkDirect(t, h, tc.script, lim)
			if tc.ours == "" {
				if direct != nil {
					t.Fatalf("check: %v", direct)
				}
				h.accepted(t, sb, c)
				return
			}
			want := ErrUnsafe
			if tc.limit {
				want = ErrLimitExceeded
			}
			if !errors.Is(direct, want) || !regexp.MustCompile(tc.ours).MatchString(direct.Error()) {
				t.Errorf("check (no fsck before): got %v, want %v matching %q", direct, want, tc.ours)
			}
			err := h.refused(t, sb, want, "")
			by := "ours"
			if strings.Contains(err.Error(), "git refused the bundle") || strings.Contains(err.Error(), "git's fsck refused") {
				by = "git fsck"
			}
			t.Logf("refused by %s: %v", by, err)
		})
	}
}

// 1. A .git folder in the tree, in any of its spellings.
func TestHostileDotGit(t *testing.T) {
	dotgit := "a .git folder"
	runTreeCases(t, Limits{}, []treeCase{
		{"sub/.git/hooks", nest("sub", ".git", "hooks"), dotgit, false},
		{".git/hooks", nest(".git", "hooks"), dotgit, false},
		{".GIT/hooks", nest(".GIT", "hooks"), dotgit, false},
		{"sub/.GiT/hooks", nest("sub", ".GiT", "hooks"), dotgit, false},
		{"sub/.git space/hooks", nest("sub", ".git ", "hooks"), dotgit, false},
		{"sub/.git dot/hooks", nest("sub", ".git.", "hooks"), dotgit, false},
		{"sub/git~1/hooks", nest("sub", "git~1", "hooks"), dotgit, false},
		{"sub/GIT~1/hooks", nest("sub", "GIT~1", "hooks"), dotgit, false},
		{"sub/.g-zwnj-it/hooks", nest("sub", ".g\u200cit", "hooks"), dotgit, false},
		{"sub/.git::$INDEX_ALLOCATION", nest("sub", ".git::$INDEX_ALLOCATION", "hooks"), dotgit, false},
		{"sub/.git file", "b=$(blob x)\ns=$(tree \"100644 blob $b\t.git\")\ntree \"040000 tree $s\tsub\"\n", dotgit, false},
		{"dot-dot name", "b=$(blob x)\ntree \"100644 blob $b\t..\"\n", `tree entry named "\.\."`, false},
		{"backslash name", "b=$(blob x)\ntree \"100644 blob $b\t.git\\\\hooks\"\n", "path separator", false},
	})
}

// 3. Symlinks out of the repository, and ones that stay in.
func TestHostileSymlink(t *testing.T) {
	runTreeCases(t, Limits{}, []treeCase{
		{"absolute", "l=$(blob /etc/passwd)\ntree \"120000 blob $l\tl\"\n", "absolute path", false},
		{"top ../../x", "l=$(blob ../../x)\ntree \"120000 blob $l\tl\"\n", "points out of the repository", false},
		{"top ..", "l=$(blob ..)\ntree \"120000 blob $l\tl\"\n", "points out of the repository", false},
		{"a/b ../../..", "l=$(blob ../../..)\nb=$(tree \"120000 blob $l\tb\")\ntree \"040000 tree $b\ta\"\n", "points out of the repository", false},
		{"deep a/b/c/d ../../../../x", "l=$(blob ../../../../x)\nt=$(tree \"120000 blob $l\td\")\nt=$(tree \"040000 tree $t\tc\")\nt=$(tree \"040000 tree $t\tb\")\ntree \"040000 tree $t\ta\"\n", "points out of the repository", false},
		{"sub/l x/../../y", "l=$(blob x/../../y)\ns=$(tree \"120000 blob $l\tl\")\ntree \"040000 tree $s\tsub\"\n", "climbs after it descends", false},
		{"windows drive", "l=$(blob 'C:/Windows')\ntree \"120000 blob $l\tl\"\n", "absolute path", false},
		{"empty target", "l=$(blob '')\ntree \"120000 blob $l\tl\"\n", "empty symlink target", false},
		{"allowed sub/l ../a.txt", "a=$(blob one)\nl=$(blob ../a.txt)\ns=$(tree \"120000 blob $l\tl\")\ntree \"100644 blob $a\ta.txt\" \"040000 tree $s\tsub\"\n", "", false},
		{"allowed a/b/l ../../a.txt", "a=$(blob one)\nl=$(blob ../../a.txt)\nt=$(tree \"120000 blob $l\tl\")\nt=$(tree \"040000 tree $t\tb\")\ntree \"100644 blob $a\ta.txt\" \"040000 tree $t\ta\"\n", "", false},
	})
}

// 5. .gitmodules that a later "git submodule update" would turn into a
// command.
func TestHostileGitmodules(t *testing.T) {
	runTreeCases(t, Limits{}, []treeCase{
		{"ext:: url", gitmodules("[submodule \"x\"]\n\tpath = x\n\turl = ext::sh -c touch% /tmp/sandbox-agent-pwned\n"), `transport|not allowed`, false},
		{"fd:: url", gitmodules("[submodule \"x\"]\n\tpath = x\n\turl = fd::3\n"), `not allowed`, false},
		{"update !cmd", gitmodules("[submodule \"x\"]\n\tpath = x\n\turl = https://example.com/x\n\tupdate = !touch /tmp/sandbox-agent-pwned\n"), `update runs the command`, false},
		{"url -option", gitmodules("[submodule \"x\"]\n\tpath = x\n\turl = -u./payload\n"), `is an option`, false},
		{"ssh host -option", gitmodules("[submodule \"x\"]\n\tpath = x\n\turl = ssh://-oProxyCommand=touch/x\n"), `host is an option`, false},
		{"path climbs", gitmodules("[submodule \"x\"]\n\tpath = ../x\n\turl = https://example.com/x\n"), `path`, false},
		{"name climbs", gitmodules("[submodule \"../../x\"]\n\tpath = x\n\turl = https://example.com/x\n"), `submodule name`, false},
		{".gitmodules symlink", "l=$(blob /etc/passwd-gitmodules)\ntree \"120000 blob $l\t.gitmodules\"\n", `\.gitmodules is a symlink`, false},
		{".GITMODULES symlink", "l=$(blob sub/x)\ntree \"120000 blob $l\t.GITMODULES\"\n", `\.gitmodules is a symlink`, false},
		{"allowed https and relative", gitmodules("[submodule \"x\"]\n\tpath = x\n\turl = https://example.com/x\n[submodule \"y\"]\n\tpath = y\n\turl = ../y\n"), "", false},
	})
}

// 4. A blob past the cap.
func TestHostileBlobCap(t *testing.T) {
	lim := Limits{MaxBlobBytes: 1 << 20}
	big := "head -c 2097152 /dev/zero | tr '\\0' x > big\nb=$(git hash-object -w --literally big)\nrm big\ntree \"100644 blob $b\tbig\"\n"
	runTreeCases(t, lim, []treeCase{
		{"2MiB blob over 1MiB", big, `over the cap of 1048576`, true},
		{"1MiB blob at the cap", "head -c 1048576 /dev/zero | tr '\\0' x > big\nb=$(git hash-object -w --literally big)\nrm big\ntree \"100644 blob $b\tbig\"\n", "", false},
	})
}

// 4. The bundle's byte cap.
func TestHostileByteCap(t *testing.T) {
	h := newHostile(t, Limits{MaxBytes: 64 << 10})
	c := h.commit(t, "head -c 2097152 /dev/urandom > big\nb=$(git hash-object -w big)\nrm big\ntree \"100644 blob $b\tbig\"\n")
	b := h.bundle(t, map[string]string{outRef: c})
	if len(b) < 1<<20 {
		t.Fatalf("bundle of %d bytes", len(b))
	}
	h.refused(t, crafted{answer(c, b)}, ErrLimitExceeded, "over|passed the cap of 65536")
	// An endless stream is cut at the cap too.
	junk := make([]byte, 8<<20)
	rand.Read(junk)
	h.refused(t, crafted{answer(c, junk)}, ErrLimitExceeded, "cap of 65536")
}

// 4. The object-count cap.
func TestHostileObjectCap(t *testing.T) {
	h := newHostile(t, Limits{MaxObjects: 5})
	script := "set --\nfor i in 1 2 3 4 5 6 7 8 9 10; do b=$(blob \"file $i\"); set -- \"$@\" \"100644 blob $b\tf$i\"; done\ntree \"$@\"\n"
	c := h.commit(t, script)
	h.refused(t, crafted{answer(c, h.bundle(t, map[string]string{outRef: c}))}, ErrLimitExceeded, "12 objects, over the cap of 5")
}

// 2. A bundle carrying refs other than the one it may.
func TestHostileBundleRefs(t *testing.T) {
	tree := "a=$(blob agent)\ntree \"100644 blob $a\ta.txt\"\n"
	for _, tc := range []struct {
		name string
		refs []string
	}{
		{"tag", []string{"refs/tags/v1"}},
		{"tag beside out", []string{outRef, "refs/tags/v1"}},
		{"remote", []string{"refs/remotes/origin/x"}},
		{"heads/main", []string{"refs/heads/main"}},
		{"heads/main beside out", []string{outRef, "refs/heads/main"}},
		{"two refs, neither out", []string{"refs/heads/x", "refs/heads/y"}},
		{"HEAD", []string{"HEAD"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostile(t, Limits{})
			c := h.commit(t, tree)
			refs := map[string]string{}
			for _, r := range tc.refs {
				refs[r] = c
			}
			h.refused(t, crafted{answer(c, h.bundle(t, refs))}, ErrUnsafe, "must carry exactly "+outRef)
		})
	}
	// A ref in the bundle's header that is not the one out: patched by
	// hand, the header would still name the commit.
	t.Run("header ref renamed", func(t *testing.T) {
		h := newHostile(t, Limits{})
		c := h.commit(t, tree)
		b := bytes.Replace(h.bundle(t, map[string]string{outRef: c}), []byte(outRef), []byte("refs/heads/sandbox-agent/x"), 1)
		h.refused(t, crafted{answer(c, b)}, ErrUnsafe, "must carry exactly")
	})
	t.Run("prerequisite the host lacks", func(t *testing.T) {
		h := newHostile(t, Limits{})
		c := h.commit(t, tree)
		b := h.bundle(t, map[string]string{outRef: c})
		b = bytes.Replace(b, []byte("-"+h.base), []byte("-"+strings.Repeat("7", 40)), 1)
		h.refused(t, crafted{answer(c, b)}, ErrUnsafe, "builds on a commit the host does not have")
	})
}

// 7. A forged answer line.
func TestHostileAnswerLine(t *testing.T) {
	tree := "a=$(blob agent)\ntree \"100644 blob $a\ta.txt\"\n"
	h := newHostile(t, Limits{})
	c := h.commit(t, tree)
	other := h.commit(t, "a=$(blob other)\ntree \"100644 blob $a\tb.txt\"\n")
	b := h.bundle(t, map[string]string{outRef: c})
	unknown := strings.Repeat("7", 40)
	for _, tc := range []struct {
		name   string
		out    []byte
		reason string
	}{
		{"tip not the bundle's", append([]byte(other+" - "+other+"\n"), b...), "not the commit the sandbox named"},
		{"tip is the base, bundle of another", append([]byte(h.base+" - "+h.base+"\n"), b...), "not the commit the sandbox named"},
		{"garbage", append([]byte("hello world\n"), b...), "the sandbox answered"},
		{"four fields", append([]byte(c+" - "+c+" x\n"), b...), "the sandbox answered"},
		{"short ids", append([]byte(c[:12]+" - "+c[:12]+"\n"), b...), "the sandbox answered"},
		{"upper-case ids", append([]byte(strings.ToUpper(c)+" - "+strings.ToUpper(c)+"\n"), b...), "the sandbox answered"},
		{"wip not the tip", append([]byte(c+" "+other+" "+c+"\n"), b...), "the sandbox answered"},
		{"head not the tip", append([]byte(h.base+" - "+c+"\n"), b...), "the tip is not the agent's HEAD"},
		{"wip not on head", append([]byte(unknown+" "+c+" "+c+"\n"), b...), "does not sit on the agent's HEAD"},
		{"no newline", []byte(c + " - " + c), "the sandbox answered"},
		{"empty", nil, "the sandbox answered"},
		{"line too long", bytes.Repeat([]byte("a"), 600), "answer line is too long"},
		{"long line with a late newline", append(bytes.Repeat([]byte("a"), 4000), '\n'), "answer line is too long"},
		{"no bundle for an unknown tip", []byte(unknown + " - " + unknown + "\n"), "sent no bundle"},
		{"not a bundle", append([]byte(c+" - "+c+"\n"), []byte("# v2 git bundle\nnonsense\n\n")...), "bundle line"},
		{"bundle v9", append([]byte(c+" - "+c+"\n"), []byte("# v9 git bundle\n\nPACK")...), "not a git bundle"},
		{"bundle without pack", append([]byte(c+" - "+c+"\n"), []byte("# v2 git bundle\n"+c+" "+outRef+"\n\n")...), "no pack"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.refused(t, crafted{tc.out}, ErrUnsafe, tc.reason)
		})
	}
	// The right answer still goes through after all that.
	h.accepted(t, crafted{answer(c, b)}, c)
}

// 6. The sandbox repository's own config names hooks, an fsmonitor and a
// clean filter: the sync script's git must run none of them.
func TestHostileSandboxConfig(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config string // git config commands run in the sandbox
		ran    bool   // the sandbox's program is expected to run (see below)
	}{
		{"core.hooksPath", `git config core.hooksPath "$HOOKS"`, false},
		{"hooks in .git/hooks", `mkdir -p .git/hooks; cp "$HOOKS"/* .git/hooks/`, false},
		{"core.fsmonitor", `git config core.fsmonitor "$HOOKS/fsmonitor"`, false},
		// No -c can turn off every filter driver: a clean filter the
		// agent configured runs in the sandbox, as any of its programs
		// may. It runs there only: the host's marker stays absent.
		{"filter.x.clean", `git config filter.x.clean "sh $HOOKS/filter"; echo '* filter=x' > .gitattributes`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostile(t, Limits{})
			hooks := t.TempDir()
			sbMarker := filepath.Join(t.TempDir(), "sandbox-program-ran")
			for _, name := range []string{"pre-commit", "post-commit", "reference-transaction", "post-index-change", "pre-auto-gc", "fsmonitor"} {
				s := fmt.Sprintf("#!/bin/sh\necho %s >> '%s'\n", name, sbMarker)
				if err := os.WriteFile(filepath.Join(hooks, name), []byte(s), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(hooks, "filter"), []byte(fmt.Sprintf("echo filter >> '%s'\ncat\n", sbMarker)), 0o644); err != nil {
				t.Fatal(err)
			}
			shEnv(t, h.sbDir, []string{"HOOKS=" + hooks}, tc.config+"\necho agent >> a.txt; echo new > n.txt; git add n.txt; git -c core.hooksPath=/dev/null -c core.fsmonitor=false commit -qm agent; echo more > m.txt")
			// The witness: the same config does run the program for a
			// git without the hardening.
			probe := filepath.Join(t.TempDir(), "probe")
			shEnv(t, "/", nil, "cp -a '"+h.sbDir+"' '"+probe+"'")
			shEnv(t, probe, nil, "echo probe >> m.txt; git add -A; git commit -qm probe; git update-ref refs/probe HEAD")
			if _, err := os.Stat(sbMarker); err != nil {
				t.Fatalf("the sandbox's %s did not run even without the hardening", tc.name)
			}
			os.Remove(sbMarker)

			before := snapshot(t, h.host)
			ch, err := h.r.Sync(context.Background(), local{h.sbDir})
			if err != nil {
				t.Fatalf("sync: %v", err)
			}
			if !ch.Uncommitted {
				t.Errorf("sync: %+v", ch)
			}
			_, statErr := os.Stat(sbMarker)
			if ran := statErr == nil; ran != tc.ran {
				b, _ := os.ReadFile(sbMarker)
				t.Errorf("the sandbox's program ran: %v, want %v (%s)", ran, tc.ran, b)
			}
			assertSame(t, before, snapshot(t, h.host), "refs/heads/"+h.r.Branch()+" "+ch.Tip)
			h.assertNoHook(t)
			sh(t, h.host, "git fsck --strict --no-dangling --no-progress")
		})
	}
}

// A refused bundle's objects are gone with it: a later bundle that names
// them without carrying them (only a commit on a tree the first one
// brought) is refused, not taken unjudged.
func TestHostileRefusedObjectsNotReused(t *testing.T) {
	h := newHostile(t, Limits{})
	tree := shEnv(t, h.scratch, nil, craftLib+"l=$(blob /etc/passwd)\ntree \"120000 blob $l\tl\"\n")
	c1 := sh(t, h.scratch, "git commit-tree -p "+h.base+" -m one "+tree)
	h.refused(t, crafted{answer(c1, h.bundle(t, map[string]string{outRef: c1}))}, ErrUnsafe, "absolute path")

	// A pack of the second commit alone, in a bundle made by hand.
	c2 := sh(t, h.scratch, "git commit-tree -p "+h.base+" -m two "+tree)
	pack := filepath.Join(t.TempDir(), "p.pack")
	sh(t, h.scratch, "echo "+c2+" | git pack-objects -q --stdout > '"+pack+"'")
	p, err := os.ReadFile(pack)
	if err != nil {
		t.Fatal(err)
	}
	b := append([]byte("# v2 git bundle\n-"+h.base+" base\n"+c2+" "+outRef+"\n\n"), p...)
	h.refused(t, crafted{answer(c2, b)}, ErrUnsafe, "does not hold everything|did not receive expected object")
}

// A delta that makes an object past the blob cap is refused before git
// resolves it (a pack of a few kilobytes can ask for gigabytes).
func TestHostileDeltaBomb(t *testing.T) {
	h := newHostile(t, Limits{MaxBlobBytes: 1 << 20})
	// Two blobs: 512 KiB of zeros, and 4 MiB of them, which git packs as
	// a small delta on the first.
	c := h.commit(t, `a=$(head -c 524288 /dev/zero | git hash-object -w --stdin)
b=$(head -c 4194304 /dev/zero | git hash-object -w --stdin)
tree "100644 blob $a	a" "100644 blob $b	b"`)
	bundle := h.bundle(t, map[string]string{outRef: c})
	if len(bundle) > 64<<10 {
		t.Fatalf("the bundle is %d bytes: no delta bomb", len(bundle))
	}
	h.refused(t, crafted{answer(c, bundle)}, ErrLimitExceeded, "over the cap")
}
