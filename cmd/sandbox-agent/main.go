// Command sandbox-agent runs coding-agent CLIs and commands in throw-away
// sandboxes. It only parses flags and wires the library together.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
	"github.com/sandbox-agent/sandbox-agent/config"
)

// Exit codes of sandbox-agent itself. exec passes the command's own exit
// code through, so ours sit where docker run puts its own (125).
const (
	exitOK      = 0
	exitBudget  = 3   // a budget (--budget-tokens, --budget-usd) was spent: the model proxy refused a request
	exitTimeout = 124 // the turn or command timed out (as coreutils timeout)
	exitError   = 125 // sandbox-agent failed: usage, engine, image, I/O
)

// app carries what every subcommand needs: the configuration loaded once
// (the library's and the command line's own keys), the standard streams,
// and a lazily connected engine.
type app struct {
	cfg    sandboxagent.Config
	cli    settings
	getenv func(string) string
	// stdout and stderr print messages: redacted and terminal-safe
	// (output.go). rawStdout and rawStderr are the streams themselves,
	// for exec's data and the JSON lines.
	stdout, stderr       io.Writer
	rawStdout, rawStderr io.Writer
	// red holds the secrets this run knows, never printed.
	red *redactor
	eng *engine
	// images, when set, is the image source every agent shares (serve).
	images sandboxagent.ImageSource
	// ckEngine, when set, is the engine of committed checkpoints instead
	// of the runtime's (tests).
	ckEngine checkpoint.Engine
}

// runtime connects to the engine on first use.
func (a *app) runtime(ctx context.Context) (sandboxagent.Runtime, error) {
	eng, err := a.engine(ctx)
	if err != nil {
		return nil, err
	}
	return eng.rt, nil
}

// engine connects on first use.
func (a *app) engine(ctx context.Context) (*engine, error) {
	if a.eng != nil {
		return a.eng, nil
	}
	eng, err := connect(ctx, a.cli, a.cfg.ImagePolicy)
	if err != nil {
		return nil, err
	}
	a.eng = eng
	return eng, nil
}

// fail prints a sandbox-agent error and returns its exit code.
func (a *app) fail(err error) int {
	fmt.Fprintf(a.stderr, "sandbox-agent: %s\n", errText(err))
	return exitError
}

type command struct {
	summary string
	run     func(ctx context.Context, a *app, args []string) int
}

func commands() map[string]command {
	return map[string]command{
		"exec":       {"run a command in a throw-away sandbox", runExec},
		"ask":        {"run one agent turn in a throw-away sandbox", runAsk},
		"smoke":      {"run the main behaviours end to end, per driver", runSmoke},
		"gc":         {"remove sandboxes and checkpoints left behind", runGC},
		"checkpoint": {"list, inspect and remove checkpoints", runCheckpoint},
		"version":    {"print versions", runVersion},
		"images":     {"list, resolve and build the agent images", runImages},
		"fake-model": {"serve the scripted fake model", runFakeModel},
		"serve":      {"serve the HTTP API and the web inspector", runServe},
		"seccomp":    {"install the seccomp profile on a Kubernetes node", runSeccomp},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: sandbox-agent COMMAND [ARGS...]\n\ncommands:")
	cmds := commands()
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-11s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'sandbox-agent COMMAND -h' for a command's flags.")
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	red := &redactor{}
	a := &app{
		stdout: &msgWriter{w: stdout, red: red}, stderr: &msgWriter{w: stderr, red: red},
		rawStdout: stdout, rawStderr: stderr, red: red, getenv: getenv,
	}
	stdout, stderr = a.stdout, a.stderr
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return exitError
		}
		return exitOK
	}
	cmd, ok := commands()[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "sandbox-agent: unknown command %q\n", args[0])
		usage(stderr)
		return exitError
	}
	cfg, cli, err := loadConfig(configPath(getenv), getenv)
	if err != nil {
		return a.fail(err)
	}
	a.cfg, a.cli = cfg, cli
	// The keys this run may use, known before anything can fail and
	// quote one; realEndpoint, the fake model and serve add theirs.
	for _, k := range []string{cli.gatewayKey, getenv("GATEWAY_KEY"), getenv("ZHIPUAI_CODING_TOKEN")} {
		a.secret(k)
	}
	defer func() {
		if a.eng != nil {
			a.eng.close()
		}
	}()
	return cmd.run(ctx, a, args[1:])
}

// configPath is $SANDBOX_AGENT_CONFIG when set, else the default location.
func configPath(getenv func(string) string) string {
	if p := getenv("SANDBOX_AGENT_CONFIG"); p != "" {
		return p
	}
	return config.DefaultPath()
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// parseInterspersed parses flags that may come after positional arguments
// ("smoke claude codex --fake-model"); "--" ends flag parsing.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
