//go:build integration

package conformance_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// TestConformanceFork: the whole sandbox forks. An agent writes a file
// and runs a turn; Fork(2); each branch changes the file its own way and
// neither the other branch nor the original sees it; each branch's next
// turn carries the base session and not the other's turns, the
// original's carries neither; a checkpoint started after the original
// closed has the base files and session.
func TestConformanceFork(t *testing.T) {
	var subs []subtest
	for _, name := range drivers.Names() {
		subs = append(subs, subtest{name, func(t *testing.T) {
			forkScenario(t, testenv.Runtime(t), name, sandboxagent.WithConfig(forkConfig(t)))
		}})
	}
	runConcurrently(t, subs)
}

// forkConfig is the test environment's, with the archives of checkpoints
// (engines without commits) in the test's folder.
func forkConfig(t *testing.T) sandboxagent.Config {
	cfg := testenv.Config()
	cfg.AuditRoot = drivertest.AuditRoot(t)
	cfg.Timeouts.Ask = 5 * time.Minute
	cfg.CheckpointRoot = filepath.Join(t.TempDir(), "checkpoints")
	return cfg
}

// forkScenario runs the fork's checks for driver name on rt.
func forkScenario(t *testing.T, rt sandboxagent.Runtime, name string, opts ...sandboxagent.AgentOption) {
	srv := drivertest.FakeModel(t, fakemodel.Script{Responses: []fakemodel.Step{
		{Tool: fakemodel.ToolShell, Command: "echo base > fork-state.txt && echo written"},
		{Text: "BASE-DONE"},
		{Text: "A-DONE"},
		{Text: "B-DONE"},
		{Text: "O-DONE"},
		{Text: "L-DONE"},
	}})
	drv := drivers.All()[name](drivers.Endpoint{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key, Provider: "sandbox"})
	a := drivertest.StartAgent(t, rt, drv, drivertest.AuditRoot(t), opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	turn := func(ag *sandboxagent.Agent, prompt, want string) {
		t.Helper()
		res, err := ag.Stream(ctx, prompt, nil)
		if err != nil || !strings.Contains(res.Reply, want) {
			t.Fatalf("%s: reply %q, %v; want %s", prompt, res.Reply, err, want)
		}
	}
	file := func(ag *sandboxagent.Agent) string {
		t.Helper()
		res, err := ag.Container().Exec(ctx, []string{"cat", "fork-state.txt"})
		if err != nil {
			t.Fatalf("read fork-state.txt: %v", err)
		}
		return strings.TrimSpace(string(res.Stdout))
	}
	turn(a, "FORK-BASE write the file", "BASE-DONE")
	if got := file(a); got != "base" {
		t.Fatalf("the base turn left %q in fork-state.txt", got)
	}

	base, err := a.Checkpoint(ctx, "base")
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	t.Cleanup(func() { removeCheckpoint(t, rt, base) })
	t.Logf("checkpoint %s: image %q archive %q, %d bytes", base.ID, base.Image, base.Archive, base.Size)
	t0 := time.Now()
	branches, err := a.Fork(ctx, 2)
	if err != nil {
		t.Fatalf("Fork(2): %v", err)
	}
	t.Logf("Fork(2) took %v", time.Since(t0))
	t.Cleanup(func() { pruneForks(t, rt, a.Container().Name()) }) // after the branches closed
	for _, b := range branches {
		t.Cleanup(func() { b.Close() })
	}
	names := map[string]bool{a.Container().Name(): true}
	for i, b := range branches {
		if names[b.Container().Name()] {
			t.Fatalf("branch %d shares sandbox %s", i, b.Container().Name())
		}
		names[b.Container().Name()] = true
		if got := file(b); got != "base" {
			t.Fatalf("branch %d starts with %q in fork-state.txt", i, got)
		}
	}
	for i, v := range []string{"A", "B"} {
		if res, err := branches[i].Container().Exec(ctx, []string{"sh", "-c", "echo " + v + " > fork-state.txt"}); err != nil || res.ExitCode != 0 {
			t.Fatalf("branch %s: write: %+v %v", v, res, err)
		}
	}
	if a, b, o := file(branches[0]), file(branches[1]), file(a); a != "A" || b != "B" || o != "base" {
		t.Fatalf("after each branch wrote its own: branch A sees %q, branch B %q, the original %q", a, b, o)
	}

	// One turn at a time: the fake model's steps are consumed in order.
	turn(branches[0], "FORK-BRANCH-A go on", "A-DONE")
	turn(branches[1], "FORK-BRANCH-B go on", "B-DONE")
	turn(a, "FORK-ORIGINAL go on", "O-DONE")
	drivertest.CheckCarried(t, srv, "FORK-BRANCH-A", []string{"FORK-BASE"}, []string{"FORK-BRANCH-B", "FORK-ORIGINAL"})
	drivertest.CheckCarried(t, srv, "FORK-BRANCH-B", []string{"FORK-BASE"}, []string{"FORK-BRANCH-A", "FORK-ORIGINAL"})
	drivertest.CheckCarried(t, srv, "FORK-ORIGINAL", []string{"FORK-BASE"}, []string{"FORK-BRANCH-A", "FORK-BRANCH-B"})

	// The checkpoint outlives its agent.
	a.Close()
	later, err := sandboxagent.StartFrom(ctx, rt, drv, base, opts...)
	if err != nil {
		t.Fatalf("StartFrom after the original closed: %v", err)
	}
	t.Cleanup(func() { later.Close() })
	if got := file(later); got != "base" {
		t.Fatalf("started from the checkpoint: fork-state.txt holds %q", got)
	}
	turn(later, "FORK-LATER go on", "L-DONE")
	drivertest.CheckCarried(t, srv, "FORK-LATER", []string{"FORK-BASE"}, []string{"FORK-BRANCH-A", "FORK-BRANCH-B", "FORK-ORIGINAL"})
}

// checkpointEngine is rt as the checkpoint package's engine, nil when it
// keeps no images.
func checkpointEngine(rt sandboxagent.Runtime) checkpoint.Engine {
	eng, _ := rt.(checkpoint.Engine)
	return eng
}

func removeCheckpoint(t *testing.T, rt sandboxagent.Runtime, c sandboxagent.Checkpoint) {
	if err := checkpoint.Remove(context.Background(), checkpointEngine(rt), rootOf(c), c); err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("remove checkpoint %s: %v", c.ID, err)
	}
}

