// Package boundary is the host side of a sandbox's network boundary: one
// Unix socket per host proxy (the agent's model proxy, the egress proxy)
// in a folder of its own, and the relay that reaches them from inside the
// sandbox — forward.pl through the folder bind-mounted read-only at
// SocketDir, or, where the engine cannot mount it (Kubernetes), tunnel.pl
// carrying every connection over one long exec (tunnel.go).
//
// It knows no sandbox: the caller hands it an Exec. It imports nothing of
// the root package; the root's ErrNetwork is this package's.
package boundary

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNetwork: the sandbox's boundary (the relay to the host's model and
// egress proxies) could not be set up. The root package exports it as
// sandboxagent.ErrNetwork.
var ErrNetwork = errors.New("sandbox network boundary")

// SocketDir is where the folder of sockets is bind-mounted read-only in
// the sandbox, where forward.pl relays a 127.0.0.1 port of the sandbox
// to each socket.
const SocketDir = "/run/sandbox-agent"

// Service names (forward.pl and tunnel.pl arguments, socket file names).
const (
	ServiceModel  = "model"
	ServiceEgress = "egress"
)

// forwardScript (perl) relays 127.0.0.1 ports of the sandbox to the
// host's proxy sockets, prints "NAME PORT" lines and detaches.
//
//go:embed scripts/forward.pl
var forwardScript string

// Exec runs args in the sandbox wired to stdin (nil: the command reads
// EOF), stdout and stderr until the command exits or ctx ends, and
// returns its exit code (a non-zero code is not an error).
type Exec func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error)

// Host is the folder of sockets and the servers behind them.
type Host struct {
	dir     string
	closers []interface{ Close() error } // handlers holding tunnels
	servers []*http.Server
	names   []string
	ports   map[string]int
	want    map[string]int // UsePorts: the ports the relay must listen on again
	wg      sync.WaitGroup
	tunnel  *tunnel // the exec tunnel, where the sockets are not mounted
}

// Serves reports whether name is one of this side's services.
func (h *Host) Serves(name string) bool {
	for _, n := range h.names {
		if n == name {
			return true
		}
	}
	return false
}

// SocketRoot is where the per-sandbox socket folders live: short (a Unix
// socket path must fit in 108 bytes) and private to this user.
func SocketRoot() (string, error) {
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" || len(base) > 40 {
		base = os.TempDir()
	}
	dir := filepath.Join(base, fmt.Sprintf("sandbox-agent-sock-%d", os.Getuid()))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	// In a shared /tmp another user could have made it first: it must be
	// a real folder of ours that nobody else can enter.
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Getuid() {
		return "", fmt.Errorf("%s is not a folder of this user: remove it", dir)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// Open serves each handler (by service name: ServiceModel,
// ServiceEgress; others are ignored) on its own socket. The folder's
// name is random and its parent is private: another user of the host
// cannot find the sockets. The folder and sockets are open to every uid,
// because the sandbox's user (mapped or not) must connect. A handler with
// a Close method is closed by Close.
func Open(services map[string]http.Handler) (*Host, error) {
	root, err := SocketRoot()
	if err != nil {
		return nil, fmt.Errorf("host proxy sockets: %w", err)
	}
	// s-<our PID>-<random>: gc and later processes remove the folder
	// once that process is gone (SweepSocketDirs).
	dir, err := os.MkdirTemp(root, "s-"+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, fmt.Errorf("host proxy sockets: %w", err)
	}
	h := &Host{dir: dir, ports: map[string]int{}}
	if err := os.Chmod(dir, 0o755); err != nil {
		h.Close()
		return nil, err
	}
	if err := h.serve(services); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// Reopen serves the handlers again at the sockets of dir, the folder an
// earlier Open made for a sandbox whose host process died: the sandbox
// has it bind-mounted, so the folder itself must stay (a new one would
// not be seen inside). dir comes from stored state: it must be a socket
// folder right under this user's socket root, not a symlink, owned by
// this user with the mode Open gives it. A socket file left by the dead
// process is removed; one that still accepts connections (its owner
// lives) is refused, as is anything else in a socket's place.
func Reopen(dir string, services map[string]http.Handler) (*Host, error) {
	if err := checkSocketDir(dir); err != nil {
		return nil, fmt.Errorf("%w: reopen the host proxy sockets: %w", ErrNetwork, err)
	}
	for _, name := range []string{ServiceModel, ServiceEgress} {
		if _, ok := services[name]; ok {
			if err := clearSocket(filepath.Join(dir, name+".sock")); err != nil {
				return nil, fmt.Errorf("%w: reopen the host proxy sockets: %w", ErrNetwork, err)
			}
		}
	}
	h := &Host{dir: dir, ports: map[string]int{}}
	if err := h.serve(services); err != nil {
		h.Release()
		return nil, err
	}
	return h, nil
}

// checkSocketDir checks that dir is a folder Open made: see Reopen.
func checkSocketDir(dir string) error {
	root, err := SocketRoot()
	if err != nil {
		return err
	}
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || filepath.Dir(dir) != root || !socketDirName.MatchString(filepath.Base(dir)) {
		return fmt.Errorf("%q is not a socket folder in %s", dir, root)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Getuid() || fi.Mode().Perm() != 0o755 {
		return fmt.Errorf("%s is not a socket folder of this user (mode %v)", dir, fi.Mode())
	}
	return nil
}

// clearSocket removes the socket file p that a dead process left; a
// missing one is fine.
func clearSocket(p string) error {
	fi, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("%s is not a socket", p)
	}
	c, err := net.DialTimeout("unix", p, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%s is still served: the sandbox's owner is alive", p)
	}
	// Only a certain "nobody listens" proves it (as in socketDirStale).
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%s: %w", p, err)
	}
	return os.Remove(p)
}

// serve listens on a socket per service in the folder and serves it.
func (h *Host) serve(services map[string]http.Handler) error {
	for _, name := range []string{ServiceModel, ServiceEgress} {
		handler, ok := services[name]
		if !ok {
			continue
		}
		p := filepath.Join(h.dir, name+".sock")
		l, err := net.Listen("unix", p)
		if err != nil {
			return fmt.Errorf("host proxy socket: %w", err)
		}
		if err := os.Chmod(p, 0o666); err != nil {
			l.Close()
			return err
		}
		if c, ok := handler.(interface{ Close() error }); ok {
			h.closers = append(h.closers, c)
		}
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second}
		h.servers = append(h.servers, srv)
		h.names = append(h.names, name)
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			_ = srv.Serve(l)
		}()
	}
	return nil
}

