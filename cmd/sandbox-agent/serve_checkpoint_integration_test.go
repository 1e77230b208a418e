//go:build integration

package main

// Checkpoints over serve's API end to end: an agent's turn writes a file,
// the agent is checkpointed and forked; the branches see the base and
// none of each other's changes, carry the base session, and hold the
// fork's checkpoint until they are deleted; after a restart of serve on
// the same state the checkpoint starts a new agent that continues the
// base session. Other tenants see none of it.

import (
	"bytes"
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// checkpointDriver is the cheapest CLI to start (per turn, no daemon).
const checkpointDriver = "dsh"

// serveCheckpointOf reads a checkpoint's JSON.
type serveCheckpointOf struct {
	ID, Name, Tenant, Agent, Parent, Driver, Image, Session, Egress string
	BaseImage                                                       string `json:"base_image"`
	Size                                                            int64
}

func TestServeCheckpoint(t *testing.T) {
	testenv.Engine(t)
	// One fake model the test holds (serve's gateway): the turns run one
	// at a time, so its steps are consumed in order, and its requests
	// show which session each turn carried.
	fm := startGatewayModel(t, []fakemodel.Step{
		{Tool: fakemodel.ToolShell, Command: "echo base > fork-state.txt && echo written"},
		{Text: "BASE-DONE"},
		{Text: "A-DONE"},
		{Text: "B-DONE"},
		{Text: "L-DONE"},
	})
	dir := t.TempDir()
	state := filepath.Join(dir, "state.db")
	env := map[string]string{
		"SANDBOX_AGENT_STATE": state, "GATEWAY_URL": fm.URL() + "/v1", "GATEWAY_KEY": "sk-checkpoint-test-key",
		"SANDBOX_AGENT_CHECKPOINT_ROOT": filepath.Join(dir, "checkpoints"),
	}
	tokens := map[string]string{}
	for _, tenant := range []string{"acme", "beta"} {
		code, stdout, stderr := runCLI(t, map[string]string{}, "serve", "token", "create", "--tenant", tenant, "--state", state)
		if code != exitOK {
			t.Fatalf("token for %s: exit %d: %s", tenant, code, stderr)
		}
		tokens[tenant] = strings.TrimSpace(stdout)
	}
	r := startServeWith(t, env)
	as := func(tenant string) *serveProc {
		c := *r.serveProc
		c.token = tokens[tenant]
		return &c
	}
	// A durable state keeps the sandboxes when serve stops: everything
	// left is deleted, through whichever serve runs then, before it stops
	// (registered again after each start: cleanups run last first).
	cleaned := false
	cleanup := func() {
		if cleaned {
			return
		}
		cleaned = true
		_, out := r.do(t, http.MethodGet, "/v1/agents", nil)
		var list struct{ Agents []struct{ ID string } }
		_ = json.Unmarshal(out, &list)
		for _, a := range list.Agents {
			r.do(t, http.MethodDelete, "/v1/agents/"+a.ID, nil)
		}
		// Newest first: a checkpoint made on another (an agent started
		// on it) goes before its base.
		cks := serveCheckpoints(t, r.serveProc)
		slices.Reverse(cks)
		for _, c := range cks {
			if resp, out := r.do(t, http.MethodDelete, "/v1/checkpoints/"+c.ID, nil); resp.StatusCode != http.StatusNoContent {
				t.Errorf("cleanup: DELETE checkpoint %s: %d %s", c.ID, resp.StatusCode, out)
			}
		}
	}
	t.Cleanup(cleanup)
	acme, beta := as("acme"), as("beta")
	cat := func(c *serveProc, id string) string {
		t.Helper()
		res := c.exec(t, id, []string{"sh", "-c", "cat fork-state.txt; printf '|%s' \"$FORK_ENV\""})
		return strings.TrimSpace(res.Stdout)
	}
	turn := func(c *serveProc, id, prompt, want string) {
		t.Helper()
		resp, out := c.do(t, http.MethodPost, "/v1/agents/"+id+"/turns", map[string]any{"prompt": prompt})
		var res turnOf
		if resp.StatusCode != http.StatusOK || json.Unmarshal(out, &res) != nil || !strings.Contains(res.Reply, want) {
			t.Fatalf("turn %q: %d %.600s\nserve stderr:\n%s", prompt, resp.StatusCode, out, r.stderr.String())
		}
	}

	parent := acme.create(t, map[string]any{"driver": checkpointDriver, "env": map[string]string{"FORK_ENV": "from-parent"}})
	turn(acme, parent, "FORK-BASE write the file", "BASE-DONE")
	if got := cat(acme, parent); got != "base\n|from-parent" && got != "base|from-parent" {
		t.Fatalf("the base turn left %q", got)
	}

	// POST .../checkpoints: the caller's tenant's, no host path shown.
	resp, out := acme.do(t, http.MethodPost, "/v1/agents/"+parent+"/checkpoints", map[string]any{"name": "base"})
	var base serveCheckpointOf
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(out, &base) != nil || base.Name != "base" || base.Tenant != "acme" ||
		base.Agent != parent || base.Driver != checkpointDriver || base.Session == "" || base.BaseImage == "" || base.Egress != "model" {
		t.Fatalf("POST checkpoints: %d %s\nserve stderr:\n%s", resp.StatusCode, out, r.stderr.String())
	}
	if bytes.Contains(out, []byte("archive")) || bytes.Contains(out, []byte(dir)) {
		t.Errorf("a checkpoint's view shows a host path: %s", out)
	}
	t.Logf("checkpoint %s: image %q, %d bytes", base.ID, base.Image, base.Size)
	resp, out = beta.do(t, http.MethodPost, "/v1/agents/"+parent+"/checkpoints", nil)
	wantError(t, "beta checkpoints acme's agent", resp, out, http.StatusNotFound, "not_found")

	// POST .../fork: two branches on a checkpoint of their own, with the
	// parent's request (its env too).
	for _, n := range []int{0, 17} {
		resp, out = acme.do(t, http.MethodPost, "/v1/agents/"+parent+"/fork", map[string]any{"count": n})
		wantError(t, "fork count out of range", resp, out, http.StatusBadRequest, "invalid_argument")
	}
	resp, out = beta.do(t, http.MethodPost, "/v1/agents/"+parent+"/fork", map[string]any{"count": 2})
	wantError(t, "beta forks acme's agent", resp, out, http.StatusNotFound, "not_found")
	resp, out = acme.do(t, http.MethodPost, "/v1/agents/"+parent+"/fork", map[string]any{"count": 2})
	var fork struct {
		Agents []struct {
			ID, Tenant, Container string
		}
		Checkpoint serveCheckpointOf
	}
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(out, &fork) != nil || len(fork.Agents) != 2 || fork.Checkpoint.Name != "fork" ||
		fork.Checkpoint.ID == base.ID || fork.Checkpoint.Agent != parent {
		t.Fatalf("POST fork: %d %s\nserve stderr:\n%s", resp.StatusCode, out, r.stderr.String())
	}
	a, b := fork.Agents[0], fork.Agents[1]
	if a.ID == b.ID || a.Container == b.Container || a.Tenant != "acme" || b.Tenant != "acme" {
		t.Fatalf("the branches: %+v", fork.Agents)
	}
	for _, br := range fork.Agents {
		if got := cat(acme, br.ID); got != "base\n|from-parent" && got != "base|from-parent" {
			t.Fatalf("branch %s starts with %q (want the base file and the parent's env)", br.ID, got)
		}
	}
	for _, w := range []struct{ id, v string }{{a.ID, "A"}, {b.ID, "B"}} {
		if res := acme.exec(t, w.id, []string{"sh", "-c", "echo " + w.v + " > fork-state.txt"}); res.ExitCode != 0 {
			t.Fatalf("write in branch %s: %+v", w.v, res)
		}
	}
	if ga, gb, gp := cat(acme, a.ID), cat(acme, b.ID), cat(acme, parent); !strings.HasPrefix(ga, "A") || !strings.HasPrefix(gb, "B") || !strings.HasPrefix(gp, "base") {
		t.Fatalf("after each branch wrote its own: A sees %q, B %q, the parent %q", ga, gb, gp)
	}
	turn(acme, a.ID, "FORK-BRANCH-A go on", "A-DONE")
	turn(acme, b.ID, "FORK-BRANCH-B go on", "B-DONE")
	drivertest.CheckCarried(t, fm, "FORK-BRANCH-A", []string{"FORK-BASE"}, []string{"FORK-BRANCH-B"})
	drivertest.CheckCarried(t, fm, "FORK-BRANCH-B", []string{"FORK-BASE"}, []string{"FORK-BRANCH-A"})

	// GET: each tenant its own.
	if got := serveCheckpointIDs(serveCheckpoints(t, acme)); !slices.Equal(got, []string{base.ID, fork.Checkpoint.ID}) {
		t.Errorf("acme's checkpoints: %v, want %s and %s", got, base.ID, fork.Checkpoint.ID)
	}
	if got := serveCheckpoints(t, beta); len(got) != 0 {
		t.Errorf("beta sees checkpoints: %+v", got)
	}
	resp, out = acme.do(t, http.MethodGet, "/v1/checkpoints/"+base.ID, nil)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(base.ID)) {
		t.Errorf("GET the checkpoint: %d %s", resp.StatusCode, out)
	}
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		resp, out = beta.do(t, m, "/v1/checkpoints/"+base.ID, nil)
		wantError(t, "beta "+m+" acme's checkpoint", resp, out, http.StatusNotFound, "not_found")
	}

	// DELETE: refused while the branches run on the fork's image, done
	// once they are gone.
	if fork.Checkpoint.Image != "" {
		resp, out = acme.do(t, http.MethodDelete, "/v1/checkpoints/"+fork.Checkpoint.ID, nil)
		wantError(t, "DELETE a checkpoint branches run on", resp, out, http.StatusConflict, "conflict")
	} else {
		t.Logf("the engine made an archive: nothing runs on it, no 409 to check")
	}
	for _, br := range fork.Agents {
		if resp, out := acme.do(t, http.MethodDelete, "/v1/agents/"+br.ID, nil); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("DELETE branch: %d %s", resp.StatusCode, out)
		}
	}
	if resp, out = acme.do(t, http.MethodDelete, "/v1/checkpoints/"+fork.Checkpoint.ID, nil); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE the fork's checkpoint: %d %s", resp.StatusCode, out)
	}
	resp, out = acme.do(t, http.MethodGet, "/v1/checkpoints/"+fork.Checkpoint.ID, nil)
	wantError(t, "GET a deleted checkpoint", resp, out, http.StatusNotFound, "not_found")

	// A restart on the same state: the checkpoint is there and starts a
	// new agent on the base session; another tenant cannot use it.
	if code := r.stop(t); code != exitOK {
		t.Fatalf("serve exited %d:\n%s", code, r.stderr.String())
	}
	r = startServeWith(t, env)
	t.Cleanup(cleanup)
	acme, beta = as("acme"), as("beta")
	if got := serveCheckpointIDs(serveCheckpoints(t, acme)); !slices.Equal(got, []string{base.ID}) {
		t.Fatalf("acme's checkpoints after a restart: %v, want %s", got, base.ID)
	}
	resp, out = beta.do(t, http.MethodPost, "/v1/agents", map[string]any{"driver": checkpointDriver, "checkpoint": base.ID})
	wantError(t, "beta starts on acme's checkpoint", resp, out, http.StatusNotFound, "not_found")
	resp, out = acme.do(t, http.MethodPost, "/v1/agents", map[string]any{"driver": "pi", "checkpoint": base.ID})
	wantError(t, "another driver on the checkpoint", resp, out, http.StatusBadRequest, "invalid_argument")
	// Its image is not a request's image: the checkpoint field, checked
	// against the tenant, is the one way.
	for _, img := range []string{"sandbox-agent-checkpoint:" + base.ID, "docker.io/library/sandbox-agent-checkpoint:" + base.ID, "localhost/sandbox-agent-checkpoint:" + base.ID} {
		resp, out = beta.do(t, http.MethodPost, "/v1/agents", map[string]any{"driver": checkpointDriver, "image": img})
		wantError(t, "beta starts acme's checkpoint image "+img, resp, out, http.StatusBadRequest, "invalid_argument")
	}
	later := acme.create(t, map[string]any{"driver": checkpointDriver, "checkpoint": base.ID})
	if got := cat(acme, later); !strings.HasPrefix(got, "base") || strings.Contains(got, "from-parent") {
		t.Fatalf("the agent started on the checkpoint has %q (want the base file, not the parent's env)", got)
	}
	turn(acme, later, "FORK-LATER go on", "L-DONE")
	drivertest.CheckCarried(t, fm, "FORK-LATER", []string{"FORK-BASE"}, []string{"FORK-BRANCH-A", "FORK-BRANCH-B"})

	// The parent, adopted by the new serve, was started with env whose
	// values were never stored: its fork is refused (409), nothing made.
	resp, out = acme.do(t, http.MethodPost, "/v1/agents/"+parent+"/fork", nil)
	wantError(t, "fork after a restart of a parent with env", resp, out, http.StatusConflict, "conflict")
	if got := serveCheckpointIDs(serveCheckpoints(t, acme)); !slices.Equal(got, []string{base.ID}) {
		t.Errorf("acme's checkpoints after a refused fork: %v, want %s", got, base.ID)
	}
	// An agent this serve started (on the checkpoint, without env) forks.
	resp, out = acme.do(t, http.MethodPost, "/v1/agents/"+later+"/fork", nil)
	var fork2 struct {
		Agents     []struct{ ID string }
		Checkpoint serveCheckpointOf
	}
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(out, &fork2) != nil || len(fork2.Agents) != 1 {
		t.Fatalf("fork after a restart: %d %s\nserve stderr:\n%s", resp.StatusCode, out, r.stderr.String())
	}
	if got := cat(acme, fork2.Agents[0].ID); !strings.HasPrefix(got, "base") || strings.Contains(got, "from-parent") {
		t.Errorf("a branch forked after a restart has %q (want the base file, no env)", got)
	}
}

func serveCheckpoints(t *testing.T, c *serveProc) []serveCheckpointOf {
	t.Helper()
	resp, out := c.do(t, http.MethodGet, "/v1/checkpoints", nil)
	var list struct{ Checkpoints []serveCheckpointOf }
	if resp.StatusCode != http.StatusOK || json.Unmarshal(out, &list) != nil {
		t.Fatalf("GET /v1/checkpoints: %d %s", resp.StatusCode, out)
	}
	return list.Checkpoints
}

func serveCheckpointIDs(cs []serveCheckpointOf) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}
