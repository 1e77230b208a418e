package server

// Checkpoints: a whole sandbox kept (sandboxagent.Agent.Checkpoint), to
// start new agents on it (POST /v1/agents with "checkpoint") or to fork an
// agent into several at once. The store keeps their records, so they
// outlive the agent and the server; the engine keeps the images (or the
// host the archives).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	units "github.com/docker/go-units"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
	"github.com/sandbox-agent/sandbox-agent/store"
)

// maxForkCount is the most branches one POST .../fork starts.
const maxForkCount = 16

// maxCheckpointName bounds a checkpoint's name (it travels in an image
// label).
const maxCheckpointName = 256

// maxSmallBody bounds the optional bodies of the checkpoint and fork
// routes.
const maxSmallBody = 64 << 10

// checkpointView is the JSON of a checkpoint. Field names are a public
// interface. No host path: an archive's folder is the server's business.
type checkpointView struct {
	ID        string              `json:"id"`
	Name      string              `json:"name,omitempty"`
	Tenant    string              `json:"tenant"`
	Agent     string              `json:"agent"`
	Created   time.Time           `json:"created"`
	Parent    string              `json:"parent"`
	Driver    string              `json:"driver"`
	Model     string              `json:"model,omitempty"`
	BaseImage string              `json:"base_image"`
	Image     string              `json:"image,omitempty"`
	Size      int64               `json:"size"`
	Session   string              `json:"session,omitempty"`
	WorkDir   string              `json:"workdir,omitempty"`
	Egress    sandboxagent.Egress `json:"egress"`
}

// forkResult is the JSON of POST .../fork.
type forkResult struct {
	Agents     []agentView    `json:"agents"`
	Checkpoint checkpointView `json:"checkpoint"`
}

// libCheckpoint is the library's checkpoint of a stored record, checked
// before it is trusted: its id is the record's, its image the one a
// commit names (CheckpointRepo:id), its archive the folder under
// CheckpointRoot named by its id, one of the two. A record that fails is
// corrupt: logged, and a 500 whose message names nothing of it.
func (s *Server) libCheckpoint(rec store.Checkpoint) (sandboxagent.Checkpoint, error) {
	var c sandboxagent.Checkpoint
	err := json.Unmarshal(rec.Data, &c)
	switch {
	case err != nil:
	case c.ID != rec.ID:
		err = fmt.Errorf("its id %q is not the record's", c.ID)
	default:
		err = c.Check(s.opts.CheckpointRoot)
	}
	if err != nil {
		s.log.Error("corrupt checkpoint record", "id", rec.ID, "tenant", rec.Tenant, "err", err)
		return sandboxagent.Checkpoint{}, &apiError{status: http.StatusInternalServerError, kind: KindInternal,
			msg: fmt.Sprintf("checkpoint %s: its stored record is corrupt", rec.ID)}
	}
	return c, nil
}

func checkpointViewOf(rec store.Checkpoint, c sandboxagent.Checkpoint) checkpointView {
	return checkpointView{
		ID: rec.ID, Name: c.Name, Tenant: rec.Tenant, Agent: rec.AgentID, Created: rec.Created, Parent: c.Parent,
		Driver: c.Driver, Model: c.Model, BaseImage: c.BaseImage, Image: c.Image, Size: c.Size, Session: c.Session,
		WorkDir: c.WorkDir, Egress: c.Egress,
	}
}

