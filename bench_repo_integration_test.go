//go:build integration

package sandboxagent_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
	"github.com/sandbox-agent/sandbox-agent/internal/gittest"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/repo"
)

// BenchmarkRepoSync: a host repository of 10,000 small text files in 250
// folders with three commits goes into a sandbox of the pi image (which
// has git) by package repo (put-s), against Sandbox.Upload of the same
// folder, .git included (upload-s); in the sandbox 100 files in 100
// folders change and half of them are committed; then Repo.Sync brings
// the agent's commit and one commit of the uncommitted rest home as a
// branch (sync-s), against what a user did before: Sandbox.Download of
// the whole working directory (download-s). Both baselines run in the
// same sandbox, in the same iteration.
//
//	go test -tags integration -run '^$' -bench BenchmarkRepoSync -benchtime 3x -count 1 .
func BenchmarkRepoSync(b *testing.B) {
	gittest.Need(b)
	rt := testenv.Runtime(b)
	ctx := context.Background()
	cfg := testenv.Config()
	cfg.Timeouts.Copy = 5 * time.Minute
	cfg.Timeouts.Exec = 5 * time.Minute
	image, err := catalog.Resolve("pi", "", cfg.ImageName, "")
	if err != nil {
		b.Fatal(err)
	}
	host := benchRepo(b, filepath.Join(b.TempDir(), "host"))
	out := b.TempDir()

	var put, upload, sync, download time.Duration
	var bundleBytes, downloadBytes int64
	var i int
	for b.Loop() {
		i++
		sb, err := sandboxagent.NewSandbox(ctx, rt, sandboxagent.SandboxOptions{Image: image, Config: cfg})
		if err != nil {
			b.Fatal(err)
		}
		r, err := repo.Open(ctx, host, sb.Name(), repo.Options{Branch: fmt.Sprintf("bench/%d", i)})
		if err != nil {
			b.Fatal(err)
		}
		s := benchRepoSandbox{sb, cfg.Timeouts.Copy}

		t0 := time.Now()
		if err := sb.Upload(ctx, host, "/tmp/upload"); err != nil {
			b.Fatal(err)
		}
		upload += time.Since(t0)

		t0 = time.Now()
		if err := r.Put(ctx, s); err != nil {
			b.Fatal(err)
		}
		put += time.Since(t0)

		// The agent's work: 100 files in 100 folders changed, the first
		// 50 committed.
		script := `set -e
for d in $(seq 0 99); do printf 'changed in the sandbox\n' >> "$(printf 'd%03d/f000.txt' "$d")"; done
git add $(for d in $(seq 0 49); do printf 'd%03d/f000.txt ' "$d"; done)
git -c core.hooksPath=/dev/null commit -q -m "agent: half of the changes"`
		if res, err := sb.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", script}}); err != nil || res.ExitCode != 0 {
			b.Fatal(res.ExitCode, string(res.Stderr), err)
		}

		t0 = time.Now()
		ch, err := r.Sync(ctx, s)
		if err != nil {
			b.Fatal(err)
		}
		sync += time.Since(t0)
		if len(ch.Commits) != 2 || !ch.Uncommitted {
			b.Fatalf("sync brought %d commits (uncommitted %v), want 2 (true)", len(ch.Commits), ch.Uncommitted)
		}
		bundleBytes += ch.Bytes

		t0 = time.Now()
		rep, err := sb.Download(ctx, "/workspace", filepath.Join(out, fmt.Sprintf("download-%d", i)))
		if err != nil {
			b.Fatal(err)
		}
		download += time.Since(t0)
		downloadBytes += rep.Bytes

		r.Close()
		if err := sb.Close(); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(filepath.Join(out, fmt.Sprintf("download-%d", i)))
	}
	n := float64(i)
	b.ReportMetric(put.Seconds()/n, "put-s")
	b.ReportMetric(upload.Seconds()/n, "upload-s")
	b.ReportMetric(put.Seconds()/upload.Seconds(), "put/upload")
	b.ReportMetric(sync.Seconds()/n, "sync-s")
	b.ReportMetric(download.Seconds()/n, "download-s")
	b.ReportMetric(sync.Seconds()/download.Seconds(), "sync/download")
	b.ReportMetric(float64(bundleBytes)/n/1e3, "bundle-kB")
	b.ReportMetric(float64(downloadBytes)/n/1e6, "download-MB")
}

// benchRepo makes the host repository at dir: 10,000 files of a few
// lines in 250 folders, committed, then two commits changing 200 files
// each; packed by git gc as a repository of some age is (no automatic
// gc on the way: it would race the last one).
func benchRepo(b *testing.B, dir string) string {
	b.Helper()
	run := func(args ...string) { gittest.Run(b, dir, args...) }
	write := func(d, f int, rev int) {
		p := filepath.Join(dir, fmt.Sprintf("d%03d", d), fmt.Sprintf("f%03d.txt", f))
		text := fmt.Sprintf("folder %d, file %d, revision %d\n%s", d, f, rev, strings.Repeat("some text of the file\n", 10))
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	const folders, perFolder = 250, 40
	for d := range folders {
		if err := os.MkdirAll(filepath.Join(dir, fmt.Sprintf("d%03d", d)), 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range perFolder {
			write(d, f, 0)
		}
	}
	run("init", "-q", "-b", "main")
	run("add", "-A")
	run("commit", "-q", "-m", "initial")
	for rev := 1; rev <= 2; rev++ {
		for k := range 200 {
			write((k*7+rev)%folders, (k+rev)%perFolder, rev)
		}
		run("commit", "-q", "-a", "-m", fmt.Sprintf("revision %d", rev))
	}
	run("gc", "-q")
	return dir
}

// benchRepoSandbox is package repo's side of a sandbox, as the agent's
// own adapter makes it (repo.go): Sandbox.Run in the working directory
// under the copy timeout.
type benchRepoSandbox struct {
	s       *sandboxagent.Sandbox
	timeout time.Duration
}

func (r benchRepoSandbox) Run(ctx context.Context, cmd []string, env map[string]string, stdin io.Reader, stdout io.Writer) (int, []byte, error) {
	res, err := r.s.Run(ctx, sandboxagent.ExecRequest{Cmd: cmd, Env: env, Stdin: stdin, Stdout: stdout, MaxOutputBytes: 64 << 10, Timeout: r.timeout})
	if err == nil && res.TimedOut {
		err = fmt.Errorf("timed out after %s", r.timeout)
	}
	return res.ExitCode, res.Stderr, err
}
