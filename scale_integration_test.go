//go:build integration

package sandboxagent_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/runtime/docker"
	"github.com/sandbox-agent/sandbox-agent/runtime/execlimit"
	"github.com/sandbox-agent/sandbox-agent/runtime/startlimit"
)

// Scale benchmark settings. SANDBOX_AGENT_SCALE_N and
// SANDBOX_AGENT_SCALE_DRIVER change the first two;
// SANDBOX_AGENT_MAX_CONCURRENT_STARTS (the max_concurrent_starts key)
// bounds the starts; SANDBOX_AGENT_MAX_CONCURRENT_EXECS (the
// max_concurrent_execs key; "off": no exec queue, the baseline) the
// execs, on Docker; SANDBOX_AGENT_SCALE_EGRESS (none, model, open) sets
// the sandboxes' egress (default: the agents' default, model).
const (
	scaleDefaultN = 50
	// scaleDefaultDriver is the CLI with the least CPU per fake-model turn
	// measured on the reference machine (see BENCHMARKS.md).
	scaleDefaultDriver = "codex"
	scaleExecs         = 20 // `true` execs per sandbox
	// scaleBudget bounds the whole round (every start, exec and ask); a
	// stuck engine or CLI fails the benchmark instead of hanging it.
	scaleBudget = 15 * time.Minute
	scaleLabel  = "sandbox-agent.bench-scale"
)

// BenchmarkScale starts N agents (default 50) at once from N goroutines,
// through one startlimit.Wrap(rt, max_concurrent_starts) runtime (the queue),
// its execs through one execlimit queue (max_concurrent_execs, on Docker).
// Each runs scaleExecs execs of `true`, then one Ask through a real agent
// CLI against one shared fake model, then a follow-up Ask of the session
// (wall and CPU reported apart: a long-lived CLI serves it without a
// start). It reports p50/p95/p99 of start (with
// its queue wait and the driver's setup), exec, ask and ask overhead (ask
// wall time minus the CLI's own Runtime.Exec: what sandbox-agent adds),
// the host memory per idle sandbox, and fails on any error, on a name
// collision, or on a sandbox left behind after Close. A round is minutes
// of work, so it runs once per process whatever b.N (a second call, as
// -benchtime 50x makes, reports the same round again). Run it with
//
//	go test -tags integration -run '^$' -bench '^BenchmarkScale$' -benchtime 1x -timeout 30m .
//
// (.ci/bench does, with the other benchmarks and the machine's description).
// scaleRuntime is the runtime of the round: Docker (DOCKER_HOST), or a
// Kubernetes cluster when the build tag kubernetes is set
// (scale_kubernetes_integration_test.go). Egress is the default (model).
var scaleRuntime = func(b *testing.B) sandboxagent.Runtime { return testenv.Runtime(b) }

