package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/exectar"
)

// execWrapper gives a Kubernetes exec, which carries only argv, what the
// contract's exec has: environment variables (the exec-kill tag among
// them) and a working directory. Arguments: WORKDIR, NAME=VALUE…, --,
// then the command. A missing command exits 127, as on every engine.
const execWrapper = `cd -- "$1" || exit 126
shift
while [ "$#" -gt 0 ]; do
  if [ "$1" = -- ]; then shift; break; fi
  export "$1"
  shift
done
exec "$@"`

// exitCdFailed is what the wrapper exits with when the working directory
// is missing (sh's own code for a command that cannot be run).
const exitCdFailed = 126

// podUser is who a pod's commands run as (exec cannot change it).
type podUser struct{ uid, name string }

// Exec runs argv in the pod's container, streaming stdio, and returns the
// exit code. req.User must be the pod's own user (or empty): Kubernetes
// exec cannot switch users.
func (r *Runtime) Exec(ctx context.Context, id string, req sandboxagent.RuntimeExec) (int, error) {
	if len(req.Cmd) == 0 {
		return -1, fmt.Errorf("%w: empty command", sandboxagent.ErrInvalidArgument)
	}
	if req.User != "" {
		if err := r.checkUser(ctx, id, req.User); err != nil {
			return -1, err
		}
	}
	wd := req.WorkDir
	if wd == "" {
		wd = "."
	}
	argv := append([]string{"/bin/sh", "-c", execWrapper, "sandbox-agent-exec", wd}, req.Env...)
	argv = append(argv, "--")
	argv = append(argv, req.Cmd...)
	return r.stream(ctx, id, argv, req.Stdin, req.Stdout, req.Stderr)
}

