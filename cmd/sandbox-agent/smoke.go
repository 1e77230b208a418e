package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
	"github.com/sandbox-agent/sandbox-agent/internal/smoke"
	"github.com/sandbox-agent/sandbox-agent/runtime/startlimit"
)

func runSmoke(ctx context.Context, a *app, args []string) int {
	fs := flag.NewFlagSet("smoke", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() {
		fmt.Fprintf(a.stderr, "usage: sandbox-agent smoke [flags] [DRIVER... | all]\n\nRuns the main behaviours end to end against real agent CLIs (default: opencode),\ndrivers in parallel. Steps: %s.\nExit code 1 if any step failed.\n\nflags:\n", strings.Join(smoke.Steps, ", "))
		fs.PrintDefaults()
	}
	fake := fs.Bool("fake-model", false, "use the built-in fake model: no key, no network")
	asJSON := fs.Bool("json", false, "print each step result as a JSON line instead of a table")
	provider := fs.String("provider", "zhipuai-coding-plan", "opencode: the provider to use")
	keyEnv := fs.String("key-env", "", "environment variable holding the API key (default: ZHIPUAI_CODING_TOKEN for opencode, GATEWAY_KEY for the others)")
	model := fs.String("model", "", "model for every driver (default: each driver's)")
	image := fs.String("image", "", "image for every driver (default: each driver's)")
	egressFlag := fs.String("egress", "", "network policy of every agent: model (default: only the model proxy) or open")
	ociRT := fs.String("oci-runtime", "", "OCI runtime of every sandbox, e.g. runsc for gVisor (default from config key oci_runtime, else the engine's)")
	var allow multiFlag
	fs.Var(&allow, "allow-host", "HOST or *.DOMAIN (optionally :PORT) reachable through the egress proxy (repeatable)")
	names, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitError
	}
	egress, err := sandboxagent.ParseEgress(*egressFlag)
	if err != nil {
		return a.fail(fmt.Errorf("smoke: --egress: %w", err))
	}
	if err := sandboxagent.CheckAllowHosts(allow); err != nil {
		return a.fail(fmt.Errorf("smoke: --allow-host: %w", err))
	}
	if err := a.useOCIRuntime(*ociRT); err != nil {
		return a.fail(fmt.Errorf("smoke: %w", err))
	}
	if egress == sandboxagent.EgressOpen {
		fmt.Fprintln(a.stderr, "sandbox-agent: warning: egress open: the agents can reach the internet and the host's services")
	}
	switch {
	case len(names) == 0:
		names = []string{"opencode"}
	case len(names) == 1 && names[0] == "all":
		names = drivers.Names()
	}
	var targets []smoke.Target
	for _, n := range names {
		if _, ok := drivers.All()[n]; !ok {
			return a.fail(fmt.Errorf("smoke: unknown driver %q (have: %s, or all)", n, strings.Join(drivers.Names(), ", ")))
		}
		t := smoke.Target{Name: n, New: drivers.All()[n], Model: *model}
		if !*fake {
			ep, err := a.realEndpoint(n, *provider, *keyEnv)
			if err != nil {
				return a.fail(fmt.Errorf("smoke: %w", err))
			}
			t.Real = ep
		}
		targets = append(targets, t)
	}
	rt, err := a.runtime(ctx)
	if err != nil {
		return a.fail(err)
	}
	src, err := a.imageSource(ctx)
	if err != nil {
		return a.fail(err)
	}
	var mu sync.Mutex
	enc := a.jsonOut()
	results := smoke.Run(ctx, smoke.Options{
		Runtime: startlimit.Wrap(rt, a.cli.maxConcurrentStarts), Config: a.cfg, Fake: *fake, Image: *image,
		Egress: egress, AllowHosts: allow, Images: src,
		Progress: func(r smoke.StepResult) {
			mu.Lock()
			defer mu.Unlock()
			if *asJSON {
				_ = enc.Encode(r)
				return
			}
			fmt.Fprintf(a.stderr, "%-9s %-15s %-4s %6.1fs %s\n", r.Driver, r.Step, r.Status, r.Duration.Seconds(), line(firstLine(r.Detail)))
		},
	}, targets)
	failed := 0
	for _, r := range results {
		if r.Status == smoke.Fail {
			failed++
		}
	}
	if !*asJSON {
		printSummary(a, names, results)
	}
	if failed > 0 {
		fmt.Fprintf(a.stderr, "sandbox-agent: smoke: %d step(s) failed\n", failed)
		return 1
	}
	return exitOK
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

// printSummary prints one row per step and one column per driver.
func printSummary(a *app, names []string, results []smoke.StepResult) {
	byKey := map[string]smoke.StepResult{}
	for _, r := range results {
		byKey[r.Driver+"/"+r.Step] = r
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "step\t%s\t\n", strings.Join(names, "\t"))
	for _, step := range smoke.Steps {
		row := []string{step}
		for _, n := range names {
			r := byKey[n+"/"+step]
			row = append(row, fmt.Sprintf("%s %.1fs", r.Status, r.Duration.Seconds()))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
	var fails []string
	for _, r := range results {
		if r.Status == smoke.Fail {
			// Details quote the agents: continuation lines indented.
			fails = append(fails, fmt.Sprintf("  %s/%s: %s", r.Driver, r.Step, strings.ReplaceAll(r.Detail, "\n", "\n    ")))
		}
	}
	slices.Sort(fails)
	if len(fails) > 0 {
		fmt.Fprintf(a.stdout, "\nfailures:\n%s\n", strings.Join(fails, "\n"))
	}
}