// UsePorts makes Relay and StartTunnel listen on these ports of the
// sandbox (by service name) again: an adopted sandbox's CLI is
// configured with them. Call it before either.
func (h *Host) UsePorts(ports map[string]int) { h.want = ports }

// Port is the sandbox's port of a service, once Relay or StartTunnel
// returned (0: none).
func (h *Host) Port(name string) int { return h.ports[name] }

// Dir is the folder of sockets on the host, to be bind-mounted read-only
// at SocketDir.
func (h *Host) Dir() string { return h.dir }

// Relay starts forward.pl in the sandbox and reads the ports it listens
// on. exec must run it as root (so the sandbox's user cannot kill it)
// and end it by the start timeout; the relay detaches and exits.
func (h *Host) Relay(ctx context.Context, exec Exec) error {
	args := []string{"perl", "-e", forwardScript}
	for _, n := range h.names {
		arg := n + "=" + SocketDir + "/" + n + ".sock"
		if p := h.want[n]; p > 0 {
			arg += "=" + strconv.Itoa(p)
		}
		args = append(args, arg)
	}
	var stdout, stderr bytes.Buffer
	code, err := exec(ctx, args, nil, &stdout, &stderr)
	if err != nil {
		return fmt.Errorf("start the relay to the host's proxies: %w", err)
	}
	if code != 0 {
		msg := strings.TrimSpace(stderr.String())
		if code == 126 || code == 127 {
			msg = "the image has no perl (perl-base): " + msg
		}
		return fmt.Errorf("%w: start the relay to the host's proxies (exit %d): %s; a local engine is needed (the sockets are bind-mounted from this host)",
			ErrNetwork, code, msg)
	}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		name, port, ok := strings.Cut(sc.Text(), " ")
		n, err := strconv.Atoi(port)
		if !ok || err != nil || n <= 0 || n > 65535 {
			return fmt.Errorf("%w: relay printed %q", ErrNetwork, sc.Text())
		}
		h.ports[name] = n
	}
	for _, n := range h.names {
		if h.ports[n] == 0 {
			return fmt.Errorf("%w: relay reported no port for %s", ErrNetwork, n)
		}
		if w := h.want[n]; w > 0 && h.ports[n] != w {
			return fmt.Errorf("%w: relay listens for %s on port %d, not %d", ErrNetwork, n, h.ports[n], w)
		}
	}
	return nil
}

// Relayed takes the ports UsePorts named as relayed, without running
// Relay, when listeners (port → uid, of the sandbox's TCP listeners on any address)
// shows each held by root: the relay the dead host started outlives it
// (the sandbox's user cannot make a listener of root's). Otherwise it
// changes nothing and Relay must run (and judges squatters).
func (h *Host) Relayed(listeners map[int]int) bool {
	for _, n := range h.names {
		p := h.want[n]
		if uid, ok := listeners[p]; p <= 0 || !ok || uid != 0 {
			return false
		}
	}
	for _, n := range h.names {
		h.ports[n] = h.want[n]
	}
	return true
}

// URL is how the sandbox reaches a service, once Relay or StartTunnel
// returned.
func (h *Host) URL(name string) string {
	return "http://127.0.0.1:" + strconv.Itoa(h.ports[name])
}

// Close stops the servers (closing open tunnels) and removes the folder.
func (h *Host) Close() error { return h.close(true) }

// Release stops the servers like Close but keeps the folder, as a dead
// process would: the sandbox, left running, still mounts it (Reopen).
func (h *Host) Release() error { return h.close(false) }

func (h *Host) close(removeDir bool) error {
	if h.tunnel != nil {
		h.tunnel.close()
	}
	for _, c := range h.closers {
		_ = c.Close()
	}
	for _, srv := range h.servers {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := srv.Shutdown(ctx); err != nil {
			srv.Close()
		}
		cancel()
	}
	h.wg.Wait()
	if removeDir {
		return os.RemoveAll(h.dir)
	}
	return nil
}

// ProxyEnv points the usual proxy variables at the egress relay; every
// exec of the sandbox gets them. Loopback stays direct (the model relay).
func ProxyEnv(url string) map[string]string {
	return map[string]string{
		"HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
		"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
	}
}
