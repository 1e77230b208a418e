//go:build integration

package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/client"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/runtime/docker"
)

const (
	checkpointLabel = "sandbox-agent.checkpoint"
	ownerLabel      = "sandbox-agent.owner"
)

// baseODD is an env value of the base image that each engine's parser of
// commit changes treats specially (quotes, $, backslash, comma).
const baseODD = `a "b" $c \d,e`

// A sandbox container committed as a checkpoint image: its files come
// along, its environment (a secret) and its labels do not (the base
// image's come back); the image is refused removal while a container uses
// it.
func TestIntegrationCommit(t *testing.T) {
	rt, ctx := commitEngine(t)
	suffix := randSuffix()
	ref := "sandbox-agent-checkpoint:ck-it-" + suffix
	// Our label's value: unique (other tests may list checkpoints
	// meanwhile), and special to both parsers.
	mark := `it-` + suffix + ` $HOME "q" \ ,x`
	removeImageAtCleanup(t, rt, ref)
	base := "sandbox-agent-commit-base:it-" + suffix
	buildBase(t, rt, ctx, base)

	id := startContainer(t, rt, ctx, base, []string{"SECRET=hunter2", "LANG=xx", "ODD=hunter2"},
		map[string]string{ownerLabel: "x", "org.example.base": "hunter2"})
	run(t, rt, ctx, id, "printf checkpointed > /root/marker && head -c 1000000 /dev/urandom > /root/data")

	size, err := rt.Commit(ctx, id, ref, func(int64) map[string]string { return map[string]string{checkpointLabel: mark} }, 100<<20)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if size < 1000000 || size > 10<<20 {
		t.Errorf("Commit size %d, want the layer of a 1 MB file", size)
	}
	t.Logf("committed %s: %d bytes", ref, size)

	if ok, err := rt.ImageExists(ctx, ref); !ok || err != nil {
		t.Fatalf("ImageExists(%s) = %v, %v", ref, ok, err)
	}
	img, err := rt.Client().ImageInspect(ctx, ref)
	if err != nil {
		t.Fatalf("inspect %s: %v", ref, err)
	}
	for _, e := range img.Config.Env {
		if strings.Contains(e, "hunter2") {
			t.Errorf("the image carries the container's secret: %q (env %q)", e, img.Config.Env)
		}
	}
	if v, ok := img.Config.Labels[ownerLabel]; ok && v != "" {
		t.Errorf("the image carries the container's label %s=%q", ownerLabel, v)
	}
	if got := img.Config.Labels[checkpointLabel]; got != mark {
		t.Errorf("label %s = %q, want %q", checkpointLabel, got, mark)
	}
	if got := img.Config.Labels["org.example.base"]; got != "kept" {
		t.Errorf("the base image's label is %q, want kept", got)
	}
	for _, want := range []string{"LANG=C.UTF-8", "ODD=" + baseODD, "SECRET="} {
		if !slices.Contains(img.Config.Env, want) {
			t.Errorf("the image's env %q lacks %q", img.Config.Env, want)
		}
	}
	imgs, err := rt.Images(ctx, checkpointLabel)
	if err != nil {
		t.Fatalf("Images: %v", err)
	}
	if !listed(imgs, ref, mark) {
		t.Errorf("Images(%s) does not list %s: %+v", checkpointLabel, ref, imgs)
	}

	// A container of the checkpoint has the files, and neither the secret
	// nor a broken environment (PATH finds cat).
	fork := startContainer(t, rt, ctx, ref, nil, nil)
	if out := run(t, rt, ctx, fork, "cat /root/marker"); out != "checkpointed" {
		t.Errorf("the fork reads %q from the marker", out)
	}
	if out := run(t, rt, ctx, fork, "env"); strings.Contains(out, "hunter2") {
		t.Errorf("the fork's environment holds the secret:\n%s", out)
	}

	if err := rt.RemoveImage(ctx, ref); !errors.Is(err, checkpoint.ErrInUse) {
		t.Fatalf("RemoveImage while a container uses it: %v, want ErrInUse", err)
	}
	if err := rt.Remove(ctx, fork); err != nil {
		t.Fatalf("remove the fork: %v", err)
	}
	if err := rt.RemoveImage(ctx, ref); err != nil {
		t.Fatalf("RemoveImage: %v", err)
	}
	if ok, err := rt.ImageExists(ctx, ref); ok || err != nil {
		t.Errorf("ImageExists after RemoveImage = %v, %v", ok, err)
	}
	if err := rt.RemoveImage(ctx, ref); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("RemoveImage of a removed image: %v, want ErrNotFound", err)
	}
}

// A sandbox larger than the limit is not committed.
func TestIntegrationCommitTooLarge(t *testing.T) {
	rt, ctx := commitEngine(t)
	suffix := randSuffix()
	ref := "sandbox-agent-checkpoint:ck-it-" + suffix
	mark := "it-" + suffix
	removeImageAtCleanup(t, rt, ref)

	id := startContainer(t, rt, ctx, testenv.Image(), nil, nil)
	run(t, rt, ctx, id, "head -c 20000000 /dev/urandom > /root/big")
	_, err := rt.Commit(ctx, id, ref, func(int64) map[string]string { return map[string]string{checkpointLabel: mark} }, 10<<20)
	if !errors.Is(err, sandboxagent.ErrCheckpointSize) {
		t.Fatalf("Commit of 20 MB with a 10 MB limit: %v, want ErrCheckpointSize", err)
	}
	t.Logf("refused: %v", err)
	if ok, err := rt.ImageExists(ctx, ref); ok || err != nil {
		t.Errorf("ImageExists after a refused commit = %v, %v", ok, err)
	}
	imgs, err := rt.Images(ctx, checkpointLabel)
	if err != nil {
		t.Fatalf("Images: %v", err)
	}
	if listed(imgs, ref, mark) {
		t.Errorf("a refused commit left an image: %+v", imgs)
	}
}

