//go:build integration

package docker_test

import (
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// An image's ENTRYPOINT does not take the sandbox's command as its
// arguments: a sandbox (keep-alive, then an exec) and a one-shot command
// (the container's own process) run as asked.
func TestIntegrationImageEntrypointIgnored(t *testing.T) {
	rt, ctx := commitEngine(t)
	ref := "sandbox-agent-test/entrypoint:" + randSuffix()
	buildImage(t, rt, ctx, ref, "FROM "+testenv.Image()+"\nENTRYPOINT [\"/bin/echo\", \"ENTRYPOINT\"]\n")
	opts := sandboxagent.SandboxOptions{Image: ref, Config: testenv.Config()}
	sb := testenv.Sandbox(t, rt, opts)
	res, err := sb.Exec(ctx, []string{"echo", "exec"})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "exec\n" {
		t.Fatalf("exec in a sandbox of an image with an entrypoint: %+v stdout %q, %v", res, res.Stdout, err)
	}
	if !sandboxagent.CanRunOnce(ctx, rt, opts) {
		return // Podman: RunOnce refuses (TestIntegrationRunOnce)
	}
	res, err = sandboxagent.RunOnce(ctx, rt, opts, sandboxagent.ExecRequest{Cmd: []string{"echo", "once"}})
	if err != nil || res.ExitCode != 0 || strings.Contains(string(res.Stdout), "ENTRYPOINT") || string(res.Stdout) != "once\n" {
		t.Fatalf("one-shot in an image with an entrypoint: %+v stdout %q, %v", res, res.Stdout, err)
	}
}
