package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint/checkpointtest"
	"github.com/sandbox-agent/sandbox-agent/gc"
)

var ckTime = time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)

// checkpointApp is a testApp whose checkpoints are eng's images and the
// archives of a fresh root: an image checkpoint (ck-aa, newest), one
// in use (ck-bb) and an archive (ck-cc, oldest; a hostile name).
func checkpointApp(t *testing.T) (*app, *checkpointtest.Engine, string) {
	t.Helper()
	a, _, _ := testApp()
	root := t.TempDir()
	eng := &checkpointtest.Engine{}
	eng.SetInUse(sandboxagent.CheckpointRepo+":ck-bb", true)
	eng.Commit(t, sandboxagent.Checkpoint{ID: "ck-aa", Name: "base", Created: ckTime, Parent: "sa-1", Driver: "pi", Size: 3 << 20})
	eng.Commit(t, sandboxagent.Checkpoint{ID: "ck-bb", Created: ckTime.Add(-time.Hour), Parent: "sa-2", Driver: "dsh", Size: 512})
	checkpointtest.WriteArchive(t, root, sandboxagent.Checkpoint{ID: "ck-cc", Name: "k8s\x1b[2J", Created: ckTime.Add(-2 * time.Hour), Parent: "sa-3", Driver: "pi", Size: 1 << 30})
	a.ckEngine = eng
	a.cfg.CheckpointRoot = root
	return a, eng, root
}

func TestCheckpointListTable(t *testing.T) {
	a, _, _ := checkpointApp(t)
	out := a.stdout.(*msgWriter).w.(interface{ String() string })
	if code := runCheckpoint(context.Background(), a, []string{"list"}); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	if f := strings.Fields(lines[0]); !slices.Equal(f, []string{"ID", "NAME", "DRIVER", "SIZE", "CREATED", "PARENT", "KIND"}) {
		t.Errorf("header %q", lines[0])
	}
	want := [][]string{
		{"ck-aa", "base", "pi", "3MiB", "2026-05-01T10:00:00Z", "sa-1", "image"},
		{"ck-bb", "-", "dsh", "512B", "2026-05-01T09:00:00Z", "sa-2", "image"},
		{"ck-cc", `k8s\x1b[2J`, "pi", "1GiB", "2026-05-01T08:00:00Z", "sa-3", "archive"},
	}
	for i, w := range want {
		if f := strings.Fields(lines[i+1]); !slices.Equal(f, w) {
			t.Errorf("line %d: %q, want %q", i+1, f, w)
		}
	}
	terminalSafe(t, "list", []byte(out.String()))
}

func TestCheckpointListJSON(t *testing.T) {
	a, _, root := checkpointApp(t)
	out := a.rawStdout.(interface{ String() string })
	if code := runCheckpoint(context.Background(), a, []string{"list", "--json"}); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	terminalSafe(t, "list --json", []byte(out.String()))
	var got []checkpointJSON
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(got) != 3 || got[0].ID != "ck-aa" || got[0].Kind != "image" || got[0].Image != "sandbox-agent-checkpoint:ck-aa" || got[0].Size != 3<<20 || !got[0].Created.Equal(ckTime) {
		t.Errorf("first %+v", got)
	}
	if c := got[2]; c.ID != "ck-cc" || c.Kind != "archive" || c.Archive != filepath.Join(root, "ck-cc") || c.Name != "k8s\x1b[2J" {
		t.Errorf("archive %+v", c)
	}
	// No checkpoint: an empty array, not null.
	a, _, _ = testApp()
	a.ckEngine, a.cfg.CheckpointRoot = &checkpointtest.Engine{}, filepath.Join(t.TempDir(), "none")
	if code := runCheckpoint(context.Background(), a, []string{"list", "--json"}); code != exitOK || a.rawStdout.(interface{ String() string }).String() != "[]\n" {
		t.Errorf("empty: exit %d, %q", code, a.rawStdout)
	}
}

