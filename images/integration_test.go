//go:build integration

package images

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandbox-agent/sandbox-agent/images/catalog"
	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
)

// The images are built beforehand (.ci/build_docker.sh). With CI=true a
// missing engine or image fails the test; otherwise it skips.
func integrationClient(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = c.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	}
	if err != nil {
		prereq.Missing(t, "no Docker engine: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// runOnce runs cmd in a fresh container of image (as the image's user) and
// returns its exit code and combined output.
func runOnce(t *testing.T, c *client.Client, image string, cmd ...string) (int64, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	created, err := c.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{Image: image, Cmd: cmd, Tty: true,
			Labels: map[string]string{"sandbox-agent.test": "images-integration"}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatalf("create %s: %v", image, err)
	}
	defer c.ContainerRemove(context.Background(), created.ID, client.ContainerRemoveOptions{Force: true})
	wait := c.ContainerWait(ctx, created.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err := c.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatalf("start %s: %v", image, err)
	}
	var code int64
	select {
	case r := <-wait.Result:
		code = r.StatusCode
	case err := <-wait.Error:
		t.Fatalf("wait %s: %v", image, err)
	}
	logs, err := c.ContainerLogs(ctx, created.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatalf("logs %s: %v", image, err)
	}
	defer logs.Close()
	var out bytes.Buffer
	io.Copy(&out, logs)
	return code, strings.ReplaceAll(out.String(), "\r\n", "\n")
}

func TestIntegrationImagesPrintPinnedVersions(t *testing.T) {
	c := integrationClient(t)
	eng := NewEngine(c)
	v := catalog.Versions()
	repo := os.Getenv("SANDBOX_AGENT_IMAGE_NAME")

	base := v.BaseImage(repo)
	ok, err := eng.ImageExists(context.Background(), base.Tag)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		prereq.Missing(t, "%s is not built (.ci/build_docker.sh)", base.Tag)
	} else {
		code, out := runOnce(t, c, base.Tag, "sh", "-c", "id -u; pwd; node --version; git --version; rg --version; python3 --version")
		want := []string{"1000\n/workspace\nv" + v.Base.NodeVersion + "\n", "git version", "ripgrep", "Python 3"}
		for _, w := range want {
			if code != 0 || !strings.Contains(out, w) {
				t.Errorf("%s: exit %d, output %q lacks %q", base.Tag, code, out, w)
			}
		}
	}

	for _, cli := range v.CLINames() {
		t.Run(cli, func(t *testing.T) {
			img, err := v.Image(cli, repo)
			if err != nil {
				t.Fatal(err)
			}
			ok, err := eng.ImageExists(context.Background(), img.Tag)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				prereq.Missing(t, "%s is not built (.ci/build_docker.sh %s)", img.Tag, cli)
			}
			code, out := runOnce(t, c, img.Tag, cli, "--version")
			t.Logf("%s --version: %s", cli, strings.TrimSpace(out))
			if code != 0 || !strings.Contains(out, img.Version) {
				t.Errorf("%s %s --version: exit %d, output %q, want %s", img.Tag, cli, code, out, img.Version)
			}
			// Ensure finds it and builds nothing.
			tag, err := (&onlyExists{eng}).ensure(t, cli, repo)
			if err != nil || tag != img.Tag {
				t.Errorf("Ensure = %q, %v", tag, err)
			}
		})
	}
}

// onlyExists is an Engine that fails any build: Ensure on a present image
// must not build.
type onlyExists struct{ *ClientEngine }

func (o *onlyExists) Build(context.Context, BuildRequest, io.Writer) error {
	return io.ErrUnexpectedEOF
}

func (o *onlyExists) ensure(t *testing.T, cli, repo string) (string, error) {
	b, err := New(o, Options{Repo: repo})
	if err != nil {
		t.Fatal(err)
	}
	return b.Ensure(context.Background(), cli)
}