// commitEngine is the engine under test, with its test image, and a
// context for one test.
func commitEngine(t *testing.T) (*docker.Runtime, context.Context) {
	t.Helper()
	rt := testenv.Runtime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	if _, err := rt.Client().ImageInspect(ctx, testenv.Image()); cerrdefs.IsNotFound(err) {
		prereq.Missing(t, "test image %s is missing (build it with .ci/build_base.sh)", testenv.Image())
	}
	return rt, ctx
}

// buildBase builds ref from the test image with an environment and a
// label of its own, and removes it at cleanup (after the containers and
// the checkpoint, which use it).
func buildBase(t *testing.T, rt *docker.Runtime, ctx context.Context, ref string) {
	t.Helper()
	buildImage(t, rt, ctx, ref, "FROM "+testenv.Image()+"\n"+
		`ENV LANG=C.UTF-8 ODD="a \"b\" \$c \\d,e"`+"\n"+
		"LABEL org.example.base=kept\n")
	img, err := rt.Client().ImageInspect(ctx, ref)
	if err != nil {
		t.Fatalf("inspect %s: %v", ref, err)
	}
	if !slices.Contains(img.Config.Env, "ODD="+baseODD) {
		t.Fatalf("the base image's env is %q, want ODD=%s", img.Config.Env, baseODD)
	}
}

// buildImage builds ref from the Dockerfile df and removes it at cleanup.
func buildImage(t *testing.T, rt *docker.Runtime, ctx context.Context, ref, df string) {
	t.Helper()
	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(df))}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(df))
	tw.Close()
	res, err := rt.Client().ImageBuild(ctx, &ctxTar, client.ImageBuildOptions{
		Tags: []string{ref}, Dockerfile: "Dockerfile", Remove: true, ForceRemove: true, Version: build.BuilderV1,
	})
	if err != nil {
		t.Fatalf("build %s: %v", ref, err)
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("build %s: %v", ref, err)
		}
		if m.Error != "" {
			t.Fatalf("build %s: %s", ref, m.Error)
		}
	}
	removeImageAtCleanup(t, rt, ref)
}

// randSuffix is 8 random hex digits, for names of our own.
func randSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// removeImageAtCleanup removes ref when the test ends (registered before
// the containers' cleanups, so it runs after them).
func removeImageAtCleanup(t *testing.T, rt *docker.Runtime, ref string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := rt.RemoveImage(ctx, ref); err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
			t.Errorf("cleanup: remove %s: %v", ref, err)
		}
	})
}

// startContainer starts a hardened container of image that sleeps, and
// removes it at cleanup.
func startContainer(t *testing.T, rt *docker.Runtime, ctx context.Context, image string, env []string, labels map[string]string) string {
	t.Helper()
	id, err := rt.Create(ctx, sandboxagent.ContainerSpec{
		Name: "sandbox-agent-commit-it-" + randSuffix(), Image: image, Cmd: []string{"sleep", "600"},
		Env: env, Labels: labels, CapDrop: []string{"ALL"}, CapAdd: sandboxagent.DefaultCaps,
		NoNewPrivileges: true, Init: true, PidsLimit: 64, NetworkMode: "none",
	})
	if err != nil {
		t.Fatalf("create a container of %s: %v", image, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := rt.Remove(ctx, id); err != nil {
			t.Errorf("cleanup: remove container %s: %v", id, err)
		}
	})
	if err := rt.Start(ctx, id); err != nil {
		t.Fatalf("start a container of %s: %v", image, err)
	}
	return id
}

// run runs a shell script in the container and returns its stdout.
func run(t *testing.T, rt *docker.Runtime, ctx context.Context, id, script string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	code, err := rt.Exec(ctx, id, sandboxagent.RuntimeExec{Cmd: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errOut})
	if err != nil || code != 0 {
		t.Fatalf("%s: exit %d, %v: %s", script, code, err, errOut.String())
	}
	return out.String()
}

// listed says whether imgs has ref, labelled as ours.
func listed(imgs []checkpoint.Image, ref, mark string) bool {
	for _, img := range imgs {
		if img.Ref == ref && img.Labels[checkpointLabel] == mark {
			return true
		}
	}
	return false
}

// The container's user (SandboxOptions.User) does not become the image's:
// a sandbox started on the checkpoint without a user of its own runs as
// the base image's.
func TestIntegrationCommitUser(t *testing.T) {
	rt, ctx := commitEngine(t)
	ref := "sandbox-agent-checkpoint:ck-it-" + randSuffix()
	removeImageAtCleanup(t, rt, ref)
	id, err := rt.Create(ctx, sandboxagent.ContainerSpec{
		Name: "sandbox-agent-commit-it-" + randSuffix(), Image: testenv.Image(), Cmd: []string{"sleep", "600"}, User: "1000:1000",
		CapDrop: []string{"ALL"}, CapAdd: sandboxagent.DefaultCaps, NoNewPrivileges: true, Init: true, PidsLimit: 64, NetworkMode: "none",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Remove(context.Background(), id) })
	if err := rt.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Commit(ctx, id, ref, func(int64) map[string]string { return map[string]string{checkpointLabel: "user"} }, 100<<20); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	img, err := rt.Client().ImageInspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if u := img.Config.User; u != "0" && u != "" {
		t.Errorf("the image's user is %q, the container's; want the base's (root)", u)
	}
}
