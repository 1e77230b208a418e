package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandbox-agent/sandbox-agent/internal/gittest"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/repo"
)

// gitRepo makes a work tree at dir with one commit.
func gitRepo(t *testing.T, dir string) {
	t.Helper()
	gittest.Need(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "one"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
}

// repoServer serves with a starter that records the requests it gets
// and fails (no engine here).
func repoServer(t *testing.T, opts ...func(*Options)) (func(body string) (int, errorBody), func() []CreateRequest) {
	t.Helper()
	var mu sync.Mutex
	var got []CreateRequest
	ts := newTestServer(t, nil, append([]func(*Options){func(o *Options) {
		o.MaxBodyBytes = 1 << 20
		o.Start = func(ctx context.Context, req CreateRequest) (*sandboxagent.Agent, func(), error) {
			mu.Lock()
			got = append(got, req)
			mu.Unlock()
			if req.RepoDir != "" {
				if _, err := os.Stat(req.RepoDir); err != nil {
					return nil, nil, fmt.Errorf("the repository is not there: %w", err)
				}
			}
			return nil, nil, fmt.Errorf("%w: no engine in this test", sandboxagent.ErrUnsupported)
		}
	}}, opts...)...)
	create := func(body string) (int, errorBody) {
		return call(t, ts, "POST", "/v1/agents", "Bearer "+testToken, body)
	}
	return create, func() []CreateRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]CreateRequest(nil), got...)
	}
}

func repoBody(r map[string]any) string {
	b, _ := json.Marshal(map[string]any{"driver": "pi", "repo": r})
	return string(b)
}