func TestCheckpointInspect(t *testing.T) {
	a, _, root := checkpointApp(t)
	out := a.rawStdout.(interface{ String() string })
	if code := runCheckpoint(context.Background(), a, []string{"inspect", "ck-cc"}); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	var c checkpointJSON
	if err := json.Unmarshal([]byte(out.String()), &c); err != nil || c.ID != "ck-cc" || c.Archive != filepath.Join(root, "ck-cc") || c.Kind != "archive" || c.Driver != "pi" {
		t.Errorf("%+v, %v: %s", c, err, out)
	}
	if !strings.Contains(out.String(), "\n  \"id\": \"ck-cc\"") {
		t.Errorf("not indented: %s", out)
	}
	a, _, _ = checkpointApp(t)
	errb := a.rawStderr.(interface{ String() string })
	if code := runCheckpoint(context.Background(), a, []string{"inspect", "ck-99"}); code != exitError || !strings.Contains(errb.String(), `checkpoint not found: "ck-99"`) {
		t.Errorf("missing: exit %d, %q", code, errb)
	}
}

func TestCheckpointRemove(t *testing.T) {
	a, eng, root := checkpointApp(t)
	out, errb := a.rawStdout.(interface{ String() string }), a.rawStderr.(interface{ String() string })
	code := runCheckpoint(context.Background(), a, []string{"rm", "ck-aa", "ck-cc"})
	if code != exitOK || out.String() != "ck-aa\nck-cc\n" || errb.String() != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errb)
	}
	if refs := eng.Refs(); !slices.Equal(refs, []string{sandboxagent.CheckpointRepo + ":ck-bb"}) {
		t.Errorf("images left %v", refs)
	}
	if _, err := os.Stat(filepath.Join(root, "ck-cc")); !os.IsNotExist(err) {
		t.Errorf("archive still there: %v", err)
	}

	// Missing, in use, named twice: each reported, the rest removed, 125.
	a, eng, _ = checkpointApp(t)
	out, errb = a.rawStdout.(interface{ String() string }), a.rawStderr.(interface{ String() string })
	code = runCheckpoint(context.Background(), a, []string{"rm", "ck-99", "ck-bb", "ck-aa", "ck-aa"})
	if code != exitError || out.String() != "ck-aa\n" {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	for _, want := range []string{
		`sandbox-agent: checkpoint not found: "ck-99"`,
		"sandbox-agent: checkpoint ck-bb is in use: an agent still runs on it",
		`sandbox-agent: checkpoint not found: "ck-aa"`,
	} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr %q lacks %q", errb, want)
		}
	}
	if refs := eng.Refs(); len(refs) != 1 {
		t.Errorf("images left %v", refs)
	}
}

func TestCheckpointArguments(t *testing.T) {
	root := t.TempDir()
	checkpointtest.WriteArchive(t, root, sandboxagent.Checkpoint{ID: "ck-cc", Created: ckTime, Driver: "pi"})
	// Kubernetes: no engine to connect to for checkpoints, the archives only.
	k8s := map[string]string{"SANDBOX_AGENT_RUNTIME": "kubernetes", "SANDBOX_AGENT_CHECKPOINT_ROOT": root}
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"no subcommand", nil, []string{"checkpoint"}, exitError, "usage: sandbox-agent checkpoint COMMAND"},
		{"help", nil, []string{"checkpoint", "--help"}, exitOK, ""},
		{"unknown subcommand", nil, []string{"checkpoint", "frob"}, exitError, `unknown command "frob"`},
		{"list takes no argument", nil, []string{"checkpoint", "list", "ck-1"}, exitError, "takes no arguments"},
		{"list unknown flag", nil, []string{"checkpoint", "list", "--yaml"}, exitError, "flag provided but not defined"},
		{"inspect without id", nil, []string{"checkpoint", "inspect"}, exitError, "usage: sandbox-agent checkpoint inspect ID"},
		{"inspect two ids", nil, []string{"checkpoint", "inspect", "ck-1", "ck-2"}, exitError, "usage: sandbox-agent checkpoint inspect ID"},
		{"rm without id", nil, []string{"checkpoint", "rm"}, exitError, "usage: sandbox-agent checkpoint rm ID..."},
		{"bad checkpoint_root", map[string]string{"SANDBOX_AGENT_CHECKPOINT_ROOT": "rel"}, []string{"checkpoint", "list"}, exitError, `config key "checkpoint_root"`},
		{"bad checkpoint_retention", map[string]string{"SANDBOX_AGENT_CHECKPOINT_RETENTION": "0"}, []string{"checkpoint", "list"}, exitError, `config key "checkpoint_retention"`},
		{"rm missing on kubernetes", k8s, []string{"checkpoint", "rm", "ck-99"}, exitError, `checkpoint not found: "ck-99"`},
		{"ask --image with --from-checkpoint", nil, []string{"ask", "--from-checkpoint", "ck-cc", "--image", "x", "hi"}, exitError, "--image with --from-checkpoint"},
		{"ask from a missing checkpoint", k8s, []string{"ask", "--from-checkpoint", "ck-99", "hi"}, exitError, `--from-checkpoint: checkpoint not found: "ck-99"`},
		{"ask from a checkpoint of another driver", k8s, []string{"ask", "--driver", "dsh", "--from-checkpoint", "ck-cc", "hi"}, exitError, "checkpoint ck-cc is of a pi agent, not --driver dsh"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tt.env, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.wantCode, stderr)
			}
			if !strings.Contains(stderr+stdout, tt.wantErr) {
				t.Errorf("stderr %q does not contain %q", stderr, tt.wantErr)
			}
		})
	}
	// list on Kubernetes reads the archives without a cluster.
	code, stdout, stderr := runCLI(t, k8s, "checkpoint", "list")
	if code != exitOK || !strings.Contains(stdout, "ck-cc") || !strings.Contains(stdout, "archive") {
		t.Errorf("list on kubernetes: exit %d, %q, %q", code, stdout, stderr)
	}
}

