package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/seccomp"
)

// seccomp install writes the compacted profile where the kubelet looks,
// named by its SHA-256 (the digest Inspect reads back from a pod), and
// again on a second run; bad usage is our error.
func TestSeccompInstall(t *testing.T) {
	root := t.TempDir()
	for range 2 {
		code, stdout, stderr := runCLI(t, nil, "seccomp", "install", "--kubelet-root", root)
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		path := strings.TrimSpace(stdout)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		hexSum := hex.EncodeToString(sum[:])
		if want := filepath.Join(root, "seccomp", "sandbox-agent", hexSum+".json"); path != want {
			t.Errorf("path %s, want %s (named by the content's SHA-256)", path, want)
		}
		if "sha256:"+hexSum != seccomp.Digest(seccomp.Profile()) {
			t.Errorf("the file's SHA-256 %s is not the profile's digest %s", hexSum, seccomp.Digest(seccomp.Profile()))
		}
		var v map[string]any
		if err := json.Unmarshal(data, &v); err != nil || v["defaultAction"] != "SCMP_ACT_ERRNO" {
			t.Errorf("not the profile: %v %.80s", err, data)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("mode %v %v", fi.Mode(), err)
		}
		if left, _ := filepath.Glob(filepath.Join(root, "seccomp", "sandbox-agent", ".sandbox-agent-*")); len(left) != 0 {
			t.Errorf("temporary files left: %v", left)
		}
	}
	for _, args := range [][]string{{"seccomp"}, {"seccomp", "remove"}, {"seccomp", "install", "extra"}, {"seccomp", "install", "--kubelet-root", ""}} {
		if code, _, stderr := runCLI(t, nil, args...); code != exitError {
			t.Errorf("%v: exit %d (%s), want %d", args, code, stderr, exitError)
		}
	}
}
