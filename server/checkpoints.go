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
	"sync"
	"time"
	"unicode"

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

// libCheckpoint is the library's checkpoint of a stored record.
func libCheckpoint(rec store.Checkpoint) (sandboxagent.Checkpoint, error) {
	var c sandboxagent.Checkpoint
	if err := json.Unmarshal(rec.Data, &c); err != nil {
		return c, fmt.Errorf("checkpoint %s: stored record: %w", rec.ID, err)
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
	if len(req.Name) > maxCheckpointName || bytes.ContainsFunc([]byte(req.Name), unicode.IsControl) {
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
func (s *Server) checkpoint(ctx context.Context, a *agent, rec store.Agent, name string) (store.Checkpoint, sandboxagent.Checkpoint, error) {
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
		return store.Checkpoint{}, sandboxagent.Checkpoint{}, err
	}
	ck, err := s.keepCheckpoint(ctx, a.tenant, a.id, c)
	if err != nil {
		return store.Checkpoint{}, sandboxagent.Checkpoint{}, err
	}
	s.log.Info("checkpoint made", "id", c.ID, "agent", a.id, "tenant", a.tenant, "size", c.Size)
	return ck, c, nil
}

// keepCheckpoint stores checkpoint c of the tenant's agent, unless it
// takes the tenant past TenantCheckpointBytes (429): then, or when it
// cannot be stored, c is removed.
func (s *Server) keepCheckpoint(ctx context.Context, tenant, agentID string, c sandboxagent.Checkpoint) (store.Checkpoint, error) {
	ctx = context.WithoutCancel(ctx) // made: kept or removed, whatever the client does
	data, err := json.Marshal(c)
	if err != nil {
		s.dropCheckpoint(ctx, c)
		return store.Checkpoint{}, err
	}
	rec := store.Checkpoint{ID: c.ID, Tenant: tenant, AgentID: agentID, Created: c.Created, Size: c.Size, Data: data}
	s.checkpointMu.Lock()
	defer s.checkpointMu.Unlock()
	if limit := s.opts.TenantCheckpointBytes; limit > 0 && tenant != AdminTenant {
		all, err := s.st.Checkpoints(ctx, tenant)
		if err != nil {
			s.dropCheckpoint(ctx, c)
			return store.Checkpoint{}, fmt.Errorf("count checkpoints: %w", err)
		}
		total := c.Size
		for _, x := range all {
			total += x.Size
		}
		if total > limit {
			s.dropCheckpoint(ctx, c)
			return store.Checkpoint{}, &apiError{status: http.StatusTooManyRequests, kind: KindLimit, msg: fmt.Sprintf(
				"serve_tenant_checkpoint_bytes (%s) reached for tenant %s: its checkpoints would take %s; delete a checkpoint first",
				units.BytesSize(float64(limit)), tenant, units.BytesSize(float64(total)))}
		}
	}
	if err := s.st.PutCheckpoint(ctx, rec); err != nil {
		s.dropCheckpoint(ctx, c)
		return store.Checkpoint{}, fmt.Errorf("store the checkpoint: %w", err)
	}
	return rec, nil
}

// removeCheckpoint removes c's image or archive; one already gone is not
// an error. checkpoint.ErrInUse: an agent still runs on its image.
func (s *Server) removeCheckpoint(ctx context.Context, c sandboxagent.Checkpoint) error {
	err := checkpoint.Remove(context.WithoutCancel(ctx), s.opts.Checkpoints, s.opts.CheckpointRoot, c)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return nil
	}
	return err
}

// dropCheckpoint removes a checkpoint not (or no longer) wanted: its image
// or archive and its record. A failure is logged: gc finds what is left.
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
// (else 404), of the request's driver (else 400).
func (s *Server) checkpointFor(ctx context.Context, p principal, req CreateRequest) (sandboxagent.Checkpoint, error) {
	rec, err := s.st.Checkpoint(ctx, req.Checkpoint)
	if errors.Is(err, store.ErrNotFound) || err == nil && !p.owns(rec.Tenant) {
		return sandboxagent.Checkpoint{}, notFound("no checkpoint %q", req.Checkpoint)
	}
	if err != nil {
		return sandboxagent.Checkpoint{}, fmt.Errorf("find checkpoint: %w", err)
	}
	c, err := libCheckpoint(rec)
	if err != nil {
		return sandboxagent.Checkpoint{}, err
	}
	if c.Driver != req.Driver {
		return sandboxagent.Checkpoint{}, badRequest("checkpoint %s is of a %s agent, not %s: driver must be %q", c.ID, c.Driver, req.Driver, c.Driver)
	}
	if req.Image != "" {
		return sandboxagent.Checkpoint{}, badRequest("image: an agent started on a checkpoint runs the checkpoint's image; leave image empty")
	}
	return c, nil
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
	views, err := s.forkFrom(r.Context(), ad, s.branchRequest(rec), c, n)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, forkResult{Agents: views, Checkpoint: checkpointViewOf(ck, c)})
}

// branchRequest is the create request of the agent's branches: the
// agent's own, with its env when it was started here; after a restart
// (or on another replica) the stored one, whose env values are not kept
// (they may be secrets): the branches then start without env.
func (s *Server) branchRequest(rec store.Agent) CreateRequest {
	s.mu.Lock()
	req, ok := s.requests[rec.ID]
	s.mu.Unlock()
	if !ok {
		req = CreateRequest{}
		if err := json.Unmarshal(rec.Request, &req); err != nil {
			req = CreateRequest{Driver: rec.Driver, Model: rec.Model}
		}
		req.Env = nil
	}
	req.Tenant = rec.Tenant
	return req
}

// forkFrom starts n agents of req on checkpoint c, at once, admitted by
// ad. All or none: when one fails, those started are removed, and so is
// the checkpoint; the first failure is returned.
func (s *Server) forkFrom(ctx context.Context, ad *admission, req CreateRequest, c sandboxagent.Checkpoint, n int) ([]agentView, error) {
	req.Checkpoint, req.From, req.Image = c.ID, &c, ""
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
		for _, b := range agents {
			if b != nil {
				_ = s.discard(ctx, b)
			}
		}
		s.dropCheckpoint(ctx, c)
		s.log.Warn("fork", "checkpoint", c.ID, "branches", n, "err", errors.Join(errs...))
		return nil, first
	}
	views := make([]agentView, n)
	for i, b := range agents {
		views[i] = s.settle(b, recs[i])
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
	if err == nil {
		var c sandboxagent.Checkpoint
		if c, err = libCheckpoint(rec); err == nil {
			return rec, c, true
		}
	}
	writeError(w, fmt.Errorf("find checkpoint: %w", err))
	return store.Checkpoint{}, sandboxagent.Checkpoint{}, false
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
		c, err := libCheckpoint(rec)
		if err != nil {
			s.log.Warn("list checkpoints", "err", err)
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
	if err := s.removeCheckpoint(r.Context(), c); err != nil {
		if errors.Is(err, checkpoint.ErrInUse) {
			err = &apiError{status: http.StatusConflict, kind: KindConflict, msg: fmt.Sprintf("checkpoint %s is in use: agents run on it (delete them first): %v", rec.ID, err)}
		}
		s.log.Warn("remove checkpoint", "id", rec.ID, "err", err)
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
