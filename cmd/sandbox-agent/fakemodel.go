package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/sandbox-agent/sandbox-agent/fakemodel"
)

const fakeModelUsage = `usage: sandbox-agent fake-model serve [--listen ADDR] [--script FILE] [--log FILE] [--ready-file FILE]

Serves the scripted fake model (OpenAI chat completions and Responses,
Anthropic Messages) until interrupted. See the fakemodel package for the
script format. Without --script it answers DONE to everything.`

// runFakeModel implements "sandbox-agent fake-model serve".
func runFakeModel(ctx context.Context, a *app, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(a.stderr, fakeModelUsage)
		if len(args) == 0 {
			return exitError
		}
		return exitOK
	}
	if args[0] != "serve" {
		fmt.Fprintf(a.stderr, "sandbox-agent: fake-model: unknown subcommand %q\n%s\n", args[0], fakeModelUsage)
		return exitError
	}

	fs := flag.NewFlagSet("fake-model serve", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() {
		fmt.Fprintln(a.stderr, fakeModelUsage+"\n\nflags:")
		fs.PrintDefaults()
	}
	listen := fs.String("listen", "127.0.0.1:0", "listen address (loopback unless --allow-non-loopback)")
	scriptPath := fs.String("script", "", "script file (JSON); empty serves the empty script")
	logPath := fs.String("log", "", "append every request as a JSON line to this file (secrets redacted)")
	allowNonLoopback := fs.Bool("allow-non-loopback", false, "allow listening on a non-loopback address")
	readyFile := fs.String("ready-file", "", "write the address listened on (host:port and a newline) to this file once listening (atomically: a reader never sees half of it)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitError
	}
	if fs.NArg() > 0 {
		return a.fail(fmt.Errorf("fake-model serve: unexpected arguments %q", fs.Args()))
	}

	var script fakemodel.Script
	if *scriptPath != "" {
		var err error
		if script, err = fakemodel.LoadScript(*scriptPath); err != nil {
			return a.fail(err)
		}
	}
	srv, err := fakemodel.New(script, fakemodel.Options{LogFile: *logPath, AllowNonLoopback: *allowNonLoopback})
	if err != nil {
		return a.fail(err)
	}
	if err := srv.Start(*listen); err != nil {
		srv.Close()
		return a.fail(err)
	}
	fmt.Fprintf(a.stdout, "listening on %s\n", srv.URL())
	if *readyFile != "" {
		if err := writeFileAtomic(*readyFile, []byte(srv.Addr()+"\n"), 0o644); err != nil {
			srv.Close()
			return a.fail(fmt.Errorf("fake-model serve: ready file: %w", err))
		}
	}
	<-ctx.Done()
	if err := srv.Close(); err != nil {
		return a.fail(err)
	}
	return exitOK
}