// decodeOptional is decode for a body that may be empty (or absent).
func decodeOptional(r *http.Request, v any) error {
	if r.Body == nil {
		return nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxSmallBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &apiError{status: http.StatusRequestEntityTooLarge, kind: KindTooLarge, msg: fmt.Sprintf("request body over %d bytes", mbe.Limit)}
		}
		return badRequest("body: %v", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return decode(r, v)
}

type checkpointRequest struct {
	Name string `json:"name,omitempty"`
}

// postCheckpoint checkpoints the agent: POST /v1/agents/{id}/checkpoints.
func (s *Server) postCheckpoint(w http.ResponseWriter, r *http.Request, a *agent, rec store.Agent) {
	var req checkpointRequest
	if err := decodeOptional(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if utf8.RuneCountInString(req.Name) > maxCheckpointName || bytes.ContainsFunc([]byte(req.Name), unicode.IsControl) {
		writeError(w, badRequest("name: want at most %d characters, no control characters", maxCheckpointName))
		return
	}
	ck, c, err := s.checkpoint(r.Context(), a, rec, req.Name)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, checkpointViewOf(ck, c))
}

// checkpoint makes a checkpoint of the agent between its turns (a running
// turn is waited for idleWait, then 409, as a session call) and keeps it.
// A tenant already at TenantCheckpointBytes is refused first (429): no
// commit to remove afterwards.
func (s *Server) checkpoint(ctx context.Context, a *agent, rec store.Agent, name string) (store.Checkpoint, sandboxagent.Checkpoint, error) {
	if err := s.checkpointRoom(ctx, rec.Tenant, 0, true); err != nil {
		return store.Checkpoint{}, sandboxagent.Checkpoint{}, err
	}
	a, done, err := s.need(ctx, a, rec)
	if err != nil {
		return store.Checkpoint{}, sandboxagent.Checkpoint{}, err
	}
	defer done()
	hctx, release, err := a.ag.Hold(ctx, idleWait)
	if err != nil {
		return store.Checkpoint{}, sandboxagent.Checkpoint{}, busy(a)
	}
	c, err := a.ag.Checkpoint(hctx, name)
	release()
	if err != nil {
		s.log.Warn("checkpoint", "agent", a.id, "err", err)
		return store.Checkpoint{}, sandboxagent.Checkpoint{}, checkpointFailed(err)
	}
	ck, err := s.keepCheckpoint(ctx, a.tenant, a.id, c)
	if err != nil {
		return store.Checkpoint{}, sandboxagent.Checkpoint{}, err
	}
	s.log.Info("checkpoint made", "id", c.ID, "agent", a.id, "tenant", a.tenant, "size", c.Size)
	return ck, c, nil
}

// checkpointCapRetry is the Retry-After of a tenant at its checkpoint
// bytes: room comes only from a DELETE, so not soon.
const checkpointCapRetry = 60

// checkpointRoom answers 429 when the tenant's stored checkpoints reach
// TenantCheckpointBytes (upFront: before a checkpoint is made), or with a
// checkpoint of size bytes made would pass it. The admin has no cap.
func (s *Server) checkpointRoom(ctx context.Context, tenant string, size int64, upFront bool) error {
	limit := s.opts.TenantCheckpointBytes
	if limit <= 0 || tenant == AdminTenant {
		return nil
	}
	all, err := s.st.Checkpoints(ctx, tenant)
	if err != nil {
		return fmt.Errorf("count checkpoints: %w", err)
	}
	total := size
	for _, x := range all {
		total += x.Size
	}
	if upFront && total < limit || !upFront && total <= limit {
		return nil
	}
	verb := "would take"
	if upFront {
		verb = "take"
	}
	return &apiError{status: http.StatusTooManyRequests, kind: KindLimit, retryAfter: checkpointCapRetry, msg: fmt.Sprintf(
		"serve_tenant_checkpoint_bytes (%s) reached for tenant %s: its checkpoints %s %s; delete a checkpoint first",
		units.BytesSize(float64(limit)), tenant, verb, units.BytesSize(float64(total)))}
}

// keepCheckpoint stores checkpoint c of the tenant's agent, unless it
// takes the tenant past TenantCheckpointBytes (429): then, or when it
// cannot be stored, c is removed.
func (s *Server) keepCheckpoint(ctx context.Context, tenant, agentID string, c sandboxagent.Checkpoint) (store.Checkpoint, error) {
	ctx = context.WithoutCancel(ctx) // made: kept or removed, whatever the client does
	data, err := json.Marshal(c)
	if err != nil {
		s.removeUnstored(ctx, c)
		return store.Checkpoint{}, err
	}
	rec := store.Checkpoint{ID: c.ID, Tenant: tenant, AgentID: agentID, Created: c.Created, Size: c.Size, Data: data}
	s.checkpointMu.Lock()
	defer s.checkpointMu.Unlock()
	if err := s.checkpointRoom(ctx, tenant, c.Size, false); err != nil {
		s.removeUnstored(ctx, c)
		return store.Checkpoint{}, err
	}
	if err := s.st.PutCheckpoint(ctx, rec); err != nil {
		if errors.Is(err, store.ErrConflict) {
			// Another record has its id (and so names its image or
			// folder): neither is touched.
			s.log.Error("store checkpoint: its id is taken", "id", c.ID, "err", err)
		} else {
			s.removeUnstored(ctx, c)
		}
		return store.Checkpoint{}, fmt.Errorf("store the checkpoint: %w", err)
	}
	return rec, nil
}

// checkpointFailed is what a client hears of a failed checkpoint: the
// size limit and the request's own end as they are; the rest (a host
// folder, an engine's words) goes to the log. The server's checkpoint
// folder refused is the server's fault (500), not the request's.
func checkpointFailed(err error) error {
	switch {
	case errors.Is(err, sandboxagent.ErrCheckpointSize), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, sandboxagent.ErrInvalidArgument):
		return errors.New("checkpoint failed: the server's checkpoint folder is not usable (the server's log has the details)")
	}
	return &hidden{msg: "checkpoint failed (the server's log has the details)", err: err}
}

