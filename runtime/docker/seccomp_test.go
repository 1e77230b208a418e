package docker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/seccomp"
)

// The profile is read back as each engine records it: Docker its text,
// Podman the path of the file seccompFile wrote.
func TestSeccompReadBack(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	profile := seccomp.Profile()
	want := seccomp.Digest(profile)
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
		{"another profile", []string{`seccomp={"defaultAction":"SCMP_ACT_ALLOW"}`}, seccomp.Digest([]byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`))},
		{"file gone", []string{"seccomp=/nonexistent/profile.json"}, "unreadable /nonexistent/profile.json"},
	} {
		if got := seccompOf(tc.opts); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	// The engine loaded the profile at creation, by a name that is its
	// digest: a cache emptied since (or a file changed) does not change
	// what the sandbox runs under.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if got := seccompOf([]string{"seccomp=" + file}); got != want {
		t.Errorf("our profile file deleted: %q, want %q from its name", got, want)
	}
	// Another file is read (and digested) as it is now.
	other := filepath.Join(t.TempDir(), "profile.json")
	if err := os.WriteFile(other, []byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := seccompOf([]string{"seccomp=" + other}); got == want || got != seccomp.Digest([]byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`)) {
		t.Errorf("another profile file reads back as %q", got)
	}
}
