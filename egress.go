package sandboxagent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandbox-agent/sandbox-agent/egressproxy"
)

// Egress is a sandbox's network policy (docs/security.md). It is enforced
// by the network: a sandbox under EgressNone or EgressModel has no network
// interface but loopback, so nothing in it can connect anywhere or resolve
// a name, whatever it does with proxy variables.
type Egress string

const (
	// EgressNone: no network at all (with an allow-list: only its egress
	// proxy). The default of a bare sandbox.
	EgressNone Egress = "none"
	// EgressModel: no network, except the host's model proxy (and an
	// allow-list's egress proxy). Agents' default; for a bare sandbox the
	// same as EgressNone.
	EgressModel Egress = "model"
	// EgressOpen: the engine's bridge network, unrestricted. An explicit
	// opt-in: the agent can reach the internet and the host's services.
	EgressOpen Egress = "open"
)

// ParseEgress checks a policy name ("" stays "": the caller's default).
func ParseEgress(s string) (Egress, error) {
	switch e := Egress(s); e {
	case "", EgressNone, EgressModel, EgressOpen:
		return e, nil
	}
	return "", fmt.Errorf("%w: egress %q (want none, model or open)", ErrInvalidArgument, s)
}

// CheckAllowHosts validates allow-list patterns: host names, "*.domain"
// wildcards (subdomains only), optionally with ":PORT".
func CheckAllowHosts(hosts []string) error {
	for _, h := range hosts {
		if err := egressproxy.ValidPattern(h); err != nil {
			return fmt.Errorf("%w: allow host %q: %w", ErrInvalidArgument, h, err)
		}
	}
	return nil
}

// EgressRecord is one decision of a sandbox's egress proxy.
type EgressRecord = egressproxy.Record

// The host side of a sandbox's boundary: one Unix socket per service in a
// folder of its own, bind-mounted read-only at socketDir, where
// forward.pl relays a 127.0.0.1 port of the sandbox to each.
const socketDir = "/run/sandbox-agent"

// Service names (forward.pl arguments, socket file names).
const (
	serviceModel  = "model"
	serviceEgress = "egress"
)

// hostSide is the folder of sockets and the servers behind them.
type hostSide struct {
	dir     string
	closers []interface{ Close() error } // handlers holding tunnels
	servers []*http.Server
	names   []string
	ports   map[string]int
	wg      sync.WaitGroup
	tunnel  *tunnel // the exec tunnel, where the sockets are not mounted
}

// serves reports whether name is one of this side's services.
func (h *hostSide) serves(name string) bool {
	for _, n := range h.names {
		if n == name {
			return true
		}
	}
	return false
}

// socketRoot is where the per-sandbox socket folders live: short (a Unix
// socket path must fit in 108 bytes) and private to this user.
func socketRoot() (string, error) {
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

// openHostSide serves each handler on its own socket. The folder's name is
// random and its parent is private: another user of the host cannot find
// the sockets. The folder and sockets are open to every uid, because the
// sandbox's user (mapped or not) must connect.
func openHostSide(services map[string]http.Handler) (*hostSide, error) {
	root, err := socketRoot()
	if err != nil {
		return nil, fmt.Errorf("host proxy sockets: %w", err)
	}
	// s-<our PID>-<random>: gc and later processes remove the folder
	// once that process is gone (sweepSocketDirs).
	dir, err := os.MkdirTemp(root, "s-"+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, fmt.Errorf("host proxy sockets: %w", err)
	}
	h := &hostSide{dir: dir, ports: map[string]int{}}
	if err := os.Chmod(dir, 0o755); err != nil {
		h.close()
		return nil, err
	}
	for _, name := range []string{serviceModel, serviceEgress} {
		handler, ok := services[name]
		if !ok {
			continue
		}
		p := filepath.Join(dir, name+".sock")
		l, err := net.Listen("unix", p)
		if err != nil {
			h.close()
			return nil, fmt.Errorf("host proxy socket: %w", err)
		}
		if err := os.Chmod(p, 0o666); err != nil {
			l.Close()
			h.close()
			return nil, err
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
	return h, nil
}

// mount is the folder as the container sees it.
func (h *hostSide) mount() Mount { return Mount{Source: h.dir, Target: socketDir, ReadOnly: true} }

// relay starts forward.pl in the sandbox (as root, so the sandbox's user
// cannot kill it) and reads the ports it listens on.
func (h *hostSide) relay(ctx context.Context, s *Sandbox) error {
	args := []string{"perl", "-e", forwardScript}
	for _, n := range h.names {
		args = append(args, n+"="+socketDir+"/"+n+".sock")
	}
	res, err := s.Run(ctx, ExecRequest{Cmd: args, User: "0", Timeout: s.cfg.Timeouts.Start})
	if err != nil {
		return fmt.Errorf("start the relay to the host's proxies: %w", err)
	}
	if res.ExitCode != 0 {
		msg := strings.TrimSpace(string(res.Stderr))
		if res.ExitCode == 126 || res.ExitCode == 127 {
			msg = "the image has no perl (perl-base): " + msg
		}
		return fmt.Errorf("%w: start the relay to the host's proxies (exit %d): %s; a local engine is needed (the sockets are bind-mounted from this host)",
			ErrNetwork, res.ExitCode, msg)
	}
	sc := bufio.NewScanner(strings.NewReader(string(res.Stdout)))
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
	}
	return nil
}

// url is how the sandbox reaches a service.
func (h *hostSide) url(name string) string {
	return "http://127.0.0.1:" + strconv.Itoa(h.ports[name])
}

// close stops the servers (closing open tunnels) and removes the folder.
func (h *hostSide) close() error {
	var errs []error
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
	if err := os.RemoveAll(h.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// proxyEnv points the usual proxy variables at the egress relay; every
// exec of the sandbox gets them. Loopback stays direct (the model relay).
func proxyEnv(url string) map[string]string {
	return map[string]string{
		"HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
		"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
	}
}