// hidden is err with a message of its own: its kind (classify) is err's,
// its text (a host path, an engine's words) is only in the server's log.
type hidden struct {
	msg string
	err error
}

func (h *hidden) Error() string { return h.msg }
func (h *hidden) Unwrap() error { return h.err }

// removeCheckpoint removes c's image or archive; one already gone is not
// an error. checkpoint.ErrInUse: an agent still runs on its image; 501
// unsupported: an image and no engine to remove it (Options.Checkpoints).
func (s *Server) removeCheckpoint(ctx context.Context, c sandboxagent.Checkpoint) error {
	if c.Image != "" && s.opts.Checkpoints == nil {
		return &apiError{status: http.StatusNotImplemented, kind: KindUnsupported, msg: fmt.Sprintf(
			"checkpoint %s is an engine image and this server's engine cannot remove images (a server on Docker or Podman can)", c.ID)}
	}
	err := checkpoint.Remove(context.WithoutCancel(ctx), s.opts.Checkpoints, s.opts.CheckpointRoot, c)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return nil
	}
	return err
}

// removeUnstored removes a checkpoint that has no record (one refused, or
// not stored). A failure is logged: the reconciliation finds what is left.
func (s *Server) removeUnstored(ctx context.Context, c sandboxagent.Checkpoint) {
	if err := s.removeCheckpoint(ctx, c); err != nil {
		s.log.Warn("remove checkpoint", "id", c.ID, "err", err)
	}
}

// dropCheckpoint removes a stored checkpoint no longer wanted: its image
// or archive, then its record. A failure is logged: the reconciliation
// finds an image or folder left without its record.
func (s *Server) dropCheckpoint(ctx context.Context, c sandboxagent.Checkpoint) {
	if err := s.removeCheckpoint(ctx, c); err != nil {
		s.log.Warn("remove checkpoint", "id", c.ID, "err", err)
		return
	}
	if err := s.st.DeleteCheckpoint(context.WithoutCancel(ctx), c.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("delete checkpoint", "id", c.ID, "err", err)
	}
}

