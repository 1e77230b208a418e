package sandboxagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/safetar"
)

func TestStartFromRefuses(t *testing.T) {
	root := filepath.Join(t.TempDir(), "checkpoints")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.CheckpointRoot = root
	ok := filepath.Join(root, "ck-00112233")
	if err := os.Mkdir(ok, 0o700); err != nil {
		t.Fatal(err)
	}
	meta, _ := json.Marshal(Checkpoint{ID: "ck-00112233", Archive: ok})
	if err := os.WriteFile(filepath.Join(ok, archiveMeta), meta, 0o600); err != nil {
		t.Fatal(err)
	}
	drv := &fakeDriver{} // named claude
	for _, tc := range []struct {
		name string
		c    Checkpoint
	}{
		{"other driver", Checkpoint{ID: "ck-00112233", Driver: "pi", Archive: ok}},
		{"neither image nor archive", Checkpoint{ID: "ck-00112233", Driver: "claude"}},
		{"foreign image", Checkpoint{ID: "ck-00112233", Driver: "claude", Image: "debian:stable-slim"}},
		{"image of another id", Checkpoint{ID: "ck-00112233", Driver: "claude", Image: CheckpointRepo + ":ck-44556677"}},
		{"both", Checkpoint{ID: "ck-00112233", Driver: "claude", Archive: ok, Image: CheckpointRepo + ":ck-00112233"}},
		{"archive outside the root", Checkpoint{ID: "ck-00112233", Driver: "claude", Archive: t.TempDir()}},
		{"id with a path", Checkpoint{ID: "ck-../x", Driver: "claude", Archive: filepath.Join(root, "ck-../x")}},
		{"incomplete archive", Checkpoint{ID: "ck-44556677", Driver: "claude", Archive: filepath.Join(root, "ck-44556677")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := StartFrom(context.Background(), nil, drv, tc.c, WithConfig(cfg))
			// Refused before any engine call (a nil Runtime would be refused too).
			if !errors.Is(err, ErrInvalidArgument) || strings.Contains(err.Error(), "nil Runtime") {
				t.Fatalf("StartFrom: %v; want ErrInvalidArgument about the checkpoint", err)
			}
		})
	}
	if _, err := archived(cfg, Checkpoint{ID: "ck-00112233", Archive: ok}); err != nil {
		t.Errorf("a complete archive under the root: %v", err)
	}
}

func TestCheckpointRootChecked(t *testing.T) {
	if _, err := checkpointRoot("relative/dir"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("relative root: %v", err)
	}
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := checkpointRoot(open); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("a root others can read: %v", err)
	}
	made := filepath.Join(t.TempDir(), "a", "b")
	if got, err := checkpointRoot(made); err != nil || got != made {
		t.Errorf("a missing root: %q, %v", got, err)
	}
	if fi, err := os.Stat(made); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the made root: %v, %v", fi.Mode(), err)
	}
}

func TestForkCount(t *testing.T) {
	a := &Agent{}
	for _, n := range []int{0, -1, maxFork + 1} {
		if _, err := a.Fork(context.Background(), n); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Fork(%d): %v; want ErrInvalidArgument", n, err)
		}
	}
}

func TestBytesExceeded(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&safetar.Error{Entry: "big.bin", Reason: "more than 8388608 bytes of regular files", Err: safetar.ErrLimit}, true},
		{fmt.Errorf("download: %w", &safetar.Error{Entry: "x", Reason: "file of 9 bytes exceeds the remaining byte budget (1 of 8)", Err: safetar.ErrLimit}), true},
		// The entry's name is the sandbox's: it says nothing.
		{&safetar.Error{Entry: "node_modules/bytes/index.js", Reason: "more than 100000 entries (implicitly created directories included)", Err: safetar.ErrLimit}, false},
		{&safetar.Error{Entry: "bytes/a/b", Reason: "deeper than 64 components", Err: safetar.ErrLimit}, false},
		{&safetar.Error{Entry: "bytes", Reason: "bytes of a symlink", Err: safetar.ErrUnsafe}, false},
		{errors.New("more than 5 bytes"), false},
	} {
		if got := bytesExceeded(tc.err); got != tc.want {
			t.Errorf("bytesExceeded(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
