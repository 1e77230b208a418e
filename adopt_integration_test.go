//go:build integration

package sandboxagent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/gc"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// adoptChildEnv carries the first half of an adoption test to the child
// process (TestIntegrationAdoptChild) as JSON.
const adoptChildEnv = "SANDBOX_AGENT_ADOPT_CHILD"

// adoptChild is what the child is told.
type adoptChild struct {
	Driver, Model, AuditRoot, Owner, Prompt string
	PerTurn                                 bool
	// MidTurn: after the first turn the child starts a second (whose
	// tool never ends) and writes its state again once the tool runs.
	MidTurn bool
	Out     string // where the child writes adoptOut
}

// adoptOut is what the child leaves for the parent before it is killed.
type adoptOut struct {
	State            sandboxagent.AgentState
	Reply, Session   string
	AuditDir, NetDir string
	Err              string
}

// adoptConfig is both processes' configuration.
func adoptConfig(root string, perTurn bool) sandboxagent.Config {
	cfg := testenv.Config()
	cfg.AuditRoot = root
	cfg.Timeouts.Ask = 4 * time.Minute
	cfg.PerTurn = perTurn
	return cfg
}

func adoptDriver(name, url string) sandboxagent.Driver {
	return drivers.All()[name](drivers.Endpoint{BaseURL: url + "/v1", APIKey: drivertest.Key, Provider: "sandbox"})
}

// writeJSON writes v to path at once (rename), so the reader never sees
// half of it.
func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// TestIntegrationAdoptChild is the first half of TestIntegrationAdopt, run
// in a child process that the parent SIGKILLs: it starts the agent, runs
// a turn, writes its state and waits to die.
func TestIntegrationAdoptChild(t *testing.T) {
	spec := os.Getenv(adoptChildEnv)
	if spec == "" {
		t.Skip("the first half of TestIntegrationAdopt (a child process)")
	}
	var c adoptChild
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		t.Fatal(err)
	}
	url := os.Getenv(adoptChildEnv + "_URL")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out := adoptOut{}
	a, err := sandboxagent.Start(ctx, testenv.Runtime(t), adoptDriver(c.Driver, url),
		sandboxagent.WithConfig(adoptConfig(c.AuditRoot, c.PerTurn)), sandboxagent.WithOwner(c.Owner), sandboxagent.WithModel(c.Model))
	if err != nil {
		out.Err = "start: " + err.Error()
		_ = writeJSON(c.Out, out)
		t.Fatal(err)
	}
	res, err := a.Stream(ctx, c.Prompt, nil)
	out = adoptOut{State: a.State(), Reply: res.Reply, Session: res.SessionID, AuditDir: res.AuditDir, NetDir: a.NetworkAuditDir()}
	if err != nil {
		out.Err = err.Error()
	}
	if c.MidTurn && err == nil {
		go a.Ask(ctx, "ADOPT-ENDLESS run the command") // killed with this process
		for ctx.Err() == nil && drivertest.EndlessRunning(ctx, a) != "1" {
			time.Sleep(200 * time.Millisecond)
		}
		out.State = a.State() // the running turn counts
	}
	if err := writeJSON(c.Out, out); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Minute) // until SIGKILL: no Close, nothing cleaned up
}