// pruneForks removes the checkpoints Fork made of the sandbox parent.
func pruneForks(t *testing.T, rt sandboxagent.Runtime, parent string) {
	all, err := checkpoint.List(context.Background(), checkpointEngine(rt), "")
	if err != nil {
		t.Errorf("list checkpoints: %v", err)
	}
	for _, c := range all {
		if c.Parent == parent {
			removeCheckpoint(t, rt, c)
		}
	}
}

// rootOf is the checkpoint root an archived checkpoint lies in.
func rootOf(c sandboxagent.Checkpoint) string {
	if c.Archive == "" {
		return ""
	}
	return c.Archive[:strings.LastIndex(c.Archive, "/")]
}

// noCommit hides the engine's commit (a Runtime without it), so the
// checkpoint is an archive, as on Kubernetes.
type noCommit struct{ sandboxagent.Runtime }

func (n noCommit) Features() sandboxagent.RuntimeFeatures { return sandboxagent.FeaturesOf(n.Runtime) }

// TestConformanceForkArchive is TestConformanceFork's scenario for pi with
// the checkpoint as an archive (the working directory and the driver's
// session dump) on this engine: the path Kubernetes takes, on every run.
func TestConformanceForkArchive(t *testing.T) {
	forkScenario(t, noCommit{testenv.Runtime(t)}, "pi", sandboxagent.WithConfig(forkConfig(t)))
}