func BenchmarkScale(b *testing.B) {
	if scaleDone != nil {
		b.Logf("one round per process: reporting the round already run (b.N=%d)", b.N)
		for _, m := range scaleDone {
			b.ReportMetric(m.v, m.unit)
		}
		return
	}
	n := scaleDefaultN
	if v := os.Getenv("SANDBOX_AGENT_SCALE_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("SANDBOX_AGENT_SCALE_N=%q: want a positive integer", v)
		}
	}
	driverName := scaleDefaultDriver
	if v := os.Getenv("SANDBOX_AGENT_SCALE_DRIVER"); v != "" {
		driverName = v
	}
	egress := sandboxagent.Egress(os.Getenv("SANDBOX_AGENT_SCALE_EGRESS"))
	switch egress {
	case "", sandboxagent.EgressNone, sandboxagent.EgressModel, sandboxagent.EgressOpen:
	default:
		b.Fatalf("SANDBOX_AGENT_SCALE_EGRESS=%q: want none, model or open", egress)
	}
	// The start queue's width, as the command line reads it.
	width := startlimit.DefaultWidth
	if v := os.Getenv("SANDBOX_AGENT_MAX_CONCURRENT_STARTS"); v != "" {
		var err error
		if width, err = strconv.Atoi(v); err != nil || width < 1 {
			b.Fatalf("SANDBOX_AGENT_MAX_CONCURRENT_STARTS=%q: want a positive integer", v)
		}
	}
	// The exec queue's width, as the command line reads it (0: the
	// default); "off" runs without one.
	execWidth := execlimit.DefaultWidth
	if v := os.Getenv("SANDBOX_AGENT_MAX_CONCURRENT_EXECS"); v == "off" {
		execWidth = 0
	} else if v != "" {
		w, err := strconv.Atoi(v)
		if err != nil || w < 0 {
			b.Fatalf("SANDBOX_AGENT_MAX_CONCURRENT_EXECS=%q: want a width (0: the default) or off", v)
		}
		execWidth = execlimit.New(w).Width()
	}
	cfg := testenv.Config()
	cfg.AuditRoot = filepath.Join(b.TempDir(), "audit") // the audit trail is part of the work
	// Generous: 50 CLIs starting together on 2 cores take minutes.
	cfg.Timeouts.Start = 5 * time.Minute
	cfg.Timeouts.Exec = 2 * time.Minute
	cfg.Timeouts.Ask = 10 * time.Minute
	// SANDBOX_AGENT_PER_TURN=true runs a long-lived driver (pi) per turn.
	cfg.PerTurn = os.Getenv("SANDBOX_AGENT_PER_TURN") == "true"

	base := scaleRuntime(b)
	// On Docker the round's runtime puts its execs through one queue, as
	// the command line's does (the Kubernetes round runs without one).
	if _, ok := base.(*docker.Runtime); ok && execWidth > 0 {
		gated, err := docker.New(context.Background(), docker.Options{ExecGate: execlimit.New(execWidth)})
		if err != nil {
			b.Fatal(err)
		}
		defer gated.Close()
		base = gated
	} else {
		execWidth = 0
	}
	drv := doneDriver(b, driverName) // one shared server answers all N CLIs alike
	// A long-lived CLI runs no exec of its own per turn: no "CLI exec" to
	// subtract from the ask.
	_, longLived := drv.(sandboxagent.LongLived)
	longLived = longLived && !cfg.PerTurn
	const prompt = "reply DONE"
	inv, err := drv.Command(sandboxagent.Turn{Prompt: prompt})
	if err != nil {
		b.Fatal(err)
	}
	cli := inv.Cmd[0]

	ctx, cancel := context.WithTimeout(context.Background(), scaleBudget)
	defer cancel()
	run := randHex(6)
	agentOpts := func() []sandboxagent.AgentOption {
		return []sandboxagent.AgentOption{
			sandboxagent.WithConfig(cfg), // through the model proxy
			sandboxagent.WithSandbox(func(o *sandboxagent.SandboxOptions) {
				o.Labels = map[string]string{scaleLabel: run}
				o.Egress = egress
			}),
		}
	}

	// Warm-up, not measured: one agent and one turn, so a broken image or
	// driver fails once and fast, and the image is in the page cache.
	warm, err := sandboxagent.Start(ctx, base, drv, agentOpts()...)
	if errors.Is(err, sandboxagent.ErrImageNotFound) {
		prereq.Missing(b, "image for %s missing (bash .ci/setup): %v", driverName, err)
	}
	if err != nil {
		b.Fatalf("warm-up start: %v", err)
	}
	if reply, err := warm.Ask(ctx, prompt); err != nil || reply != fakemodel.DoneText {
		warm.Close()
		b.Fatalf("warm-up ask: reply %q, %v", reply, err)
	}
	if err := warm.Close(); err != nil {
		b.Fatalf("warm-up close: %v", err)
	}

	b.ResetTimer()
	loadBefore := loadAvg()
	round := time.Now()
	tr := newTimedRuntime(base)
	rt := startlimit.Wrap(tr, width)

	memBefore, memErr := memAvailable()
	memMin := memBefore
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // the lowest MemAvailable while the round runs
		defer close(sampled)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
				if m, err := memAvailable(); err == nil && m < memMin {
					memMin = m
				}
			}
		}
	}()

	// Three phases, each begun by all N together (a failed sandbox still
	// reaches every barrier): start, exec loop, ask. Mixed phases would
	// make the exec figures depend on how many CLIs happen to be running.
	recs := make([]*scaleRec, n)
	var wg, started, execd sync.WaitGroup
	started.Add(n)
	execd.Add(n)
	barrier := func(w *sync.WaitGroup) { w.Done(); w.Wait() }
	gate := make(chan struct{})
	for i := range recs {
		r := &scaleRec{}
		recs[i] = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate // all N ask to start at the same instant
			r.startAgent(ctx, rt, tr, drv, agentOpts())
			barrier(&started)
			if r.err == nil {
				r.execLoop(ctx, tr)
			}
			barrier(&execd)
			if r.err == nil {
				r.askOnce(ctx, tr, prompt, cli, longLived)
			}
			if r.err == nil {
				r.followUp(ctx, prompt)
			}
		}()
	}
	close(gate)
	wg.Wait()
	close(stopSampling)
	<-sampled

	// All N are up and idle (their CLIs have exited): memory now.
	time.Sleep(2 * time.Second)
	memIdle, memErr2 := memAvailable()
	var ctrMem, ctrRSS int64
	ctrMemOK := true
	for _, r := range recs {
		if r.agent == nil {
			continue
		}
		usage, rss, ok := containerMemory(r.agent.Container().ID())
		ctrMemOK = ctrMemOK && ok
		ctrMem += usage
		ctrRSS += rss
	}

	// Names: all distinct, and the engine lists exactly ours.
	var failures []string
	fail := func(format string, args ...any) { failures = append(failures, fmt.Sprintf(format, args...)) }
	names := map[string]bool{}
	up := 0
	for i, r := range recs {
		if r.err != nil {
			fail("sandbox %d: %v", i, r.err)
		}
		if r.agent == nil {
			continue
		}
		up++
		name := r.agent.Container().Name()
		if names[name] {
			fail("name collision: %s", name)
		}
		names[name] = true
	}
	ours := map[string]string{sandboxagent.LabelManaged: "true", scaleLabel: run}
	lctx, lcancel := context.WithTimeout(context.Background(), time.Minute)
	listed, err := base.List(lctx, ours)
	lcancel()
	if err != nil {
		fail("list: %v", err)
	} else {
		seen := map[string]bool{}
		for _, c := range listed {
			if seen[c.Name] {
				fail("engine lists the name %s twice", c.Name)
			}
			seen[c.Name] = true
			if !names[c.Name] {
				fail("engine lists %s, which is not one of ours", c.Name)
			}
		}
		if len(listed) != up {
			fail("engine lists %d sandboxes of this run, %d are up", len(listed), up)
		}
	}

	// Close every sandbox at once, then nothing of this run may be left.
	var closeLat []time.Duration
	var cmu sync.Mutex
	closeStart := time.Now()
	for _, r := range recs {
		if r.agent == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			err := r.agent.Close()
			cmu.Lock()
			defer cmu.Unlock()
			closeLat = append(closeLat, time.Since(t0))
			if err != nil {
				fail("close %s: %v", r.agent.Container().Name(), err)
			}
		}()
	}
	wg.Wait()
	closeWall := time.Since(closeStart)
	roundTime := time.Since(round)
	b.StopTimer()
	lctx, lcancel = context.WithTimeout(context.Background(), time.Minute)
	left, err := base.List(lctx, ours)
	lcancel()
	if err != nil {
		fail("list after close: %v", err)
	}
	for _, c := range left {
		fail("left behind after Close: %s (%s)", c.Name, c.Status)
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		base.Remove(rctx, c.ID)
		rcancel()
	}

	// Figures.
	var start, queue, engine, setup, execs, execQueue, execOvh, ask, cli2, overhead, cpu, ask2, cpu2 []time.Duration
	var startsEnd, execsEnd, asksEnd time.Time // when the last of each phase ended
	cpuOK, cpu2OK := true, true
	for _, r := range recs {
		startsEnd = later(startsEnd, r.startEnd)
		execsEnd = later(execsEnd, r.execEnd)
		asksEnd = later(asksEnd, r.askEnd)
		if r.agent == nil {
			continue
		}
		start = append(start, r.start)
		queue = append(queue, r.queue)
		engine = append(engine, r.engine)
		setup = append(setup, r.setup)
		execs = append(execs, r.execs...)
		execQueue = append(execQueue, r.execQueue...)
		execOvh = append(execOvh, r.execOverhead...)
		if r.askDone {
			ask = append(ask, r.ask)
			if !longLived {
				cli2 = append(cli2, r.cliExec)
				overhead = append(overhead, r.ask-r.cliExec)
			}
			cpu = append(cpu, r.cpu)
			cpuOK = cpuOK && r.cpuOK
		}
		if r.ask2Done {
			ask2 = append(ask2, r.ask2)
			cpu2 = append(cpu2, r.cpu2)
			cpu2OK = cpu2OK && r.cpu2OK
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	var tbl strings.Builder
	mode := "per turn"
	if longLived {
		mode = "long-lived"
	}
	execQ := "off"
	if execWidth > 0 {
		execQ = strconv.Itoa(execWidth)
	}
	fmt.Fprintf(&tbl, "scale: %d sandboxes, driver %s (CLI %s, %s), max_concurrent_starts %d, max_concurrent_execs %s, %d execs of `true` each, 2 asks each (a turn, then a follow-up)\n",
		n, driverName, cli, mode, width, execQ, scaleExecs)
	fmt.Fprintf(&tbl, "round %.1fs; load average %s before, %s after\n", roundTime.Seconds(), loadBefore, loadAvg())
	if !asksEnd.IsZero() && !execsEnd.IsZero() && !startsEnd.IsZero() {
		execPhase := execsEnd.Sub(startsEnd)
		fmt.Fprintf(&tbl, "phases (all %d together): starts %.1fs, exec loops %.1fs (%.1f execs/s), asks %.1fs, closes %.1fs\n", n,
			startsEnd.Sub(round).Seconds(), execPhase.Seconds(), float64(len(execs))/execPhase.Seconds(),
			asksEnd.Sub(execsEnd).Seconds(), closeWall.Seconds())
	}
	fmt.Fprintf(&tbl, "%-38s %7s %10s %10s %10s %10s\n", "operation", "samples", "p50 ms", "p95 ms", "p99 ms", "max ms")
	row := func(label string, ds []time.Duration) {
		if len(ds) == 0 {
			fmt.Fprintf(&tbl, "%-38s %7d\n", label, 0)
			return
		}
		fmt.Fprintf(&tbl, "%-38s %7d %10.1f %10.1f %10.1f %10.1f\n", label, len(ds),
			ms(pct(ds, 50)), ms(pct(ds, 95)), ms(pct(ds, 99)), ms(pct(ds, 100)))
	}
	row("start (Start: queue+engine+setup)", start)
	row("  queue wait (startlimit)", queue)
	row("  engine create+inspect+start", engine)
	row("  driver setup", setup)
	row("exec `true`", execs)
	row("  exec queue wait (execlimit)", execQueue)
	row("  exec overhead (wall - Runtime.Exec)", execOvh)
	row("ask (wall)", ask)
	if !longLived {
		row("  CLI exec (Runtime.Exec)", cli2)
		row("  ask overhead (wall - CLI exec)", overhead)
	}
	row("follow-up ask (wall)", ask2)
	row("close", closeLat)
	if cpuOK && len(cpu) > 0 {
		row("CPU per ask (container cgroup)", cpu)
	}
	if cpu2OK && len(cpu2) > 0 {
		row("CPU per follow-up ask", cpu2)
	}
	mib := func(v int64) float64 { return float64(v) / (1 << 20) }
	if memErr == nil && memErr2 == nil {
		fmt.Fprintf(&tbl, "host MemAvailable: %.0f MiB before, %.0f MiB lowest during, %.0f MiB with all %d idle\n",
			mib(memBefore), mib(memMin), mib(memIdle), up)
		if up > 0 {
			fmt.Fprintf(&tbl, "host memory per sandbox: %.1f MiB idle, %.1f MiB at the peak (MemAvailable delta / N)\n",
				mib(memBefore-memIdle)/float64(up), mib(memBefore-memMin)/float64(up))
		}
	}
	if ctrMemOK && up > 0 {
		fmt.Fprintf(&tbl, "container memory per idle sandbox (cgroup): %.1f MiB usage (incl. page cache), %.2f MiB rss/anon\n",
			mib(ctrMem)/float64(up), mib(ctrRSS)/float64(up))
	}
	if len(execs) > 0 {
		fmt.Fprintf(&tbl, "exec p99/p50: %.1f\n", float64(pct(execs, 99))/float64(pct(execs, 50)))
	}
	fmt.Fprintf(&tbl, "failures: %d\n", len(failures))
	// To stdout: the testing package cuts a benchmark's log to 10 lines.
	fmt.Print(tbl.String())

	var metrics []scaleMetric
	report := func(v float64, unit string) {
		metrics = append(metrics, scaleMetric{v, unit})
		b.ReportMetric(v, unit)
	}
	report(float64(roundTime.Nanoseconds()), "ns/op") // one round, whatever b.N
	report(float64(len(failures)), "failures")
	if len(start) > 0 {
		report(pct(start, 50).Seconds(), "start-p50-s")
		report(pct(start, 95).Seconds(), "start-p95-s")
		report(pct(start, 99).Seconds(), "start-p99-s")
		report(pct(queue, 50).Seconds(), "queue-p50-s")
	}
	if len(execs) > 0 {
		report(ms(pct(execs, 50)), "exec-p50-ms")
		report(ms(pct(execs, 95)), "exec-p95-ms")
		report(ms(pct(execs, 99)), "exec-p99-ms")
		report(ms(pct(execOvh, 50)), "execovh-p50-ms")
		report(ms(pct(execQueue, 99)), "execqueue-p99-ms")
		report(float64(pct(execs, 99))/float64(pct(execs, 50)), "exec-p99/p50")
	}
	if len(ask) > 0 {
		report(pct(ask, 50).Seconds(), "ask-p50-s")
		report(pct(ask, 95).Seconds(), "ask-p95-s")
		report(pct(ask, 99).Seconds(), "ask-p99-s")
		if len(overhead) > 0 {
			report(ms(pct(overhead, 50)), "askovh-p50-ms")
			report(ms(pct(overhead, 95)), "askovh-p95-ms")
			report(ms(pct(overhead, 99)), "askovh-p99-ms")
		}
		if cpuOK {
			report(pct(cpu, 50).Seconds(), "cpu-p50-s/ask")
		}
	}
	if len(ask2) > 0 {
		report(pct(ask2, 50).Seconds(), "ask2-p50-s")
		report(pct(ask2, 95).Seconds(), "ask2-p95-s")
		if cpu2OK {
			report(pct(cpu2, 50).Seconds(), "cpu2-p50-s/ask")
		}
	}
	if memErr == nil && memErr2 == nil && up > 0 {
		report(mib(memBefore-memIdle)/float64(up), "host-MiB/sandbox")
	}
	if ctrMemOK && up > 0 {
		report(mib(ctrMem)/float64(up), "ctr-MiB/sandbox")
	}
	for i, f := range failures {
		if i == 20 {
			b.Errorf("… and %d more failures", len(failures)-i)
			break
		}
		b.Error(f)
	}
	if len(failures) > 0 {
		b.Fatalf("%d failures (must be 0)", len(failures))
	}
	scaleDone = metrics
}

// scaleDone holds the figures of the round this process ran.
var scaleDone []scaleMetric

type scaleMetric struct {
	v    float64
	unit string
}

// scaleRec is one sandbox of the round.
type scaleRec struct {
	agent *sandboxagent.Agent
	err   error

	start, queue, engine, setup time.Duration
	execs, execOverhead         []time.Duration
	execQueue                   []time.Duration // each exec's ExecResult.QueueWait
	askDone                     bool
	ask, cliExec                time.Duration
	cpu                         time.Duration
	cpuOK                       bool
	// The follow-up turn (the session's second): a long-lived CLI's runs
	// on the process of the first.
	ask2, cpu2 time.Duration
	ask2Done   bool
	cpu2OK     bool
	// When each phase ended for this sandbox.
	startEnd, execEnd, askEnd time.Time
}

func (r *scaleRec) startAgent(ctx context.Context, rt sandboxagent.Runtime, tr *timedRuntime, drv sandboxagent.Driver, opts []sandboxagent.AgentOption) {
	t0 := time.Now()
	a, err := sandboxagent.Start(ctx, rt, drv, opts...)
	r.startEnd = time.Now()
	r.start = r.startEnd.Sub(t0)
	if err != nil {
		r.err = fmt.Errorf("start: %w", err)
		return
	}
	r.agent = a
	sb := a.Container()
	sp := tr.spans(sb.Name(), sb.ID())
	r.queue = sp.createBegin.Sub(t0) + sp.startBegin.Sub(sp.inspectEnd)
	r.engine = sp.startEnd.Sub(t0) - r.queue
	r.setup = r.start - sp.startEnd.Sub(t0)
}

func (r *scaleRec) execLoop(ctx context.Context, tr *timedRuntime) {
	defer func() { r.execEnd = time.Now() }()
	sb := r.agent.Container()
	for range scaleExecs {
		t := time.Now()
		res, err := sb.Exec(ctx, []string{"true"})
		d := time.Since(t)
		r.execs = append(r.execs, d)
		r.execQueue = append(r.execQueue, res.QueueWait)
		if err != nil || res.ExitCode != 0 {
			r.err = fmt.Errorf("exec true: exit %d, %v", res.ExitCode, err)
			return
		}
		engine, n := tr.execTime(sb.ID(), "true", t)
		if n != 1 {
			r.err = fmt.Errorf("exec true: %d engine execs, want 1", n)
			return
		}
		// Runtime.Exec's time holds the queue wait: the rest is ours.
		r.execOverhead = append(r.execOverhead, d-engine)
	}
}

func (r *scaleRec) askOnce(ctx context.Context, tr *timedRuntime, prompt, cli string, longLived bool) {
	id := r.agent.Container().ID()
	cpu0, ok0 := containerCPU(id)
	t := time.Now()
	reply, err := r.agent.Ask(ctx, prompt)
	r.askEnd = time.Now()
	r.ask = r.askEnd.Sub(t)
	cpu1, ok1 := containerCPU(id)
	r.cpu, r.cpuOK = cpu1-cpu0, ok0 && ok1
	if err != nil {
		r.err = fmt.Errorf("ask: %w", err)
		return
	}
	if reply != fakemodel.DoneText {
		r.err = fmt.Errorf("ask: reply %q, want %q", reply, fakemodel.DoneText)
		return
	}
	if longLived {
		r.askDone = true
		return
	}
	var n int
	r.cliExec, n = tr.execTime(id, cli, t)
	if n != 1 {
		r.err = fmt.Errorf("ask: %d execs of %s during the turn, want 1", n, cli)
		return
	}
	r.askDone = true
}

// followUp asks a second turn of the session.
func (r *scaleRec) followUp(ctx context.Context, prompt string) {
	id := r.agent.Container().ID()
	cpu0, ok0 := containerCPU(id)
	t := time.Now()
	reply, err := r.agent.Ask(ctx, prompt)
	r.ask2 = time.Since(t)
	cpu1, ok1 := containerCPU(id)
	r.cpu2, r.cpu2OK = cpu1-cpu0, ok0 && ok1
	if err != nil {
		r.err = fmt.Errorf("follow-up ask: %w", err)
		return
	}
	if reply != fakemodel.DoneText {
		r.err = fmt.Errorf("follow-up ask: reply %q, want %q", reply, fakemodel.DoneText)
		return
	}
	r.ask2Done = true
}

// timedRuntime records when the engine calls of each sandbox begin and
// end. It sits under startlimit.Wrap, so the time before a Create or Start
// reaches it is the queue.
type timedRuntime struct {
	sandboxagent.Runtime
	mu     sync.Mutex
	create map[string]time.Time // container name → Create begin
	sbs    map[string]*sandboxSpans
}

type sandboxSpans struct {
	createBegin, inspectEnd, startBegin, startEnd time.Time
	execs                                         []execSpan
}

type execSpan struct {
	argv0      string
	begin, end time.Time
}

// Features passes the wrapped runtime's on (a wrapper that does not
// would make the Sandbox ask a Kubernetes runtime for bind mounts).
func (t *timedRuntime) Features() sandboxagent.RuntimeFeatures {
	return sandboxagent.FeaturesOf(t.Runtime)
}

func newTimedRuntime(rt sandboxagent.Runtime) *timedRuntime {
	return &timedRuntime{Runtime: rt, create: map[string]time.Time{}, sbs: map[string]*sandboxSpans{}}
}

func (t *timedRuntime) get(id string) *sandboxSpans {
	s := t.sbs[id]
	if s == nil {
		s = &sandboxSpans{}
		t.sbs[id] = s
	}
	return s
}

func (t *timedRuntime) Create(ctx context.Context, spec sandboxagent.ContainerSpec) (string, error) {
	begin := time.Now()
	t.mu.Lock()
	t.create[spec.Name] = begin
	t.mu.Unlock()
	return t.Runtime.Create(ctx, spec)
}

func (t *timedRuntime) Inspect(ctx context.Context, id string) (sandboxagent.ContainerState, error) {
	st, err := t.Runtime.Inspect(ctx, id)
	end := time.Now()
	t.mu.Lock()
	if s := t.get(id); s.inspectEnd.IsZero() {
		s.inspectEnd = end // the hardening check, between Create and Start
	}
	t.mu.Unlock()
	return st, err
}

func (t *timedRuntime) Start(ctx context.Context, id string) error {
	begin := time.Now()
	err := t.Runtime.Start(ctx, id)
	end := time.Now()
	t.mu.Lock()
	s := t.get(id)
	s.startBegin, s.startEnd = begin, end
	t.mu.Unlock()
	return err
}

func (t *timedRuntime) Exec(ctx context.Context, id string, req sandboxagent.RuntimeExec) (int, error) {
	begin := time.Now()
	code, err := t.Runtime.Exec(ctx, id, req)
	end := time.Now()
	t.mu.Lock()
	s := t.get(id)
	s.execs = append(s.execs, execSpan{argv0: req.Cmd[0], begin: begin, end: end})
	t.mu.Unlock()
	return code, err
}

// spans returns a copy of one sandbox's start spans.
func (t *timedRuntime) spans(name, id string) sandboxSpans {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := *t.get(id)
	s.createBegin = t.create[name]
	s.execs = nil
	return s
}

// execTime sums the execs of argv0 in the sandbox that began after since.
func (t *timedRuntime) execTime(id, argv0 string, since time.Time) (time.Duration, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var sum time.Duration
	n := 0
	for _, e := range t.get(id).execs {
		if e.argv0 == argv0 && !e.begin.Before(since) {
			sum += e.end.Sub(e.begin)
			n++
		}
	}
	return sum, n
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// pct is the p-th percentile (nearest rank) of ds; 100 is the maximum.
// With 50 samples p99 is the maximum too.
func pct(ds []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// memAvailable is the host's MemAvailable in bytes.
func memAvailable() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no MemAvailable in /proc/meminfo")
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// cgroupFile finds a container's cgroup file: cgroup v1 (cgroupfs or
// systemd driver) under the controller, or v2 (systemd scope or
// cgroupfs), and says whether it is v2.
func cgroupFile(id, v1ctrl, v1file, v2file string) (string, bool) {
	for i, p := range []string{
		filepath.Join("/sys/fs/cgroup", v1ctrl, "docker", id, v1file),
		filepath.Join("/sys/fs/cgroup", v1ctrl, "system.slice", "docker-"+id+".scope", v1file),
		filepath.Join("/sys/fs/cgroup/system.slice", "docker-"+id+".scope", v2file),
		filepath.Join("/sys/fs/cgroup/docker", id, v2file),
	} {
		if _, err := os.Stat(p); err == nil {
			return p, i >= 2
		}
	}
	return "", false
}

// containerCPU is the CPU time the container's cgroup has used.
func containerCPU(id string) (time.Duration, bool) {
	p, v2 := cgroupFile(id, "cpuacct", "cpuacct.usage", "cpu.stat")
	if p == "" {
		return 0, false
	}
	if !v2 {
		ns, err := readInt(p)
		return time.Duration(ns), err == nil
	}
	us, ok := statField(p, "usage_usec")
	return time.Duration(us) * time.Microsecond, ok
}

// containerMemory is the container's cgroup memory use (page cache
// included) and its anonymous (rss) part.
func containerMemory(id string) (usage, rss int64, ok bool) {
	p, v2 := cgroupFile(id, "memory", "memory.usage_in_bytes", "memory.current")
	if p == "" {
		return 0, 0, false
	}
	usage, err := readInt(p)
	if err != nil {
		return 0, 0, false
	}
	field := "total_rss"
	if v2 {
		field = "anon"
	}
	rss, ok = statField(filepath.Join(filepath.Dir(p), "memory.stat"), field)
	return usage, rss, ok
}

func readInt(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

func statField(p, field string) (int64, bool) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+" "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
