//go:build integration

package codex_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/codex"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// newDriver is a codex driver for the fake model srv.
func newDriver(srv *fakemodel.Server) *codex.Driver {
	return codex.New(codex.Options{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key})
}

// perTurn is the agent option of `codex exec` per turn (the driver's
// other mode).
func perTurn(t *testing.T) sandboxagent.AgentOption {
	cfg := testenv.Config()
	cfg.AuditRoot = drivertest.AuditRoot(t)
	cfg.Timeouts.Ask = 4 * time.Minute
	cfg.PerTurn = true
	return sandboxagent.WithConfig(cfg)
}

func TestCodexShellThenDone(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"long-lived", "per-turn"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var opts []sandboxagent.AgentOption
			want := drivertest.ShellWant{Tool: "command_execution", Capture: "serve-shell-done"}
			if mode == "per-turn" {
				opts = append(opts, perTurn(t))
				want.Capture = ""
			}
			a, _, _ := testenv.Start(t, drivertest.ShellThenDone(drivertest.ShellCommand), newDriver, opts...)
			drivertest.ShellTurn(t, a, want)
		})
	}
}

func TestCodexUnauthorized(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"long-lived", "per-turn"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var opts []sandboxagent.AgentOption
			if mode == "per-turn" {
				opts = append(opts, perTurn(t))
			}
			a, _, _ := testenv.Start(t, drivertest.Unauthorized(), newDriver, opts...)
			b := drivertest.CheckBadKey(t, a, "codex")
			if mode == "long-lived" {
				drivertest.Capture(t, b.Res, b.Err, "serve-401")
			}
			// `codex exec` exits 1; app-server reports the failure in
			// turn/completed and lives on (exit code 0: none).
			if (b.DE.ExitCode == 0) != (mode == "long-lived") {
				t.Errorf("exit code %d", b.DE.ExitCode)
			}
		})
	}
}

// appServers lists the pids of the native `codex app-server` processes in
// the sandbox (from /proc: not every image has procps).
func appServers(t *testing.T, a *sandboxagent.Agent) []string {
	t.Helper()
	scan := `for p in /proc/[0-9]*; do [ "$(cat "$p/comm" 2>/dev/null)" = codex ] || continue; c=$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null) || continue; case "$c" in *" app-server "*) echo "${p#/proc/}";; esac; done`
	out, err := a.Container().Exec(drivertest.Ctx(t), []string{"sh", "-c", scan})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out.Stdout))
}