// checkpointFor is the checkpoint a create request names: the caller's
// (else 404), of the request's driver (else 400), its archive present
// here (else 404).
func (s *Server) checkpointFor(ctx context.Context, p principal, req CreateRequest) (sandboxagent.Checkpoint, error) {
	rec, err := s.st.Checkpoint(ctx, req.Checkpoint)
	if errors.Is(err, store.ErrNotFound) || err == nil && !p.owns(rec.Tenant) {
		return sandboxagent.Checkpoint{}, notFound("no checkpoint %q", req.Checkpoint)
	}
	if err != nil {
		return sandboxagent.Checkpoint{}, fmt.Errorf("find checkpoint: %w", err)
	}
	c, err := s.libCheckpoint(rec)
	if err != nil {
		return sandboxagent.Checkpoint{}, err
	}
	if c.Driver != req.Driver {
		return sandboxagent.Checkpoint{}, badRequest("checkpoint %s is of a %s agent, not %s: driver must be %q", c.ID, c.Driver, req.Driver, c.Driver)
	}
	if req.Image != "" {
		return sandboxagent.Checkpoint{}, badRequest("image: an agent started on a checkpoint runs the checkpoint's image; leave image empty")
	}
	if c.Archive != "" {
		// Its folder, complete and ours (the library's own reading):
		// gone (removed by hand, another host's), it is a 404 that names
		// no host path.
		_, err := checkpoint.Get(ctx, nil, s.opts.CheckpointRoot, c.ID)
		if errors.Is(err, checkpoint.ErrNotFound) {
			s.log.Warn("checkpoint archive missing", "id", c.ID)
			return sandboxagent.Checkpoint{}, archiveMissing(&c)
		}
		if err != nil {
			s.log.Warn("read checkpoint archives", "id", c.ID, "err", err)
			return sandboxagent.Checkpoint{}, &hidden{msg: fmt.Sprintf("checkpoint %s: its archive cannot be read (the server's log has the details)", c.ID), err: err}
		}
	}
	return c, nil
}

func archiveMissing(c *sandboxagent.Checkpoint) error {
	return notFound("checkpoint %s: its archive is missing or incomplete on this server", c.ID)
}

// startErr is the error of a start from checkpoint c (nil: none) as the
// client sees it: an archive's failure names no host path (the server's
// log has it); an archive the library refused is a 404.
func (s *Server) startErr(c *sandboxagent.Checkpoint, err error) error {
	if c == nil || c.Archive == "" {
		return err
	}
	msg := err.Error()
	if !strings.Contains(msg, c.Archive) && (s.opts.CheckpointRoot == "" || !strings.Contains(msg, s.opts.CheckpointRoot)) &&
		!strings.Contains(msg, "archive") {
		return err
	}
	s.log.Warn("start from checkpoint", "checkpoint", c.ID, "err", err)
	if errors.Is(err, sandboxagent.ErrInvalidArgument) {
		return archiveMissing(c)
	}
	return &hidden{msg: fmt.Sprintf("start from checkpoint %s failed (the server's log has the details)", c.ID), err: err}
}

type forkRequest struct {
	Count *int `json:"count,omitempty"`
}

// fork checkpoints the agent and starts count agents on the checkpoint:
// POST /v1/agents/{id}/fork.
func (s *Server) fork(w http.ResponseWriter, r *http.Request, a *agent, rec store.Agent) {
	var req forkRequest
	if err := decodeOptional(r, &req); err != nil {
		writeError(w, err)
		return
	}
	n := 1
	if req.Count != nil {
		n = *req.Count
	}
	if n < 1 || n > maxForkCount {
		writeError(w, badRequest("count %d: want 1 to %d", n, maxForkCount))
		return
	}
	branch, err := s.branchRequest(rec)
	if err != nil {
		writeError(w, err)
		return
	}
	// Admitted first: a fork the limits refuse makes no checkpoint.
	ad, err := s.admit(r.Context(), rec.Tenant, n)
	if err != nil {
		writeError(w, err)
		return
	}
	defer ad.release()
	ck, c, err := s.checkpoint(r.Context(), a, rec, "fork")
	if err != nil {
		writeError(w, err)
		return
	}
	views, err := s.forkFrom(r.Context(), ad, branch, c, n)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, forkResult{Agents: views, Checkpoint: checkpointViewOf(ck, c)})
}

