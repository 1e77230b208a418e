package testenv

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/client"

	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/runtime/docker"
)

// StandInImage builds, on rt's engine, a small image tagged ref to stand
// in for an agent image in registry tests: the test image plus a label
// (distinct labels make distinct images sharing one layer, so pushing it
// is quick). The image is removed at cleanup. A missing test image skips
// (fails in CI).
func StandInImage(t testing.TB, rt *docker.Runtime, ref, label string) {
	t.Helper()
	c := rt.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.ImageInspect(ctx, Image()); cerrdefs.IsNotFound(err) {
		prereq.Missing(t, "test image %s is missing (build it with .ci/build_base.sh)", Image())
	}
	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	df := []byte("FROM " + Image() + "\nLABEL io.github.sandbox-agent.test=" + label + "\n")
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(df))}); err != nil {
		t.Fatal(err)
	}
	tw.Write(df)
	tw.Close()
	res, err := c.ImageBuild(ctx, &ctxTar, client.ImageBuildOptions{
		Tags: []string{ref}, Dockerfile: "Dockerfile", Remove: true, ForceRemove: true, Version: build.BuilderV1,
	})
	if err != nil {
		t.Fatalf("build stand-in %s: %v", ref, err)
	}
	defer res.Body.Close()
	if err := streamError(res.Body); err != nil {
		t.Fatalf("build stand-in %s: %v", ref, err)
	}
	t.Cleanup(func() { RemoveImage(t, rt, ref) })
	if _, err := c.ImageInspect(ctx, ref); err != nil {
		t.Fatalf("stand-in %s after its build: %v", ref, err)
	}
}

// RemoveImage removes the tag ref (the image too when no other tag names
// it); a missing tag is fine.
func RemoveImage(t testing.TB, rt *docker.Runtime, ref string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := rt.Client().ImageRemove(ctx, ref, client.ImageRemoveOptions{PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
		t.Errorf("remove %s: %v", ref, err)
	}
}

// PullImage pulls ref through rt's engine.
func PullImage(t testing.TB, rt *docker.Runtime, ref string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := rt.Client().ImagePull(ctx, ref, client.ImagePullOptions{})
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	defer resp.Close()
	if err := streamError(resp); err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
}

// streamError reads an engine's JSON progress stream to its end and
// returns the first error message in it.
func streamError(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
			return errors.New(m.ErrorDetail.Message)
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
}
