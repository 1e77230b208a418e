package drivertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// HostOps is the drivers' fake sandbox: a ContainerOps whose Run executes
// the command on the host (the driver's real shell scripts, with the
// host's sh, grep, sed, find ...) with HOME and the working directory in
// a private temporary tree, and whose ReadFile and WriteFile act on that
// tree. It behaves as *Sandbox does where drivers can tell: a missing
// file is ErrPathNotFound, a file over max is ErrLimitExceeded, WriteFile
// creates parents, a command that is not on PATH exits 127.
//
// Paths handed to ReadFile and WriteFile are host paths when they lie
// inside Root (what the driver's scripts print, since they run with
// HOME=Home); any other absolute path is a container path and lives at
// Root+path (a driver writing /tmp/x writes Root/tmp/x).
type HostOps struct {
	// Root holds everything: Home, Work and Bin.
	Root string
	// Home is $HOME of every command.
	Home string
	// Work is the working directory of a command that names none; a test
	// may point it elsewhere (it must exist).
	Work string
	// Bin comes first on PATH; Install puts fake CLIs there.
	Bin string
	// Path follows Bin on PATH: only the host's system folders, so a
	// CLI the test did not install is missing as in a bare image.
	Path string
	// Intercept, when set, sees every Run first: a non-nil result or an
	// error answers the request instead of the host.
	Intercept func(req sandboxagent.ExecRequest) (*sandboxagent.ExecResult, error)

	mu     sync.Mutex
	runs   []sandboxagent.ExecRequest
	reads  []string
	writes []string
}

// NewHostOps makes a HostOps in a fresh temporary folder. It skips the
// test on a host without sh.
func NewHostOps(t testing.TB) *HostOps {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("the host has no sh")
	}
	root := t.TempDir()
	// pwd -P and the driver's scripts must see the paths the test sees.
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	h := &HostOps{
		Root: root,
		Home: filepath.Join(root, "home"),
		Work: filepath.Join(root, "workspace"),
		Bin:  filepath.Join(root, "bin"),
		Path: "/usr/local/bin:/usr/bin:/bin",
	}
	for _, d := range []string{h.Home, h.Work, h.Bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// Install puts an executable name with content script into Bin.
func (h *HostOps) Install(t testing.TB, name, script string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(h.Bin, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// Runs are the requests Run got, in order.
func (h *HostOps) Runs() []sandboxagent.ExecRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]sandboxagent.ExecRequest(nil), h.runs...)
}

// LastRun is the last request Run got (zero before the first).
func (h *HostOps) LastRun() sandboxagent.ExecRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.runs) == 0 {
		return sandboxagent.ExecRequest{}
	}
	return h.runs[len(h.runs)-1]
}

// Reads and Writes are the names ReadFile and WriteFile got, as given.
func (h *HostOps) Reads() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.reads...)
}

// Writes: see Reads.
func (h *HostOps) Writes() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.writes...)
}

// HomePath is rel inside Home.
func (h *HostOps) HomePath(rel string) string { return filepath.Join(h.Home, rel) }

// Read returns the file rel (inside Home), failing the test when it
// cannot.
func (h *HostOps) Read(t testing.TB, rel string) string {
	t.Helper()
	b, err := os.ReadFile(h.HomePath(rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Exists reports whether rel (inside Home) exists.
func (h *HostOps) Exists(rel string) bool {
	_, err := os.Lstat(h.HomePath(rel))
	return err == nil
}

// Run runs req.Cmd on the host (or lets Intercept answer).
func (h *HostOps) Run(ctx context.Context, req sandboxagent.ExecRequest) (sandboxagent.ExecResult, error) {
	h.mu.Lock()
	h.runs = append(h.runs, req)
	h.mu.Unlock()
	if h.Intercept != nil {
		if res, err := h.Intercept(req); res != nil || err != nil {
			if res == nil {
				res = &sandboxagent.ExecResult{}
			}
			return *res, err
		}
	}
	if len(req.Cmd) == 0 {
		return sandboxagent.ExecResult{}, fmt.Errorf("%w: empty command", sandboxagent.ErrInvalidArgument)
	}
	path := h.Bin + ":" + h.Path
	name := req.Cmd[0]
	if !strings.Contains(name, "/") {
		// Look the command up in the sandbox's PATH, not the test's.
		name = "/nonexistent/" + name
		for _, dir := range filepath.SplitList(path) {
			if st, err := os.Stat(filepath.Join(dir, req.Cmd[0])); err == nil && !st.IsDir() {
				name = filepath.Join(dir, req.Cmd[0])
				break
			}
		}
	}
	cmd := exec.CommandContext(ctx, name, req.Cmd[1:]...)
	cmd.Env = []string{"HOME=" + h.Home, "PATH=" + path, "LC_ALL=C"}
	for k, v := range req.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Dir = h.Work
	if req.WorkDir != "" {
		cmd.Dir = req.WorkDir
	}
	if req.Stdin != nil {
		cmd.Stdin = req.Stdin
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := sandboxagent.ExecResult{Stdout: out.Bytes(), Stderr: errb.Bytes()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.ExitCode = ee.ExitCode()
	case errors.Is(err, fs.ErrNotExist):
		res.ExitCode = 127
	case err != nil:
		return res, err
	}
	return res, nil
}

// hostPath is where the container path name lives on the host.
func (h *HostOps) hostPath(name string) string {
	if name == h.Root || strings.HasPrefix(name, h.Root+"/") || !filepath.IsAbs(name) {
		return name
	}
	return filepath.Join(h.Root, name)
}

// ReadFile reads name (see HostOps for paths); max <= 0 means no cap.
func (h *HostOps) ReadFile(_ context.Context, name string, max int64) ([]byte, error) {
	h.mu.Lock()
	h.reads = append(h.reads, name)
	h.mu.Unlock()
	b, err := os.ReadFile(h.hostPath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", name, sandboxagent.ErrPathNotFound)
	}
	if err != nil {
		return nil, err
	}
	if max > 0 && int64(len(b)) > max {
		return nil, fmt.Errorf("read %s: %w: %d bytes, cap %d", name, sandboxagent.ErrLimitExceeded, len(b), max)
	}
	return b, nil
}

// WriteFile writes name (see HostOps for paths), creating its parents.
func (h *HostOps) WriteFile(_ context.Context, name string, data []byte, mode fs.FileMode) error {
	h.mu.Lock()
	h.writes = append(h.writes, name)
	h.mu.Unlock()
	p := h.hostPath(name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if mode == 0 {
		mode = 0o644
	}
	return os.WriteFile(p, data, mode.Perm())
}

var _ sandboxagent.ContainerOps = (*HostOps)(nil)