func TestPrintCheckpointGC(t *testing.T) {
	a, out, _ := testApp()
	a.printCheckpointGC(gc.CheckpointResult{
		Removed:   []gc.CheckpointEntry{{Checkpoint: sandboxagent.Checkpoint{ID: "ck-01", Name: "base"}, Reason: "older than 168h0m0s"}},
		Kept:      []gc.CheckpointEntry{{Checkpoint: sandboxagent.Checkpoint{ID: "ck-02"}, Reason: "in use: an agent still runs on it"}},
		Leftovers: []string{"/root/ck-03"},
	}, "would remove")
	want := "would remove checkpoint ck-01 base (older than 168h0m0s)\n" +
		"kept checkpoint ck-02 - (in use: an agent still runs on it)\n" +
		"would remove checkpoint folder /root/ck-03 (never completed)\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
}

func TestPrintTurnCheckpoint(t *testing.T) {
	a, out, _ := testApp()
	a.printTurn(a.jsonOut(), false, sandboxagent.TurnResult{Reply: "DONE"}, nil, "ck-0123", nil)
	if out.String() != "DONE\ncheckpoint: ck-0123\n" {
		t.Errorf("plain: %q", out)
	}
	a, out, _ = testApp()
	a.printTurn(a.jsonOut(), true, sandboxagent.TurnResult{Reply: "DONE"}, nil, "ck-0123", nil)
	var rl resultLine
	if err := json.Unmarshal(out.Bytes(), &rl); err != nil || rl.Checkpoint != "ck-0123" || rl.Reply != "DONE" {
		t.Errorf("json: %+v, %v: %s", rl, err, out)
	}
	a, out, _ = testApp()
	a.printResult(a.jsonOut(), true, sandboxagent.TurnResult{Reply: "DONE"}, nil)
	if strings.Contains(out.String(), "checkpoint") {
		t.Errorf("no checkpoint, yet: %s", out)
	}
}

// A server's checkpoint (its store names it) is removed only with --force.
func TestCheckpointRemoveOwned(t *testing.T) {
	a, eng, _ := checkpointApp(t)
	eng.Commit(t, sandboxagent.Checkpoint{ID: "ck-dd", Created: ckTime, Parent: "sa-4", Driver: "pi", Owner: "serve-1"})
	errb := a.rawStderr.(interface{ String() string })
	if code := runCheckpoint(context.Background(), a, []string{"rm", "ck-dd"}); code != exitError || !strings.Contains(errb.String(), "belongs to server serve-1") {
		t.Fatalf("rm of an owned checkpoint: exit %d, stderr %q", code, errb)
	}
	if n := len(eng.Refs()); n != 3 {
		t.Fatalf("images left %d, want 3", n)
	}
	if code := runCheckpoint(context.Background(), a, []string{"rm", "--force", "ck-dd"}); code != exitOK || len(eng.Refs()) != 2 {
		t.Fatalf("rm --force: exit %d, %d images left", code, len(eng.Refs()))
	}
}