// branchRequest is the create request of the agent's branches: the
// agent's own, with its env, when it was started by this server process.
// Otherwise (after a restart, or on another replica) it is the stored
// one, whose env values are not kept (they may be secrets, the store
// keeps their names): with env names the branches' environment is
// unknown, a 409 conflict rather than branches without it.
func (s *Server) branchRequest(rec store.Agent) (CreateRequest, error) {
	s.mu.Lock()
	req, ok := s.requests[rec.ID]
	s.mu.Unlock()
	if !ok {
		req = CreateRequest{}
		if err := json.Unmarshal(rec.Request, &req); err != nil {
			req = CreateRequest{Driver: rec.Driver, Model: rec.Model}
		}
		if req.Endpoint != nil && req.Endpoint.KeyDropped {
			return CreateRequest{}, &apiError{status: http.StatusConflict, kind: KindConflict, msg: fmt.Sprintf(
				"agent %s was started with an endpoint api_key, which only the server process that started it knew (it is never stored): "+
					"after a restart, or on another replica, its branches' key is unknown; checkpoint it "+
					"(POST /v1/agents/%s/checkpoints) and start agents on the checkpoint with their endpoint",
				rec.ID, rec.ID)}
		}
		if len(req.Env) > 0 {
			return CreateRequest{}, &apiError{status: http.StatusConflict, kind: KindConflict, msg: fmt.Sprintf(
				"agent %s was started with env, whose values only the server process that started it knew (they are never stored): "+
					"after a restart, or on another replica, its branches' environment is unknown; checkpoint it "+
					"(POST /v1/agents/%s/checkpoints) and start agents on the checkpoint with their env (POST /v1/agents with checkpoint and env)",
				rec.ID, rec.ID)}
		}
	}
	req.Tenant = rec.Tenant
	return req, nil
}

// cleanupError is a failure after which removing what was started failed
// too: its kind (classify) is the failure's, its message tells both.
type cleanupError struct {
	err     error
	cleanup error
}

func (e *cleanupError) Error() string {
	return fmt.Sprintf("%v; and removing what was started failed (DELETE those agents): %v", e.err, e.cleanup)
}
func (e *cleanupError) Unwrap() error { return e.err }

// discardAll discards the launched agents (nil ones skipped); it returns
// the failures, by agent.
func (s *Server) discardAll(ctx context.Context, agents []*agent) error {
	var errs []error
	for _, b := range agents {
		if b == nil {
			continue
		}
		if err := s.discard(ctx, b); err != nil {
			errs = append(errs, fmt.Errorf("agent %s: %w", b.id, err))
		}
	}
	return errors.Join(errs...)
}

// forkFrom starts n agents of req on checkpoint c, at once, admitted by
// ad. All or none: when one fails (or the server closes meanwhile), those
// started are removed, and so is the checkpoint; the first failure is
// returned, with the removals that failed.
func (s *Server) forkFrom(ctx context.Context, ad *admission, req CreateRequest, c sandboxagent.Checkpoint, n int) ([]agentView, error) {
	req.Checkpoint, req.From, req.Image = c.ID, &c, ""
	// The checkpoint's files hold the repository; the branches have
	// none of their own (no changes to bring home).
	req.Repo, req.RepoDir = nil, ""
	if req.Model == "" {
		req.Model = c.Model
	}
	agents := make([]*agent, n)
	recs := make([]store.Agent, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { agents[i], recs[i], errs[i] = s.launch(ctx, req, ad) })
	}
	wg.Wait()
	var first error
	for _, err := range errs {
		if err != nil {
			first = err
			break
		}
	}
	if first != nil {
		cleanup := s.discardAll(ctx, agents)
		s.dropCheckpoint(ctx, c)
		s.log.Warn("fork", "checkpoint", c.ID, "branches", n, "err", errors.Join(errs...))
		if cleanup != nil {
			return nil, &cleanupError{err: first, cleanup: cleanup}
		}
		return nil, first
	}
	views, err := s.settle(ctx, agents, recs)
	if err != nil {
		s.dropCheckpoint(ctx, c)
		return nil, err
	}
	return views, nil
}

