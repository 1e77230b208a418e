package drivertest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

func TestHostOps(t *testing.T) {
	ctx := context.Background()
	h := NewHostOps(t)
	res, err := h.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", `printf '%s %s' "$HOME" "$(pwd -P)"; echo err >&2; exit 3`}})
	if err != nil || res.ExitCode != 3 || string(res.Stdout) != h.Home+" "+h.Work || string(res.Stderr) != "err\n" {
		t.Errorf("run: %+v %v", res, err)
	}
	if res, err := h.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"no-such-cli"}}); err != nil || res.ExitCode != 127 {
		t.Errorf("missing command: %+v %v", res, err)
	}
	h.Install(t, "cli", "#!/bin/sh\necho \"cli $1\"\n")
	if res, err := h.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"cli", "x"}}); err != nil || string(res.Stdout) != "cli x\n" {
		t.Errorf("installed command: %+v %v", res, err)
	}

	// Host paths inside Root, container paths mapped under Root.
	if err := h.WriteFile(ctx, h.HomePath("a/b.txt"), []byte("B"), 0o600); err != nil || h.Read(t, "a/b.txt") != "B" {
		t.Errorf("write in home: %v", err)
	}
	if st, err := os.Stat(h.HomePath("a/b.txt")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v %v", st, err)
	}
	if err := h.WriteFile(ctx, "/tmp/c.txt", []byte("C"), 0); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(h.Root, "tmp/c.txt")); err != nil || string(b) != "C" {
		t.Errorf("container path: %q %v", b, err)
	}
	if b, err := h.ReadFile(ctx, "/tmp/c.txt", 1); err != nil || string(b) != "C" {
		t.Errorf("read back: %q %v", b, err)
	}
	if _, err := h.ReadFile(ctx, h.HomePath("a/b.txt"), 0); err != nil {
		t.Errorf("no cap: %v", err)
	}
	if _, err := h.ReadFile(ctx, "/nope", 10); !errors.Is(err, sandboxagent.ErrPathNotFound) {
		t.Errorf("missing file: %v", err)
	}
	if err := h.WriteFile(ctx, "/big", []byte("12345"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ReadFile(ctx, "/big", 4); !errors.Is(err, sandboxagent.ErrLimitExceeded) {
		t.Errorf("over max: %v", err)
	}
	if len(h.Runs()) != 3 || h.LastRun().Cmd[0] != "cli" || len(h.Writes()) != 3 || len(h.Reads()) != 4 {
		t.Errorf("log: %d runs, %v writes, %v reads", len(h.Runs()), h.Writes(), h.Reads())
	}

	// Intercept answers first; nil, nil lets the host run.
	boom := errors.New("engine gone")
	h.Intercept = func(req sandboxagent.ExecRequest) (*sandboxagent.ExecResult, error) {
		switch req.Cmd[0] {
		case "fail":
			return nil, boom
		case "fake":
			return &sandboxagent.ExecResult{Stdout: []byte("faked")}, nil
		}
		return nil, nil
	}
	if _, err := h.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"fail"}}); !errors.Is(err, boom) {
		t.Errorf("intercepted error: %v", err)
	}
	if res, _ := h.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"fake"}}); string(res.Stdout) != "faked" {
		t.Errorf("intercepted result %+v", res)
	}
	if res, _ := h.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"cli", "y"}}); string(res.Stdout) != "cli y\n" {
		t.Errorf("passed through %+v", res)
	}
}