// TestCodexLongLived: follow-up turns run on the one app-server and
// continue its thread; ListSessions sees the thread app-server writes; a
// turn that names another session resumes it on another app-server.
func TestCodexLongLived(t *testing.T) {
	t.Parallel()
	a, drv, srv := testenv.Start(t, fakemodel.Script{Responses: []fakemodel.Step{{Text: "ONE"}, {Text: "TWO"}, {Text: "THREE"}, {Text: "FOUR"}}}, newDriver)
	ctx := drivertest.Ctx(t)
	var procs []string
	var session string
	for i, prompt := range []string{"LL-FIRST-1a", "LL-SECOND-2b", "LL-THIRD-3c"} {
		n := len(srv.Requests())
		res, err := a.Stream(ctx, prompt, nil)
		if err != nil || res.Reply != []string{"ONE", "TWO", "THREE"}[i] {
			t.Fatalf("turn %d: %q, %v", i+1, res.Reply, err)
		}
		drivertest.Capture(t, res, err, []string{"serve-text", "serve-followup", ""}[i])
		if session == "" {
			session = res.SessionID
		}
		if res.SessionID != session || session == "" {
			t.Errorf("turn %d on session %q, want %q", i+1, res.SessionID, session)
		}
		if i > 0 && !strings.Contains(drivertest.RequestText(t, srv, n), "LL-FIRST-1a") {
			t.Errorf("turn %d's request lacks turn 1: the thread was not continued", i+1)
		}
		kinds := map[sandboxagent.EventKind]int{}
		for _, ev := range res.Events {
			kinds[ev.Kind]++
			if ev.Kind == sandboxagent.KindRaw {
				t.Errorf("turn %d: raw event %.300s", i+1, ev.Payload.Raw)
			}
		}
		if kinds[sandboxagent.KindSession] != 1 || kinds[sandboxagent.KindUsage] != 1 || kinds[sandboxagent.KindText] != 1 {
			t.Errorf("turn %d: events %v", i+1, kinds)
		}
		p := appServers(t, a)
		if len(p) != 1 || procs != nil && !slices.Equal(p, procs) {
			t.Errorf("after turn %d, app-servers %v (after turn 1: %v)", i+1, p, procs)
		}
		procs = p
	}
	list, err := drv.ListSessions(ctx, a.Container())
	if err != nil || len(list) != 1 || list[0].ID != session {
		t.Fatalf("ListSessions = %+v, %v; want %s", list, err, session)
	}
	// A fork, resumed: another app-server on the fork's thread.
	fork, err := drv.Fork(ctx, a.Container(), session)
	if err != nil {
		t.Fatal(err)
	}
	a.SetSession(fork)
	n := len(srv.Requests())
	res, err := a.Stream(ctx, "LL-FORK-4d", nil)
	if err != nil || res.Reply != "FOUR" || res.SessionID != fork {
		t.Fatalf("fork turn: %q on %q, %v (fork %s)", res.Reply, res.SessionID, err, fork)
	}
	drivertest.Capture(t, res, err, "serve-resume")
	if !strings.Contains(drivertest.RequestText(t, srv, n), "LL-THIRD-3c") {
		t.Error("the fork's turn lacks the forked history")
	}
	if p := appServers(t, a); len(p) != 1 || slices.Equal(p, procs) {
		t.Errorf("after the fork's turn, app-servers %v (before: %v)", p, procs)
	}
}

// TestCodexAbort: an aborted turn ends through turn/interrupt (the
// app-server lives on, its tool's process is gone) and the next turn
// answers on the same thread.
func TestCodexAbort(t *testing.T) {
	t.Parallel()
	a, _, _ := testenv.Start(t, fakemodel.Script{Responses: []fakemodel.Step{
		{Tool: fakemodel.ToolShell, Command: drivertest.EndlessCommand},
		{Text: "AFTER-ABORT"},
	}}, newDriver)
	ctx := drivertest.Ctx(t)
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for tctx.Err() == nil {
			if drivertest.EndlessRunning(ctx, a) == "1" {
				cancel()
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	before := time.Now()
	res, err := a.Stream(tctx, "Run it.", nil)
	took := time.Since(before)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("aborted turn: %v", err)
	}
	drivertest.Capture(t, res, err, "serve-interrupt")
	procs := appServers(t, a)
	if len(procs) != 1 {
		t.Errorf("app-servers after the abort: %v", procs)
	}
	if n := drivertest.EndlessRunning(ctx, a); n != "0" {
		t.Errorf("after the abort, %s processes of its tool", n)
	}
	res, err = a.Stream(ctx, "And now?", nil)
	if err != nil || res.Reply != "AFTER-ABORT" {
		t.Fatalf("turn after the abort: %q, %v", res.Reply, err)
	}
	if p := appServers(t, a); !slices.Equal(p, procs) {
		t.Errorf("app-servers %v, before %v: the abort killed it", p, procs)
	}
	t.Logf("aborted turn took %v", took)
}

// TestCodexResumeUnknown: a thread app-server cannot resume fails the
// turn with the bridge's error.
func TestCodexResumeUnknown(t *testing.T) {
	t.Parallel()
	a, _, srv := testenv.Start(t, fakemodel.Script{Responses: []fakemodel.Step{{Text: "NEVER"}}}, newDriver)
	a.SetSession("01a226c1-0000-7000-8000-000000000000")
	res, err := a.Stream(drivertest.Ctx(t), "hello", nil)
	var de *sandboxagent.DriverError
	if !errors.As(err, &de) || !strings.Contains(de.Message, "01a226c1-0000-7000-8000-000000000000") {
		t.Fatalf("err %v", err)
	}
	drivertest.Capture(t, res, err, "serve-resume-unknown")
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("%d model requests", n)
	}
}