// lookupCheckpoint finds the request's {id} among the checkpoints the
// principal may see, or answers 404 (the same for another tenant's).
func (s *Server) lookupCheckpoint(w http.ResponseWriter, r *http.Request) (store.Checkpoint, sandboxagent.Checkpoint, bool) {
	id := r.PathValue("id")
	rec, err := s.st.Checkpoint(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) || err == nil && !who(r).owns(rec.Tenant) {
		writeError(w, notFound("no checkpoint %q", id))
		return store.Checkpoint{}, sandboxagent.Checkpoint{}, false
	}
	if err != nil {
		writeError(w, fmt.Errorf("find checkpoint: %w", err))
		return store.Checkpoint{}, sandboxagent.Checkpoint{}, false
	}
	c, err := s.libCheckpoint(rec)
	if err != nil {
		writeError(w, err)
		return store.Checkpoint{}, sandboxagent.Checkpoint{}, false
	}
	return rec, c, true
}

func (s *Server) listCheckpoints(w http.ResponseWriter, r *http.Request) {
	p := who(r)
	tenant := p.tenant
	if p.admin() {
		tenant = ""
	}
	recs, err := s.st.Checkpoints(r.Context(), tenant)
	if err != nil {
		writeError(w, fmt.Errorf("list checkpoints: %w", err))
		return
	}
	views := make([]checkpointView, 0, len(recs))
	for _, rec := range recs {
		c, err := s.libCheckpoint(rec) // a corrupt one is logged and left out
		if err != nil {
			continue
		}
		views = append(views, checkpointViewOf(rec, c))
	}
	writeJSON(w, http.StatusOK, map[string]any{"checkpoints": views})
}

func (s *Server) getCheckpoint(w http.ResponseWriter, r *http.Request) {
	if rec, c, ok := s.lookupCheckpoint(w, r); ok {
		writeJSON(w, http.StatusOK, checkpointViewOf(rec, c))
	}
}

func (s *Server) deleteCheckpoint(w http.ResponseWriter, r *http.Request) {
	rec, c, ok := s.lookupCheckpoint(w, r)
	if !ok {
		return
	}
	// A checkpoint of an agent started on c sits on c's image: the engine
	// would untag c and keep its layers, the tenant's bytes freed, not
	// the disk.
	if c.Image != "" {
		all, err := s.st.Checkpoints(r.Context(), "")
		if err != nil {
			writeError(w, fmt.Errorf("list checkpoints: %w", err))
			return
		}
		for _, o := range all {
			if oc, err := s.libCheckpoint(o); err == nil && oc.BaseImage == c.Image {
				writeError(w, &apiError{status: http.StatusConflict, kind: KindConflict, msg: fmt.Sprintf(
					"checkpoint %s is the base of another checkpoint (made of an agent started on it): delete that one first", rec.ID)})
				return
			}
		}
	}
	if err := s.removeCheckpoint(r.Context(), c); err != nil {
		s.log.Warn("remove checkpoint", "id", rec.ID, "err", err)
		var ae *apiError
		switch {
		case errors.As(err, &ae):
		case errors.Is(err, checkpoint.ErrInUse):
			// Not the engine's words: they name a container.
			err = &apiError{status: http.StatusConflict, kind: KindConflict, msg: fmt.Sprintf(
				"checkpoint %s is in use: an agent still runs on this checkpoint (delete it first)", rec.ID)}
		default:
			err = &hidden{msg: fmt.Sprintf("remove checkpoint %s failed (the server's log has the details)", rec.ID), err: err}
		}
		writeError(w, err)
		return
	}
	if err := s.st.DeleteCheckpoint(context.WithoutCancel(r.Context()), rec.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		writeError(w, fmt.Errorf("delete checkpoint: %w", err))
		return
	}
	s.log.Info("checkpoint deleted", "id", rec.ID)
	w.WriteHeader(http.StatusNoContent)
}

