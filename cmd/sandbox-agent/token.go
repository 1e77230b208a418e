package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/server"
	"github.com/sandbox-agent/sandbox-agent/store"
)

// runToken is `serve token create|list|revoke`: the tenants' tokens, in
// serve's state (the admin token is --token-file's).
func runToken(ctx context.Context, a *app, args []string) int {
	usage := "usage: sandbox-agent serve token create --tenant NAME [--scope SCOPE]... [--expires DUR]\n       sandbox-agent serve token list [--tenant NAME] [--json]\n       sandbox-agent serve token revoke ID\n\nscopes: " + strings.Join(server.Scopes(), ", ") + " (default agents)\nevery subcommand takes --state (default: the state key, else " + defaultStatePath() + ")"
	if len(args) == 0 {
		fmt.Fprintln(a.stderr, usage)
		return exitError
	}
	fs := flag.NewFlagSet("serve token "+args[0], flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() { fmt.Fprintln(a.stderr, usage+"\n\nflags:"); fs.PrintDefaults() }
	statePath := fs.String("state", a.cli.state, "serve's state: a SQLite file or a postgres:// URL")
	tenant := fs.String("tenant", "", "the token's tenant")
	var scopes stringList
	fs.Var(&scopes, "scope", "a scope of the token (repeatable)")
	expires := fs.Duration("expires", 0, "lifetime, like 720h (default: none)")
	asJSON := fs.Bool("json", false, "list as JSON")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitError
	}
	if *statePath == memoryState {
		return a.fail(fmt.Errorf("%w: serve token: --state %s keeps no tokens: name serve's state file or URL", sandboxagent.ErrInvalidArgument, memoryState))
	}
	st, err := openState(ctx, *statePath, false)
	if err != nil {
		return a.fail(err)
	}
	defer st.Close()
	switch cmd := args[0]; {
	case cmd == "create" && fs.NArg() == 0:
		tok, rec, err := server.CreateToken(ctx, st, server.TokenRequest{Tenant: *tenant, Scopes: scopes, TTL: *expires})
		if err != nil {
			return a.fail(err)
		}
		fmt.Fprintf(a.stderr, "sandbox-agent: token %s for tenant %s (%s): shown once, keep it\n", rec.ID, rec.Tenant, strings.Join(rec.Scopes, ","))
		fmt.Fprintln(a.stdout, tok)
		return exitOK
	case cmd == "list" && fs.NArg() == 0:
		list, err := st.ListTokens(ctx, *tenant)
		if err != nil {
			return a.fail(err)
		}
		return a.printTokens(list, *asJSON)
	case cmd == "revoke" && fs.NArg() == 1:
		if err := st.RevokeToken(ctx, fs.Arg(0), time.Now().UTC()); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				err = fmt.Errorf("%w: no token %q (serve token list)", sandboxagent.ErrInvalidArgument, fs.Arg(0))
			}
			return a.fail(err)
		}
		fmt.Fprintf(a.stderr, "sandbox-agent: token %s revoked\n", fs.Arg(0))
		return exitOK
	}
	fmt.Fprintln(a.stderr, usage)
	return exitError
}

// tokenView is a token as token list --json prints it (never its hash).
type tokenView struct {
	ID      string     `json:"id"`
	Tenant  string     `json:"tenant"`
	Scopes  []string   `json:"scopes"`
	Created time.Time  `json:"created"`
	Expires *time.Time `json:"expires,omitempty"`
	Revoked *time.Time `json:"revoked,omitempty"`
}

func (a *app) printTokens(list []store.Token, asJSON bool) int {
	views := make([]tokenView, 0, len(list))
	for _, t := range list {
		v := tokenView{ID: t.ID, Tenant: t.Tenant, Scopes: t.Scopes, Created: t.Created}
		if !t.Expires.IsZero() {
			v.Expires = &t.Expires
		}
		if !t.Revoked.IsZero() {
			v.Revoked = &t.Revoked
		}
		views = append(views, v)
	}
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"tokens": views}); err != nil {
			return a.fail(err)
		}
		return exitOK
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTENANT\tSCOPES\tCREATED\tEXPIRES\tREVOKED")
	for _, v := range views {
		exp, rev := "-", "-"
		if v.Expires != nil {
			exp = v.Expires.Format(time.RFC3339)
		}
		if v.Revoked != nil {
			rev = v.Revoked.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", v.ID, v.Tenant, strings.Join(v.Scopes, ","), v.Created.Format(time.RFC3339), exp, rev)
	}
	if err := tw.Flush(); err != nil {
		return a.fail(err)
	}
	return exitOK
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}