// stream is one exec over the API server: WebSocket, SPDY where the
// server or a proxy in between refuses the upgrade.
func (r *Runtime) stream(ctx context.Context, id string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	u := r.cs.CoreV1().RESTClient().Post().Resource("pods").Name(id).Namespace(r.ns).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: containerName, Command: argv,
			Stdin: stdin != nil, Stdout: stdout != nil, Stderr: stderr != nil,
		}, scheme.ParameterCodec).URL()
	ws, err := remotecommand.NewWebSocketExecutor(r.rest, http.MethodGet, u.String())
	if err != nil {
		return -1, fmt.Errorf("exec: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(r.rest, http.MethodPost, u)
	if err != nil {
		return -1, fmt.Errorf("exec: %w", err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return -1, fmt.Errorf("exec: %w", err)
	}
	// client-go copies the two streams from two goroutines, which callers
	// (as with every engine) may give one writer; and on a cancelled
	// context it returns before they stop. One lock serialises them, and
	// nothing is written once stream has returned.
	release, err := r.admit(ctx)
	if err != nil {
		return -1, err
	}
	defer release()
	// The stream tells nothing of when the kubelet's runtime started the
	// process: the slot goes back at the first output, at the end, or
	// after execStartHold.
	hold := time.AfterFunc(execStartHold, release)
	defer hold.Stop()
	gate := &writeGate{onWrite: release}
	if stdout != nil {
		stdout = &lockedWriter{g: gate, w: stdout}
	}
	if stderr != nil {
		stderr = &lockedWriter{g: gate, w: stderr}
	}
	defer gate.close()
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
	if err == nil {
		return 0, nil
	}
	var ce utilexec.CodeExitError
	if errors.As(err, &ce) {
		return ce.ExitStatus(), nil
	}
	if ctx.Err() != nil {
		return -1, ctx.Err()
	}
	return -1, r.execErr(id, err)
}

// execErr explains a failed exec: the pod gone or stopped is
// ErrContainerNotFound (with the cluster's reason), else the API error.
func (r *Runtime) execErr(id string, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout*4)
	defer cancel()
	pod, gerr := r.cs.CoreV1().Pods(r.ns).Get(ctx, id, metav1.GetOptions{})
	if gerr != nil {
		return classify("exec in pod "+id, gerr, sandboxagent.ErrContainerNotFound)
	}
	if perr := podFailure(pod); perr != nil {
		return fmt.Errorf("exec in pod %s: %w", id, perr)
	}
	if pod.DeletionTimestamp != nil {
		return fmt.Errorf("exec in pod %s: %w: being deleted", id, sandboxagent.ErrContainerNotFound)
	}
	return classify("exec in pod "+id, err, sandboxagent.ErrContainerNotFound)
}

// checkUser accepts the pod's own user (by uid or name) and refuses any
// other with ErrUnsupportedByRuntime.
func (r *Runtime) checkUser(ctx context.Context, id, want string) error {
	r.usersMu.Lock()
	u, ok := r.users[id]
	r.usersMu.Unlock()
	if !ok {
		var out bytes.Buffer
		code, err := r.stream(ctx, id, []string{"/bin/sh", "-c", `id -u; id -un 2>/dev/null || echo`}, nil, &exectar.Limited{W: &out, N: 4096}, io.Discard)
		if err != nil {
			return err
		}
		lines := strings.Split(strings.TrimSpace(out.String())+"\n", "\n")
		if code != 0 || lines[0] == "" {
			return fmt.Errorf("exec in pod %s: cannot tell its user (id exited %d)", id, code)
		}
		u = podUser{uid: strings.TrimSpace(lines[0]), name: strings.TrimSpace(lines[1])}
		r.usersMu.Lock()
		r.users[id] = u
		r.usersMu.Unlock()
	}
	w, _, _ := strings.Cut(want, ":")
	if w == u.uid || (u.name != "" && w == u.name) || (w == "root" && u.uid == "0") {
		return nil
	}
	return fmt.Errorf("exec as user %q in pod %s: %w: Kubernetes exec runs as the pod's user (uid %s); set the sandbox's User instead", want, id, sandboxagent.ErrUnsupportedByRuntime, u.uid)
}

// CopyTo extracts a tar stream into dir with the image's tar, as the
// pod's user (owners in the archive apply only when that is root).
func (r *Runtime) CopyTo(ctx context.Context, id, dir string, tr io.Reader) error {
	return exectar.CopyTo(ctx, r.streamer(id), "pod", dir, tr)
}

// CopyFrom streams a tar of path (a symlink as itself, never followed),
// made by the image's tar. A missing path is ErrPathNotFound before any
// byte is returned; a failure later ends the stream with an error.
func (r *Runtime) CopyFrom(ctx context.Context, id, p string) (io.ReadCloser, error) {
	return exectar.CopyFrom(ctx, r.streamer(id), "pod", p)
}

func (r *Runtime) streamer(id string) exectar.Stream {
	return func(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
		return r.stream(ctx, id, argv, stdin, stdout, stderr)
	}
}

// writeGate is the lock of one exec's output writers, closed when the
// exec returns.
type writeGate struct {
	mu     sync.Mutex
	closed bool
	// onWrite, when set, is called at each write (the exec slot's
	// release: once is enough, it is idempotent).
	onWrite func()
}

func (g *writeGate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// lockedWriter writes under its gate, and drops what comes after it
// closed.
type lockedWriter struct {
	g *writeGate
	w io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.g.mu.Lock()
	defer l.g.mu.Unlock()
	if l.g.closed {
		return 0, io.ErrClosedPipe
	}
	if l.g.onWrite != nil {
		l.g.onWrite()
	}
	return l.w.Write(p)
}

// execStartHold bounds how long an exec holds its slot when it prints
// nothing: an exec starts in well under a second on a kubelet that is not
// saturated, and a silent long command must not starve the rest.
const execStartHold = time.Second

// admit takes an exec slot, its wait reported to ctx's queue-wait total.
// Without a gate it returns a no-op. The release is idempotent.
func (r *Runtime) admit(ctx context.Context) (func(), error) {
	if r.opts.ExecGate == nil {
		return func() {}, nil
	}
	t0 := time.Now()
	release, err := r.opts.ExecGate.Acquire(ctx)
	sandboxagent.AddExecQueueWait(ctx, time.Since(t0))
	if err != nil {
		return nil, fmt.Errorf("exec: waiting for the cluster's exec queue: %w", err)
	}
	return sync.OnceFunc(release), nil
}
