package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/repo"
	"github.com/sandbox-agent/sandbox-agent/store"
)

// RepoRequest is the create request's repo: a git repository put in the
// sandbox's working directory (sandboxagent.WithRepo), whose changes
// GET /v1/agents/{id}/changes brings home. Field names are a public
// interface.
type RepoRequest struct {
	// Path is a repository on the server's host, under its
	// Options.RepoRoot (config key serve_repo_root); relative paths are
	// taken from there. Exactly one of Path and Bundle.
	Path string `json:"path,omitempty"`
	// Bundle is a git bundle of the repository (base64 in JSON), kept
	// on the server as a bare repository of the agent's until it is
	// deleted.
	Bundle []byte `json:"bundle,omitempty"`
	// The rest are repo.Options'.
	Depth       int    `json:"depth,omitempty"`
	Worktree    bool   `json:"worktree,omitempty"`
	Branch      string `json:"branch,omitempty"`
	AuthorName  string `json:"author_name,omitempty"`
	AuthorEmail string `json:"author_email,omitempty"`
}

// options are the repo.Options the request asks for (changes as a
// branch: the server's syncs move a branch of the repository).
func (r *RepoRequest) options() repo.Options {
	return repo.Options{Depth: r.Depth, Worktree: r.Worktree, Branch: r.Branch, AuthorName: r.AuthorName, AuthorEmail: r.AuthorEmail}
}

// checkRepo validates the create request's repo before anything is made.
func (s *Server) checkRepo(req *CreateRequest) error {
	rr := req.Repo
	if rr == nil {
		return nil
	}
	switch {
	case (rr.Path == "") == (len(rr.Bundle) == 0):
		return badRequest("repo: give exactly one of path and bundle")
	case rr.Depth < 0:
		return badRequest("repo.depth: %d: want 0 (all) or more", rr.Depth)
	case len(rr.Bundle) > 0 && rr.Worktree:
		return badRequest("repo.worktree: a bundle has no working tree (it is a repository's history)")
	case req.Checkpoint != "":
		return badRequest("repo: not with checkpoint (the checkpoint's files hold the repository it was made with)")
	case len(rr.Bundle) > 0 && s.opts.RepoDir == "":
		return &apiError{status: http.StatusNotImplemented, kind: KindUnsupported, msg: "repo.bundle: this server keeps no uploaded repositories"}
	}
	return nil
}

// repoPath resolves a request's repo.path under Options.RepoRoot — a
// tenant's under its own folder there (<root>/<tenant>), the admin's
// anywhere under it: its symlinks followed, the result must be inside
// that folder, outside the uploaded bundles' (RepoDir), and the top of a
// repository (a .git folder, or a bare repository), whose git finds no
// work tree or objects elsewhere (core.worktree, a gitfile, alternates).
func (s *Server) repoPath(ctx context.Context, p, tenant string) (dir, within string, err error) {
	if s.opts.RepoRoot == "" {
		return "", "", badRequest("repo.path: this server takes no repository paths (its config key serve_repo_root is not set); send the repository as repo.bundle")
	}
	root, err := filepath.EvalSymlinks(s.opts.RepoRoot)
	if err != nil {
		return "", "", fmt.Errorf("serve_repo_root: %w", err)
	}
	if tenant != AdminTenant {
		if tenant == "" || tenant != filepath.Base(tenant) || tenant == "." || tenant == ".." {
			return "", "", badRequest("repo.path: tenant %q has no folder under serve_repo_root", tenant)
		}
		if root, err = filepath.EvalSymlinks(filepath.Join(root, tenant)); err != nil {
			return "", "", badRequest("repo.path: tenant %s has no folder under serve_repo_root (%s/%s)", tenant, s.opts.RepoRoot, tenant)
		}
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(root, p)
	}
	resolved, err := filepath.EvalSymlinks(filepath.Clean(p))
	if err != nil {
		return "", "", badRequest("repo.path %q: no such folder under serve_repo_root", p)
	}
	rel, err := filepath.Rel(root, resolved)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", "", badRequest("repo.path %q is outside serve_repo_root", p)
	}
	if st, err := os.Stat(resolved); err != nil || !st.IsDir() {
		return "", "", badRequest("repo.path %q: not a folder", p)
	}
	if s.opts.RepoDir != "" {
		if bundles, err := filepath.EvalSymlinks(s.opts.RepoDir); err == nil {
			if rel, err := filepath.Rel(bundles, resolved); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
				return "", "", badRequest("repo.path %q is an uploaded repository's folder", p)
			}
		}
	}
	gitDir, ok := repoTop(resolved)
	if !ok {
		return "", "", badRequest("repo.path %q: not the top of a git repository (a folder holding a .git folder, or a bare repository)", p)
	}
	// What git itself makes of the folder: the same folder (no
	// core.worktree elsewhere, no climbing to a repository above), and
	// nothing of it (git folder, objects, refs) outside the tenant's
	// folder. Start opens it again with the same confinement.
	r, err := repo.Open(ctx, resolved, "probe", repo.Options{Branch: "sandbox-agent/probe", Within: root})
	if err != nil {
		return "", "", fmt.Errorf("repo.path %q: %w", p, err)
	}
	top := r.Dir()
	r.Close()
	if top != resolved && top != gitDir {
		return "", "", badRequest("repo.path %q: git finds the repository's work tree elsewhere (core.worktree)", p)
	}
	return resolved, root, nil
}