// orphanAge is how old a checkpoint of this server's without a record
// must be before the reconciliation removes it: a younger one's record
// may be on its way (keepCheckpoint stores it once the commit is done).
const orphanAge = 15 * time.Minute

// reconcileEvery is how often the server looks for such checkpoints.
const reconcileEvery = time.Hour

// reconcileCheckpoints removes the checkpoints of this server's owner
// (Options.Instance) that no record names any more (their record lost:
// a crash between the commit and the store, a store restored from a
// backup), made more than orphanAge ago: gc leaves them to the server,
// which alone knows. On a shared store any replica's record counts. Only
// checkpoints of a sandbox this store has an agent of are candidates:
// another server with the same instance name (two serves on one host,
// each its own state) keeps its own. One in use is kept; it goes on past
// a failure and reports them all.
func (s *Server) reconcileCheckpoints(ctx context.Context) (removed []string, _ error) {
	if s.opts.Checkpoints == nil && s.opts.CheckpointRoot == "" {
		return nil, nil
	}
	all, err := checkpoint.List(ctx, s.opts.Checkpoints, s.opts.CheckpointRoot)
	if err != nil {
		return nil, err
	}
	agents, err := s.st.ListAgents(ctx, "")
	if err != nil {
		return nil, err
	}
	ours := make(map[string]bool, len(agents))
	for _, rec := range agents {
		ours[rec.SandboxName] = true
	}
	var errs []error
	for _, c := range all {
		if c.Owner != s.opts.Instance || time.Since(c.Created) < orphanAge || !ours[c.Parent] {
			continue
		}
		_, err := s.st.Checkpoint(ctx, c.ID)
		if err == nil {
			continue
		}
		if !errors.Is(err, store.ErrNotFound) {
			return removed, errors.Join(append(errs, err)...) // the store: the next round
		}
		switch err := checkpoint.Remove(ctx, s.opts.Checkpoints, s.opts.CheckpointRoot, c); {
		case err == nil:
			removed = append(removed, c.ID)
		case errors.Is(err, checkpoint.ErrInUse), errors.Is(err, checkpoint.ErrNotFound):
		default:
			errs = append(errs, fmt.Errorf("remove checkpoint %s: %w", c.ID, err))
		}
	}
	return removed, errors.Join(errs...)
}

// forgetRequests drops the create requests (their env values) of agents
// no longer in the store, or lost: deleted through another replica, or
// whose sandbox is gone.
func (s *Server) forgetRequests(ctx context.Context) error {
	s.mu.Lock()
	ids := make([]string, 0, len(s.requests))
	for id := range s.requests {
		ids = append(ids, id) // stored before they were kept: listed below
	}
	s.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	recs, err := s.st.ListAgents(ctx, "")
	if err != nil {
		return err
	}
	live := make(map[string]bool, len(recs))
	for _, rec := range recs {
		if rec.Status != statusLost {
			live[rec.ID] = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if !live[id] {
			delete(s.requests, id)
		}
	}
	return nil
}

// housekeep runs the reconciliation and forgetRequests now, then every
// reconcileEvery, until ctx ends.
func (s *Server) housekeep(ctx context.Context) {
	for {
		removed, err := s.reconcileCheckpoints(ctx)
		for _, id := range removed {
			s.log.Info("removed a checkpoint without a record", "id", id)
		}
		if err != nil && ctx.Err() == nil {
			s.log.Warn("reconcile checkpoints", "err", err)
		}
		if err := s.forgetRequests(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("forget the requests of agents gone", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(reconcileEvery):
		}
	}
}
