//go:build integration

package main

import (
	"strings"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/images/catalog"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// images push and images check --registry as users run them, against a
// real registry on the loopback, with small stand-ins under the agent
// images' tags (.ci/run's release step pushes the real images). On Podman,
// which has no DistributionInspect, both refuse with a clear error.
func TestIntegrationCLIImagesPushCheck(t *testing.T) {
	rt := testenv.Runtime(t)
	info := testenv.Engine(t)
	reg := testenv.Registry(t)
	// A repository of its own: the registry may be shared (CI's), and its
	// sandbox-agent repository holds the real images the engine runs.
	path := "push-" + runID()
	repo := reg + "/" + path
	v := catalog.Versions()
	base, _ := v.Image("base", repo)
	pi, _ := v.Image("pi", repo)
	testenv.StandInImage(t, rt, base.Tag, "cli-base")
	testenv.StandInImage(t, rt, pi.Tag, "cli-pi")
	env := cliEnv()
	env["SANDBOX_AGENT_IMAGE_NAME"] = repo

	if info.Name == "podman" {
		for _, args := range [][]string{{"images", "push", "base", "pi"}, {"images", "check", "--registry", "base"}} {
			code, stdout, stderr := runCLI(t, env, args...)
			if code != exitError || !strings.Contains(stderr, "DistributionInspect") {
				t.Errorf("%v on podman: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
			}
		}
		return
	}

	// A missing local image: 125, naming images build; nothing pushed.
	code, stdout, stderr := runCLI(t, env, "images", "push", "base", "dsh")
	if code != exitError || stdout != "" || !strings.Contains(stderr, "sandbox-agent images build dsh") {
		t.Errorf("push with dsh missing: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	// Push: one line per image, base first, with the digest the registry
	// serves (read from the registry's own HTTP API); progress on stderr.
	code, stdout, stderr = runCLI(t, env, "images", "push", "pi", "base")
	if code != exitOK {
		t.Fatalf("push: exit %d\n%s", code, stderr)
	}
	_, _, baseDigest := testenv.RegistryManifest(t, reg, path, strings.TrimPrefix(base.Tag, repo+":"))
	piManifest, piType, piDigest := testenv.RegistryManifest(t, reg, path, strings.TrimPrefix(pi.Tag, repo+":"))
	if want := base.Tag + "\t" + baseDigest + "\n" + pi.Tag + "\t" + piDigest + "\n"; stdout != want {
		t.Errorf("push stdout %q, want %q", stdout, want)
	}
	if !strings.Contains(stderr, "==> pushing "+pi.Tag) {
		t.Errorf("no push progress on stderr: %q", stderr)
	}

	code, stdout, stderr = runCLI(t, env, "images", "check", "--registry", "base", "pi")
	if want := base.Tag + "\tlocal,registry\tdigest ok " + baseDigest + "\n" + pi.Tag + "\tlocal,registry\tdigest ok " + piDigest + "\n"; code != exitOK || stdout != want {
		t.Errorf("check after push: exit %d, stdout %q, want %q; stderr %q", code, stdout, want, stderr)
	}

	// Tamper: another client makes the registry serve pi's manifest under
	// base's tag, behind the engine's back. The local base image keeps its
	// repo digest: exit 3, naming both digests.
	testenv.PutRegistryManifest(t, reg, path, strings.TrimPrefix(base.Tag, repo+":"), piManifest, piType)
	code, stdout, stderr = runCLI(t, env, "images", "check", "--registry", "base", "pi")
	if want := base.Tag + "\tlocal,registry\tdigest MISMATCH local " + baseDigest + " registry " + piDigest + "\n"; code != exitDigest || !strings.HasPrefix(stdout, want) ||
		!strings.Contains(stdout, pi.Tag+"\tlocal,registry\tdigest ok ") || !strings.Contains(stderr, "image digest mismatch") {
		t.Errorf("check after tampering: exit %d, stdout %q, want it to start with %q; stderr %q", code, stdout, want, stderr)
	}
	code, _, stderr = runCLI(t, env, "images", "push", "base")
	if code != exitError || !strings.Contains(stderr, "refusing to overwrite") {
		t.Errorf("push over the tampered tag: exit %d, stderr %q", code, stderr)
	}

	// image_verify=strict: the stand-ins are not the released images
	// (nothing is recorded in a development build; what a release records
	// differs): exit 3.
	env["SANDBOX_AGENT_IMAGE_VERIFY"] = "strict"
	code, stdout, stderr = runCLI(t, env, "images", "check", "pi")
	if code != exitDigest || !strings.HasPrefix(stdout, pi.Tag+"\tlocal\tdigest MISMATCH") {
		t.Errorf("check under strict: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