// repoTop says whether dir is the top of a work tree (it holds a .git
// folder: not a symlink, not a gitfile naming another) or a bare
// repository (HEAD, objects and refs), and names its git folder.
func repoTop(dir string) (string, bool) {
	if st, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
		return filepath.Join(dir, ".git"), st.IsDir()
	}
	for _, n := range []string{"HEAD", "objects", "refs"} {
		if st, err := os.Lstat(filepath.Join(dir, n)); err != nil || st.Mode()&os.ModeSymlink != 0 {
			return "", false
		}
	}
	return dir, true
}

// bundleDir is the bare repository an agent's uploaded bundle is kept in.
func (s *Server) bundleDir(id string) string {
	return filepath.Join(s.opts.RepoDir, id+".git")
}

// prepareRepo makes the repository of the create request of agent id
// ready for the Starter (req.RepoDir): the path resolved, or the bundle
// unpacked into the agent's bare repository. cleanup removes what it
// made (a failed start).
func (s *Server) prepareRepo(ctx context.Context, id string, req *CreateRequest) (cleanup func(), err error) {
	cleanup = func() {}
	rr := req.Repo
	if rr == nil {
		return cleanup, nil
	}
	if rr.Path != "" {
		dir, within, err := s.repoPath(ctx, rr.Path, req.Tenant)
		if err != nil {
			return nil, err
		}
		req.RepoDir, req.RepoWithin = dir, within
		return cleanup, nil
	}
	if err := os.MkdirAll(s.opts.RepoDir, 0o700); err != nil {
		return nil, fmt.Errorf("repository folder: %w", err)
	}
	f, err := os.CreateTemp(s.opts.RepoDir, ".upload-*.bundle")
	if err != nil {
		return nil, fmt.Errorf("repository bundle: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(rr.Bundle)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("repository bundle: %w", err)
	}
	dir := s.bundleDir(id)
	if err := repo.Unbundle(ctx, f.Name(), dir, repo.Limits{}); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("repo.bundle: %w", err)
	}
	req.RepoDir, req.RepoWithin = dir, dir
	return func() { s.removeBundle(id) }, nil
}

// removeBundle removes the bare repository of an agent's uploaded
// bundle, if it has one.
func (s *Server) removeBundle(id string) {
	if s.opts.RepoDir == "" || id == "" {
		return
	}
	if err := os.RemoveAll(s.bundleDir(id)); err != nil {
		s.log.Warn("remove the agent's repository", "id", id, "err", err)
	}
}

// getChanges brings home what the agent did in its repository
// (Agent.Changes): the JSON of the sync, or with ?format=bundle a git
// bundle of the branch since the repository went in.
func (s *Server) getChanges(w http.ResponseWriter, r *http.Request, a *agent, rec store.Agent) {
	format := r.URL.Query().Get("format")
	if format != "" && format != "json" && format != "bundle" {
		writeError(w, badRequest("format %q: want json or bundle", format))
		return
	}
	ch, err := a.ag.Changes(r.Context())
	if errors.Is(err, sandboxagent.ErrNoRepo) {
		msg := "agent " + a.id + " has no repository (create it with repo)"
		if a.req.Repo != nil {
			msg = "agent " + a.id + "'s repository is not attached to it any more (a server restart, another replica, or a fork): its changes cannot be brought home"
		}
		err = &apiError{status: http.StatusConflict, kind: KindConflict, msg: msg}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	// The sync's place (its last commits) is in the agent's state: a
	// replica or a restarted server goes on from there.
	if err := s.save(r.Context(), a, statusIdle); err != nil {
		writeError(w, err)
		return
	}
	if format != "bundle" {
		writeJSON(w, http.StatusOK, ch)
		return
	}
	// Into a file first: a failure is still an error answer, and the
	// length is known.
	f, err := os.CreateTemp("", "sandbox-agent-changes-*.bundle")
	if err != nil {
		writeError(w, err)
		return
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := a.ag.Repo().WriteBundle(r.Context(), f); err != nil {
		writeError(w, err)
		return
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-git-bundle")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.Header().Set("Content-Disposition", `attachment; filename="`+a.id+`.bundle"`)
	w.Header().Set("X-Sandbox-Agent-Branch", ch.Branch)
	w.Header().Set("X-Sandbox-Agent-Tip", ch.Tip)
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, f); err != nil {
		s.log.Warn("send changes", "id", a.id, "err", err)
	}
}