// TestIntegrationAdopt: an agent whose host process was SIGKILLed after a
// turn (in a child process: no Close, its proxies' sockets left behind,
// its sandbox running) is adopted from its State by this process, and
// the next turn works: through the model proxy at the same socket and
// port with the same token (the fake model answers, expecting the real
// key), continuing the session (turn 1's prompt is in what the model
// gets), numbered on, in the same audit folders. Meanwhile gc keeps the
// sandbox (owned by a server) although its PID is dead. Every driver in
// its default mode (long-lived where it has one), pi per turn, and pi and
// dsh killed during a turn whose tool never ends (the adoption stops it).
func TestIntegrationAdopt(t *testing.T) {
	rt := testenv.Runtime(t)
	type tc struct {
		name             string
		perTurn, midTurn bool
	}
	var cases []tc
	for _, name := range drivers.Names() {
		cases = append(cases, tc{name: name})
	}
	cases = append(cases, tc{name: "pi", perTurn: true}, tc{name: "pi", midTurn: true}, tc{name: "dsh", midTurn: true})
	for _, c := range cases {
		label := c.name
		if c.perTurn {
			label += "/per_turn"
		}
		if c.midTurn {
			label += "/mid_turn"
		}
		t.Run(label, func(t *testing.T) {
			t.Parallel()
			steps := []fakemodel.Step{{Text: "ONE"}}
			if c.midTurn {
				steps = append(steps, fakemodel.Step{Tool: fakemodel.ToolShell, Command: drivertest.EndlessCommand})
			}
			srv := drivertest.FakeModel(t, fakemodel.Script{Responses: append(steps, fakemodel.Step{Text: "TWO"})})
			root := drivertest.AuditRoot(t)
			marker := "ADOPT-ONE-" + randomHex()
			owner := "it-adopt-" + randomHex()
			child := adoptChild{
				Driver: c.name, AuditRoot: root, Owner: owner, PerTurn: c.perTurn, MidTurn: c.midTurn,
				Prompt: marker + " say one", Out: filepath.Join(t.TempDir(), "out.json"),
			}
			out := runAdoptChild(t, srv.URL(), child)
			st := out.State
			t.Cleanup(func() { _ = rt.Remove(context.Background(), st.SandboxID) })
			if out.Err != "" || out.Reply != "ONE" {
				t.Fatalf("turn 1 in the child: %q %s", out.Reply, out.Err)
			}
			wantTurns := 1
			if c.midTurn {
				wantTurns = 2
			}
			_, longLived := adoptDriver(c.name, srv.URL()).(sandboxagent.LongLived)
			if st.Turns != wantTurns || st.Session != out.Session || st.LongLived != (longLived && !c.perTurn) || st.ModelToken == "" || st.ModelPort == 0 || st.SocketDir == "" {
				t.Fatalf("state %+v", st)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
			defer cancel()
			// The dead host left its sockets; gc keeps the owned sandbox.
			if _, err := os.Lstat(filepath.Join(st.SocketDir, "model.sock")); err != nil {
				t.Errorf("socket after SIGKILL: %v", err)
			}
			swept, err := gc.Run(ctx, rt, gc.Options{DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			if !gcKept(swept, st.SandboxID, "owned by server "+owner) {
				t.Errorf("gc did not keep the owned sandbox: %+v", swept)
			}
			t.Logf("the dead host's CLI processes before adoption: %s", turnProcs(ctx, rt, st.SandboxID))

			n := len(srv.Requests())
			cfg := adoptConfig(root, false) // the state's mode wins
			a, err := sandboxagent.Adopt(ctx, rt, adoptDriver(c.name, srv.URL()), st, sandboxagent.WithConfig(cfg), sandboxagent.WithOwner(owner))
			if err != nil {
				t.Fatalf("Adopt: %v", err)
			}
			defer a.Close()
			if c.midTurn {
				if got := turnProcs(ctx, rt, st.SandboxID); got != "0" {
					t.Errorf("the dead host's turn still runs after adoption: %s processes", got)
				}
			}
			res, err := a.Stream(ctx, "ADOPT-TWO say two", nil)
			if err != nil || res.Reply != "TWO" {
				t.Fatalf("turn after adoption: %q %v (events %+v)", res.Reply, err, res.Events)
			}
			if res.SessionID != out.Session {
				t.Errorf("session %q, then %q", out.Session, res.SessionID)
			}
			if !strings.Contains(drivertest.RequestText(t, srv, n), marker) {
				t.Errorf("the model's request after adoption lacks turn 1's prompt: the session was not continued")
			}
			for _, ev := range res.Events {
				if ev.Turn != wantTurns+1 {
					t.Errorf("event of turn %d, want %d: %+v", ev.Turn, wantTurns+1, ev)
					break
				}
			}
			if res.AuditDir != out.AuditDir || a.NetworkAuditDir() != out.NetDir {
				t.Errorf("audit folders %s %s, then %s %s", out.AuditDir, out.NetDir, res.AuditDir, a.NetworkAuditDir())
			}
			if model, err := os.ReadFile(filepath.Join(out.NetDir, "model.jsonl")); err != nil || bytes.Count(model, []byte("\n")) < len(srv.Requests()) {
				t.Errorf("model.jsonl has %d lines for %d model requests: %v", bytes.Count(model, []byte("\n")), len(srv.Requests()), err)
			}
			if st2 := a.State(); st2.ModelToken != st.ModelToken || st2.ModelPort != st.ModelPort || st2.SocketDir != st.SocketDir || st2.Turns != wantTurns+1 {
				t.Errorf("state after adoption %+v", st2)
			}
			status, _ := os.ReadFile(filepath.Join(res.AuditDir, "status.json"))
			if !bytes.Contains(status, []byte(`"turn": 1`)) || !bytes.Contains(status, []byte(fmt.Sprintf(`"turn": %d`, wantTurns+1))) {
				t.Errorf("status.json does not list the turns before and after adoption: %s", status)
			}
		})
	}
}

// Adopt of a sandbox that was removed reports it lost: ErrContainerNotFound
// with the engine's words.
func TestIntegrationAdoptRemoved(t *testing.T) {
	t.Parallel()
	srv := drivertest.FakeModel(t, fakemodel.Script{})
	a := testenv.StartAgent(t, adoptDriver("pi", srv.URL()), drivertest.AuditRoot(t))
	st := a.State()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := sandboxagent.Adopt(context.Background(), testenv.Runtime(t), adoptDriver("pi", srv.URL()), st, sandboxagent.WithConfig(testenv.Config()))
	var lost *sandboxagent.SandboxLostError
	if !errors.Is(err, sandboxagent.ErrContainerNotFound) || !errors.As(err, &lost) || lost.Status != "" || lost.Name != st.SandboxName {
		t.Fatalf("Adopt of a removed sandbox: %v", err)
	}
	t.Logf("reported: %v", err)
}

// runAdoptChild runs the first half in a child process (this binary),
// waits for what it writes, SIGKILLs it and returns what it wrote.
func runAdoptChild(t *testing.T, url string, c adoptChild) adoptOut {
	t.Helper()
	spec, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(t.TempDir(), "child.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestIntegrationAdoptChild$", "-test.v", "-test.timeout=30m")
	cmd.Env = append(os.Environ(), adoptChildEnv+"="+string(spec), adoptChildEnv+"_URL="+url)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	childLog := func() string { b, _ := os.ReadFile(log.Name()); return string(b) }
	deadline := time.After(8 * time.Minute)
	for {
		if b, err := os.ReadFile(c.Out); err == nil {
			var out adoptOut
			if err := json.Unmarshal(b, &out); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Process.Kill(); err != nil { // SIGKILL: the host dies without a word
				t.Fatal(err)
			}
			<-exited
			if strings.Contains(out.Err, "image not found") {
				prereq.Missing(t, "%s", out.Err)
			}
			return out
		}
		select {
		case err := <-exited:
			if strings.Contains(childLog(), "image not found") {
				prereq.Missing(t, "child: %v", err)
			}
			t.Fatalf("the child exited before writing its state: %v\n%s", err, childLog())
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("the child wrote no state in time\n%s", childLog())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// gcKept reports whether gc kept the container with that reason.
func gcKept(res gc.Result, id, reason string) bool {
	for _, e := range res.Kept {
		if e.ID == id && e.Reason == reason {
			return true
		}
	}
	return false
}

// turnProcs counts the processes of the agent's CLI turns in the sandbox
// (those carrying its turn tag), or says why it could not.
func turnProcs(ctx context.Context, rt sandboxagent.Runtime, id string) string {
	var out bytes.Buffer
	tag := "SANDBOX_AGENT_TURN=" + id
	_, err := rt.Exec(ctx, id, sandboxagent.RuntimeExec{
		Cmd:    []string{"sh", "-c", `grep -lzxF -e "$1" /proc/[0-9]*/environ 2>/dev/null | grep -c . || true`, "sh", tag},
		Stdout: &out, Stderr: &out,
	})
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(out.String())
}

func randomHex() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
