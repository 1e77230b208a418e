//go:build integration

// Fault-injection tests: each drives an agent in a sandbox into a failure
// and checks the outcome is a clear, typed error with nothing lost or left
// running. The sandbox-level faults (memory hog, fork bomb, a command
// ignoring SIGTERM) are part of the runtime contract (runtime/runtimetest).
package sandboxagent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/driver/pi"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// piAgentWithTool starts pi (the lightest CLI here) against a fake model
// whose first answer runs a shell command that marks /tmp/fault-mark and
// then sleeps: the turn is then certainly mid-stream.
func piAgentWithTool(t *testing.T) (*sandboxagent.Agent, string) {
	t.Helper()
	srv := drivertest.FakeModel(t, drivertest.ShellThenDone("echo started > /tmp/fault-mark; sleep 300"))
	drv := pi.New(pi.Options{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key})
	auditRoot := drivertest.AuditRoot(t)
	return testenv.StartAgent(t, drv, auditRoot), auditRoot
}

// whenToolRuns calls fn once the fake model's shell command runs in the
// sandbox.
func whenToolRuns(ctx context.Context, sb *sandboxagent.Sandbox, fn func()) {
	go func() {
		for ctx.Err() == nil {
			res, err := sb.Exec(ctx, []string{"cat", "/tmp/fault-mark"})
			if err == nil && string(res.Stdout) == "started\n" {
				fn()
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
}

// turnEvents runs one streamed turn and returns its result, error and the
// events the callback saw.
func turnEvents(ctx context.Context, a *sandboxagent.Agent) (sandboxagent.TurnResult, error, []sandboxagent.Event) {
	var mu sync.Mutex
	var seen []sandboxagent.Event
	res, err := a.Stream(ctx, "run the command", func(e sandboxagent.Event) {
		mu.Lock()
		seen = append(seen, e)
		mu.Unlock()
	})
	mu.Lock()
	defer mu.Unlock()
	return res, err, seen
}

// checkKept checks that the turn's events up to the fault were delivered
// and written to the audit: the session, the tool call, then error and
// done.
func checkKept(t *testing.T, res sandboxagent.TurnResult, seen []sandboxagent.Event) {
	t.Helper()
	kinds := map[sandboxagent.EventKind]int{}
	for _, e := range seen {
		kinds[e.Kind]++
	}
	for _, k := range []sandboxagent.EventKind{sandboxagent.KindSession, sandboxagent.KindToolCall, sandboxagent.KindError, sandboxagent.KindDone} {
		if kinds[k] == 0 {
			t.Errorf("no %s event among %v", k, kinds)
		}
	}
	if len(res.Events) != len(seen) {
		t.Errorf("TurnResult has %d events, the callback saw %d", len(res.Events), len(seen))
	}
	if n := drivertest.AuditFiles(t, res.AuditDir, drivertest.Key); n == 0 {
		t.Errorf("audit %s kept no raw line", res.AuditDir)
	}
}

func TestIntegrationFaultContainerKilledDuringAsk(t *testing.T) {
	rt := testenv.Runtime(t)
	a, _ := piAgentWithTool(t)
	ctx := drivertest.Ctx(t)
	killedAt := make(chan time.Time, 1)
	killErr := make(chan error, 1)
	whenToolRuns(ctx, a.Container(), func() {
		killedAt <- time.Now()
		// Its own context: Podman answers the kill only once the
		// container is cleaned up, which may be after the turn ended.
		kctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		killErr <- rt.Kill(kctx, a.Container().ID())
	})
	res, err, seen := turnEvents(ctx, a)
	var at time.Time
	select {
	case at = <-killedAt:
	default:
		t.Fatalf("the turn ended before the container was killed: %v", err)
	}
	t.Logf("Ask returned %v after the kill: %v", time.Since(at), err)
	if kerr := <-killErr; kerr != nil {
		t.Errorf("kill: %v", kerr)
	}
	if !errors.Is(err, sandboxagent.ErrContainerNotFound) {
		t.Errorf("want an error wrapping ErrContainerNotFound, got %v", err)
	}
	checkKept(t, res, seen)
	if err := a.Close(); err != nil {
		t.Errorf("Close after the container died: %v", err)
	}
	if _, err := rt.Inspect(ctx, a.Container().ID()); !errors.Is(err, sandboxagent.ErrContainerNotFound) {
		t.Errorf("container still there after Close: %v", err)
	}
}

func TestIntegrationFaultCLICrashesMidStream(t *testing.T) {
	a, _ := piAgentWithTool(t)
	ctx := drivertest.Ctx(t)
	crashing := make(chan struct{})
	crashed := make(chan error, 1)
	whenToolRuns(ctx, a.Container(), func() {
		close(crashing)
		// SIGSEGV to the CLI while its tool runs (pi names its node
		// process "pi"). Retried: on a loaded machine a try may miss.
		var err error
		for range 5 {
			var res sandboxagent.ExecResult
			res, err = a.Container().Exec(ctx, []string{"sh", "-c", "pkill -SEGV -x pi || pkill -SEGV -x node || { ps -eo pid,ppid,comm,args; exit 1; }"})
			if err == nil && res.ExitCode == 0 {
				break
			}
			if err == nil {
				err = fmt.Errorf("pkill exit %d; processes:\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
			}
			time.Sleep(time.Second)
		}
		crashed <- err
	})
	res, err, seen := turnEvents(ctx, a)
	select {
	case <-crashing:
	default:
		t.Fatalf("the turn ended before the CLI was crashed: %v", err)
	}
	// pkill's own exec may report after the turn has ended.
	if kerr := <-crashed; kerr != nil {
		t.Fatalf("crashing the CLI: %v", kerr)
	}
	var de *sandboxagent.DriverError
	if !errors.As(err, &de) || de.ExitCode != 128+11 {
		t.Fatalf("want a DriverError with exit 139, got %#v", err)
	}
	t.Logf("reported: %v", err)
	checkKept(t, res, seen)
	// The sandbox outlives its CLI.
	out, err := a.Container().Exec(ctx, []string{"echo", "ok"})
	if err != nil || string(out.Stdout) != "ok\n" {
		t.Errorf("sandbox after the crash: %q %v", out.Stdout, err)
	}
}

// piShim goes first in PATH and prints what no CLI should before running
// the real pi: text that is not JSON, a cut-off object, binary bytes and
// one 256 MiB line.
const piShim = `#!/bin/sh
echo 'this is not json {'
printf '{"type":"message_update","half":'; echo
head -c 268435456 /dev/zero | tr '\0' x; echo
printf '\377\376 binary \001 garbage\n'
exec /usr/local/bin/pi "$@"
`

func TestIntegrationFaultCLIMalformedAndEnormousLines(t *testing.T) {
	srv := drivertest.FakeModel(t, fakemodel.Script{Responses: []fakemodel.Step{{Text: "DONE"}}})
	drv := pi.New(pi.Options{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key})
	a := testenv.StartAgent(t, drv, drivertest.AuditRoot(t))
	ctx := drivertest.Ctx(t)
	res, err := a.Container().Run(ctx, sandboxagent.ExecRequest{
		Cmd: []string{"sh", "-c", "cat > /usr/local/sbin/pi && chmod 755 /usr/local/sbin/pi"}, User: "root", Stdin: strings.NewReader(piShim),
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("install the shim: exit %d %v %s", res.ExitCode, err, res.Stderr)
	}

	// Peak heap while 256 MiB go through one line: the agent keeps at most
	// 8 MiB of a line, in several copies (line buffer, audit, raw event and
	// its JSON) plus garbage the GC has not collected yet — about 80 MiB
	// measured whether the line is 64 or 256 MiB. Holding the line would
	// take 256 MiB.
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	stop := make(chan struct{})
	peak := make(chan uint64)
	go func() {
		var m runtime.MemStats
		var most uint64
		for {
			runtime.ReadMemStats(&m)
			most = max(most, m.HeapInuse)
			select {
			case <-stop:
				peak <- most
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	turn, err, seen := turnEvents(ctx, a)
	close(stop)
	grew := int64(<-peak) - int64(before.HeapInuse)
	t.Logf("heap grew by at most %d MiB while a 256 MiB line streamed", grew>>20)
	if err != nil {
		t.Fatalf("the turn failed: %v", err)
	}
	if turn.Reply != "DONE" {
		t.Errorf("reply %q, want DONE: the real CLI's output after the garbage was lost", turn.Reply)
	}
	if grew > 128<<20 {
		t.Errorf("heap grew by %d MiB: output is not bounded", grew>>20)
	}
	var raw, cut int
	for _, e := range seen {
		if e.Kind == sandboxagent.KindRaw {
			raw++
			if e.Payload.IsError && strings.Contains(e.Payload.Text, "was cut") {
				cut++
			}
		}
	}
	if raw < 4 || cut != 1 {
		t.Errorf("%d raw events and %d cut-line reports; want the 4 bad lines as raw events and one cut report", raw, cut)
	}
	if fi, err := os.Stat(filepath.Join(turn.AuditDir, "session.jsonl")); err != nil || fi.Size() > 16<<20 {
		t.Errorf("audit session.jsonl: %v (size %d): want it written and bounded", err, fi.Size())
	}
}