// TestCreateRepoChecks: a create request's repo is checked before
// anything starts: one of path and bundle, path only under the server's
// root (symlinks followed) and at a repository's top.
func TestCreateRepoChecks(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	gitRepo(t, filepath.Join(root, "proj"))
	gitRepo(t, filepath.Join(base, "outside"))
	if err := os.Symlink(filepath.Join(base, "outside"), filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "proj"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "proj", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Repositories whose git would reach outside the folder named.
	gitRepo(t, filepath.Join(root, "worktree-elsewhere"))
	gittest.Run(t, filepath.Join(root, "worktree-elsewhere"), "config", "core.worktree", filepath.Join(base, "outside"))
	gitRepo(t, filepath.Join(root, "borrows"))
	if err := os.WriteFile(filepath.Join(root, "borrows", ".git", "objects", "info", "alternates"), []byte(filepath.Join(base, "outside", ".git", "objects")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "gitfile"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "gitfile", ".git"), []byte("gitdir: "+filepath.Join(base, "outside", ".git")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "gitlink"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "outside", ".git"), filepath.Join(root, "gitlink", ".git")); err != nil {
		t.Fatal(err)
	}
	// A .git folder whose commondir names another repository's, and one
	// whose objects are a link to another's.
	if err := os.MkdirAll(filepath.Join(root, "commondir", ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"HEAD": "ref: refs/heads/main\n", "commondir": filepath.Join(base, "outside", ".git") + "\n"} {
		if err := os.WriteFile(filepath.Join(root, "commondir", ".git", name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitRepo(t, filepath.Join(root, "objlink"))
	if err := os.RemoveAll(filepath.Join(root, "objlink", ".git", "objects")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "outside", ".git", "objects"), filepath.Join(root, "objlink", ".git", "objects")); err != nil {
		t.Fatal(err)
	}
	// The uploaded bundles' folder under the root: not a path to name.
	gitRepo(t, filepath.Join(root, "uploads", "ag_x.git"))
	create, got := repoServer(t, func(o *Options) { o.RepoRoot, o.RepoDir = root, filepath.Join(root, "uploads") })
	for _, tt := range []struct {
		name string
		repo map[string]any
		with string // in the message
	}{
		{"neither", map[string]any{}, "exactly one"},
		{"both", map[string]any{"path": "proj", "bundle": "eA=="}, "exactly one"},
		{"negative depth", map[string]any{"path": "proj", "depth": -1}, "depth"},
		{"bundle with worktree", map[string]any{"bundle": "eA==", "worktree": true}, "worktree"},
		{"outside the root", map[string]any{"path": filepath.Join(base, "outside")}, "outside serve_repo_root"},
		{"dot-dot", map[string]any{"path": "../outside"}, "outside serve_repo_root"},
		{"a symlink out", map[string]any{"path": filepath.Join(root, "escape")}, "outside serve_repo_root"},
		{"missing", map[string]any{"path": "nope"}, "no such folder"},
		{"not the top", map[string]any{"path": "proj/sub"}, "not the top of a git repository"},
		{"the root itself", map[string]any{"path": root}, "not the top of a git repository"},
		{"core.worktree elsewhere", map[string]any{"path": "worktree-elsewhere"}, "leads outside"},
		{"a commondir file", map[string]any{"path": "commondir"}, "leads outside"},
		{"objects through a symlink", map[string]any{"path": "objlink"}, "leads outside"},
		{"alternates", map[string]any{"path": "borrows"}, "borrows objects"},
		{"a gitfile", map[string]any{"path": "gitfile"}, "not the top of a git repository"},
		{"a .git symlink", map[string]any{"path": "gitlink"}, "not the top of a git repository"},
		{"an uploaded repository", map[string]any{"path": "uploads/ag_x.git"}, "uploaded repository"},
	} {
		code, e := create(repoBody(tt.repo))
		if code != http.StatusBadRequest || e.Kind != KindInvalidArgument || !strings.Contains(e.Error, tt.with) {
			t.Errorf("%s: %d %+v, want 400 with %q", tt.name, code, e, tt.with)
		}
	}
	if code, e := create(`{"driver":"pi","repo":{"bundle":"not base64!"}}`); code != http.StatusBadRequest || e.Kind != KindInvalidArgument {
		t.Errorf("bad base64: %d %+v", code, e)
	}
	if code, e := create(`{"driver":"pi","checkpoint":"ck-00","repo":{"path":"proj"}}`); code != http.StatusBadRequest || !strings.Contains(e.Error, "checkpoint") {
		t.Errorf("repo with checkpoint: %d %+v", code, e)
	}
	if n := len(got()); n != 0 {
		t.Fatalf("the starter ran %d times on refused requests", n)
	}
	// Accepted: relative, absolute and through a symlink inside the root,
	// the starter gets the resolved folder and the options.
	want, _ := filepath.EvalSymlinks(filepath.Join(root, "proj"))
	for _, p := range []string{"proj", filepath.Join(root, "proj"), "link"} {
		code, e := create(repoBody(map[string]any{"path": p, "depth": 3, "worktree": true, "branch": "b", "author_name": "A", "author_email": "a@x"}))
		if code != http.StatusNotImplemented {
			t.Fatalf("path %s: %d %+v, want the starter's 501", p, code, e)
		}
		reqs := got()
		req := reqs[len(reqs)-1]
		if req.RepoDir != want || req.Repo.Path != p || req.Repo.options() != (repo.Options{Depth: 3, Worktree: true, Branch: "b", AuthorName: "A", AuthorEmail: "a@x"}) {
			t.Errorf("path %s: starter got %q %+v", p, req.RepoDir, req.Repo)
		}
	}
}

// TestCreateRepoNoRoot: without serve_repo_root, repo.path is refused;
// without a folder for them, bundles are.
func TestCreateRepoNoRoot(t *testing.T) {
	create, got := repoServer(t)
	code, e := create(repoBody(map[string]any{"path": "/tmp"}))
	if code != http.StatusBadRequest || !strings.Contains(e.Error, "serve_repo_root is not set") {
		t.Errorf("path without a root: %d %+v", code, e)
	}
	code, e = create(repoBody(map[string]any{"bundle": "eA=="}))
	if code != http.StatusNotImplemented || e.Kind != KindUnsupported {
		t.Errorf("bundle without RepoDir: %d %+v", code, e)
	}
	if n := len(got()); n != 0 {
		t.Errorf("the starter ran %d times", n)
	}
}

// TestCreateRepoBundle: an uploaded bundle is unpacked into a bare
// repository of the agent's, which the starter gets, and which goes when
// the start fails; a bundle that is not one is refused (422).
func TestCreateRepoBundle(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	gitRepo(t, src)
	bundle := filepath.Join(base, "x.bundle")
	cmd := exec.Command("git", "bundle", "create", "-q", bundle, "main")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git bundle: %v: %s", err, out)
	}
	data, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	repos := filepath.Join(base, "repos")
	create, got := repoServer(t, func(o *Options) { o.RepoDir = repos })
	code, e := create(repoBody(map[string]any{"bundle": base64.StdEncoding.EncodeToString(data), "depth": 1}))
	if code != http.StatusNotImplemented {
		t.Fatalf("bundle: %d %+v, want the starter's 501 (its repository was there)", code, e)
	}
	reqs := got()
	if len(reqs) != 1 || filepath.Dir(reqs[0].RepoDir) != repos || !strings.HasSuffix(reqs[0].RepoDir, ".git") || reqs[0].Repo.Depth != 1 {
		t.Fatalf("starter got %+v", reqs)
	}
	if len(reqs[0].Repo.Bundle) != 0 {
		t.Error("the starter got the bundle's bytes too (they are in RepoDir)")
	}
	left, _ := os.ReadDir(repos)
	if len(left) != 0 {
		t.Errorf("after a failed start %s holds %v", repos, left)
	}
	code, e = create(repoBody(map[string]any{"bundle": base64.StdEncoding.EncodeToString([]byte("# v2 git bundle\nnonsense\n"))}))
	if code != http.StatusUnprocessableEntity || e.Kind != KindUnsafeArchive {
		t.Errorf("a bad bundle: %d %+v, want 422 unsafe_archive", code, e)
	}
	if n := len(got()); n != 1 {
		t.Errorf("the starter ran on a bad bundle")
	}
}

// TestStoredRequestNoBundle: the store keeps the request's repo, not the
// bundle's bytes.
func TestStoredRequestNoBundle(t *testing.T) {
	req := CreateRequest{Driver: "pi", Repo: &RepoRequest{Bundle: []byte("xyz"), Branch: "b"}}
	s := stored(req)
	if s.Repo == nil || s.Repo.Bundle != nil || s.Repo.Branch != "b" || len(req.Repo.Bundle) != 3 {
		t.Errorf("stored %+v (the original %+v)", s.Repo, req.Repo)
	}
	b, _ := json.Marshal(s)
	if strings.Contains(string(b), "bundle") || strings.Contains(string(b), "RepoDir") {
		t.Errorf("stored JSON %s", b)
	}
}

func TestClassifyRepo(t *testing.T) {
	for _, tt := range []struct {
		err    error
		status int
		kind   string
	}{
		{fmt.Errorf("x: %w", repo.ErrNotRepository), 400, KindInvalidArgument},
		{&repo.UnsafeError{Reason: "bad"}, 422, KindUnsafeArchive},
		{fmt.Errorf("x: %w", repo.ErrLimitExceeded), 422, KindTooLarge},
		{fmt.Errorf("x: %w", repo.ErrBranchExists), 409, KindConflict},
		{fmt.Errorf("x: %w in the sandbox's image", repo.ErrNoGit), 422, KindDriverError},
		{fmt.Errorf("%w: branch", sandboxagent.ErrInvalidArgument), 400, KindInvalidArgument},
	} {
		status, body := classify(tt.err)
		if status != tt.status || body.Kind != tt.kind {
			t.Errorf("classify(%v) = %d %s, want %d %s", tt.err, status, body.Kind, tt.status, tt.kind)
		}
	}
	if !errors.Is(repo.ErrLimitExceeded, sandboxagent.ErrLimitExceeded) {
		t.Error("repo.ErrLimitExceeded is not the library's")
	}
}

// TestCreateRepoTenants: a tenant's repo.path is taken under its own
// folder of serve_repo_root; another tenant's repositories (and the
// root's own) are out of its reach; the admin's reach the whole root.
func TestCreateRepoTenants(t *testing.T) {
	root := t.TempDir()
	gitRepo(t, filepath.Join(root, "team-a", "proj"))
	gitRepo(t, filepath.Join(root, "team-b", "proj"))
	gitRepo(t, filepath.Join(root, "shared"))
	st := testStore(t)
	var got []string
	var mu sync.Mutex
	ts := newTestServer(t, nil, func(o *Options) {
		o.Store, o.RepoRoot = st, root
		o.Start = func(ctx context.Context, req CreateRequest) (*sandboxagent.Agent, func(), error) {
			mu.Lock()
			got = append(got, req.RepoDir)
			mu.Unlock()
			return nil, nil, fmt.Errorf("%w: no engine in this test", sandboxagent.ErrUnsupported)
		}
	})
	a := "Bearer " + newToken(t, st, "team-a", 0, ScopeAgents)
	for _, tc := range []struct {
		auth, path string
		ok         bool
		want       string
	}{
		{a, "proj", true, filepath.Join(root, "team-a", "proj")},
		{a, filepath.Join(root, "team-a", "proj"), true, filepath.Join(root, "team-a", "proj")},
		{a, "../team-b/proj", false, ""},
		{a, filepath.Join(root, "team-b", "proj"), false, ""},
		{a, filepath.Join(root, "shared"), false, ""},
		{"Bearer " + testToken, "team-b/proj", true, filepath.Join(root, "team-b", "proj")},
		{"Bearer " + testToken, "shared", true, filepath.Join(root, "shared")},
	} {
		mu.Lock()
		got = nil
		mu.Unlock()
		code, e := call(t, ts, "POST", "/v1/agents", tc.auth, repoBody(map[string]any{"path": tc.path}))
		mu.Lock()
		n := len(got)
		dir := ""
		if n > 0 {
			dir = got[0]
		}
		mu.Unlock()
		want, _ := filepath.EvalSymlinks(tc.want)
		switch {
		case tc.ok && (code != http.StatusNotImplemented || dir != want):
			t.Errorf("%s: %d %+v, starter got %q; want the starter with %s", tc.path, code, e, dir, want)
		case !tc.ok && (code != http.StatusBadRequest || n != 0 || !strings.Contains(e.Error, "outside serve_repo_root")):
			t.Errorf("%s: %d %+v (starter ran %d times); want 400 outside", tc.path, code, e, n)
		}
	}
}
