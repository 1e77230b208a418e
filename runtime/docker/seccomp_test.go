package docker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/seccomp"
)

// The profile is read back as each engine records it: Docker its text,
// Podman the path of the file seccompFile wrote.
func TestSeccompReadBack(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	profile := seccomp.Profile()
	want := sandboxagent.SeccompDigest(profile)
	file, err := seccompFile(profile)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := seccompFile(profile); err != nil || again != file {
		t.Errorf("second write: %s %v, want %s", again, err, file)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o644 || !strings.Contains(filepath.Base(file), strings.TrimPrefix(want, "sha256:")) {
		t.Errorf("profile file %s: %v %v", file, fi, err)
	}
	for _, tc := range []struct {
		name string
		opts []string
		want string
	}{
		{"docker", securityOpt(true, profile), want},
		{"podman", []string{"no-new-privileges", "seccomp=" + file}, want},
		{"none", []string{"no-new-privileges"}, ""},
		{"unconfined", []string{"seccomp=unconfined"}, ""},
		{"another profile", []string{`seccomp={"defaultAction":"SCMP_ACT_ALLOW"}`}, sandboxagent.SeccompDigest([]byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`))},
		{"file gone", []string{"seccomp=/nonexistent/profile.json"}, "unreadable /nonexistent/profile.json"},
	} {
		if got := seccompOf(tc.opts); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	// A file changed after it was written no longer matches.
	if err := os.WriteFile(file, []byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := seccompOf([]string{"seccomp=" + file}); got == want {
		t.Error("a changed profile file reads back as ours")
	}
}
