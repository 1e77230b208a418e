package main

import (
	"errors"
	"flag"
	"io"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// TestRepoFlags: the repository flags' checks, before any engine.
func TestRepoFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
		repo bool
	}{
		{nil, true, false},
		{[]string{"--repo", "."}, true, true},
		{[]string{"--repo", ".", "--changes", "patch", "--branch", "x/y", "--author", "A B <a@b.c>", "--repo-depth", "3"}, true, true},
		{[]string{"--branch", "x"}, false, false},
		{[]string{"--changes", "bundle"}, false, false},
		{[]string{"--repo", ".", "--changes", "zip"}, false, false},
		{[]string{"--repo", ".", "--branch", "bad..name"}, true, true}, // the branch is checked by Start (repo.Open)
		{[]string{"--repo", ".", "--author", "no address"}, false, false},
	} {
		fs := flag.NewFlagSet("ask", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var rf repoFlags
		rf.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		o, err := rf.option(fs)
		if (err == nil) != tc.ok || (o != nil) != tc.repo {
			t.Errorf("%v: option %v, err %v", tc.args, o != nil, err)
		}
		if err != nil && !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("%v: %v is not ErrInvalidArgument", tc.args, err)
		}
	}
}
