// Package smoke runs the main behaviours of sandbox-agent end to end
// against real agent CLIs, per driver, in order: container I/O, ask, tool
// events, continue, fork isolation, skills and rules, delete/dump, audit,
// cross-container load and a bad key. With the fake model it checks
// more than a real model allows: what reached the model (history, rules,
// skills), thinking and usage events where the driver declares them.
//
// These steps are the project's one source of end-to-end scenarios: the
// `smoke` command runs them, and so does the conformance suite
// (internal/conformance, a subtest per step with Begin and
// TargetRun.Step), which adds only what smoke cannot do to a user's
// machine (attacks, floods, crashes, aborts).
package smoke

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
)

// Target is one driver to smoke-test.
type Target struct {
	Name string
	// New builds the driver for an endpoint.
	New drivers.Factory
	// Real is the endpoint for a run against a real model; unused with
	// the fake model.
	Real drivers.Endpoint
	// Model is passed to the agent ("" = the driver's default).
	Model string
}

// Options configures a run.
type Options struct {
	Runtime sandboxagent.Runtime
	Config  sandboxagent.Config
	// Fake runs against the built-in fake model (no key, no network).
	Fake bool
	// Image overrides every target's image (tests).
	Image string
	// Egress and AllowHosts are every agent's network policy ("" and nil:
	// the configuration's, else model only).
	Egress     sandboxagent.Egress
	AllowHosts []string
	// Images provides a missing image (pull or build); nil: none.
	Images sandboxagent.ImageSource
	// Progress, when set, is called as each step ends.
	Progress func(StepResult)
}

// Status of a step.
type Status string

const (
	Pass Status = "pass"
	Fail Status = "fail"
	// NotApplicable: the driver does not support the behaviour
	// (sandboxagent.CapabilitiesOf); it is not a failure.
	NotApplicable Status = "n/a"
)

// StepResult is one step of one driver.
type StepResult struct {
	Driver   string        `json:"driver"`
	Step     string        `json:"step"`
	Status   Status        `json:"status"`
	Duration time.Duration `json:"-"`
	Seconds  float64       `json:"seconds"`
	Detail   string        `json:"detail,omitempty"`
}

// Steps, in the order they run.
var Steps = []string{
	"container_io", "ask", "tool_events", "continue", "fork_isolation",
	"skills_rules", "delete_dump", "audit", "load", "bad_key",
}

// Run smoke-tests every target in parallel (steps in order within one
// target) and returns every step's result, targets in the order given.
func Run(ctx context.Context, o Options, targets []Target) []StepResult {
	results := make([][]StepResult, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = runTarget(ctx, o, t)
		}()
	}
	wg.Wait()
	var all []StepResult
	for _, r := range results {
		all = append(all, r...)
	}
	return all
}

// errNA marks a step as not applicable.
type errNA struct{ why string }

func (e errNA) Error() string { return e.why }

func na(format string, args ...any) error { return errNA{fmt.Sprintf(format, args...)} }

// runTarget runs every step for one target, in order; a failed set-up
// fails every step with its cause.
func runTarget(ctx context.Context, o Options, t Target) []StepResult {
	tr := Begin(ctx, o, t)
	defer tr.Close()
	var out []StepResult
	for _, name := range Steps {
		res := tr.Step(name)
		if o.Progress != nil {
			o.Progress(res)
		}
		out = append(out, res)
	}
	return out
}

// TargetRun is one target's run, step by step: what Run does for each
// target, for a caller that reports each step on its own (the
// conformance test runs each as a subtest). Steps depend on the earlier
// ones: call Step with the names of Steps, in order.
type TargetRun struct {
	r        *run
	setupErr error
}

// Begin sets one target up (the audit folder, the fake model, the first
// agent); a failed set-up fails every step with its cause. Close ends it.
func Begin(ctx context.Context, o Options, t Target) *TargetRun {
	r := &run{o: o, t: t, ctx: ctx, marker: strings.ToUpper(randHex(4))}
	return &TargetRun{r: r, setupErr: r.setup()}
}

// Step runs one step (a name of Steps) and returns its result.
func (tr *TargetRun) Step(name string) StepResult {
	start := time.Now()
	var err error
	if tr.setupErr != nil {
		err = fmt.Errorf("set-up failed: %w", tr.setupErr)
	} else {
		err = tr.r.step(name)
	}
	d := time.Since(start)
	res := StepResult{Driver: tr.r.t.Name, Step: name, Status: Pass, Duration: d, Seconds: d.Round(time.Millisecond).Seconds()}
	var notApp errNA
	switch {
	case errors.As(err, &notApp):
		res.Status, res.Detail = NotApplicable, notApp.why
	case err != nil:
		res.Status, res.Detail = Fail, err.Error()
	}
	return res
}

// Close destroys the target's sandboxes, stops its fake model and removes
// its audit folder.
func (tr *TargetRun) Close() { tr.r.close() }

// step runs one named step under the ask timeout plus slack for the
// step's own execs.
func (r *run) step(name string) error {
	ctx, cancel := context.WithTimeout(r.ctx, r.o.Config.Timeouts.Ask+2*time.Minute)
	defer cancel()
	switch name {
	case "container_io":
		return r.containerIO(ctx)
	case "ask":
		return r.ask(ctx)
	case "tool_events":
		return r.toolEvents()
	case "continue":
		return r.continueStep(ctx)
	case "fork_isolation":
		return r.forkIsolation(ctx)
	case "skills_rules":
		return r.skillsRules(ctx)
	case "delete_dump":
		return r.deleteDump(ctx)
	case "audit":
		return r.auditStep()
	case "load":
		return r.load(ctx)
	case "bad_key":
		return r.badKey(ctx)
	}
	return fmt.Errorf("unknown step %q", name)
}
