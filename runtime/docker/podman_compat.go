package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/moby/client"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/seccomp"
)

// Podman's Docker-compatible API (podman system service) differs from
// Docker's in ways that matter here; this file holds what the rest of the
// package needs to know about it:
//
//   - Detection: every Podman response carries a Libpod-Api-Version header
//     (Docker never sends one); observe records it, so the engine is known
//     from the first request (the client's version negotiation ping) on.
//   - Capabilities on create: see podmanCaps below (CapAdd is granted to
//     a non-root user on Podman).
//   - Capabilities on inspect: compat inspect reports CapAdd/CapDrop relative to
//     Podman's default capability set (CapDrop ALL reads back as the list of
//     defaults that were dropped), so a "drop ALL, add these" request never
//     reads back as asked. The libpod inspect endpoint reports the bounding
//     set the container will really get; Inspect reports that as
//     CapDrop [ALL] + CapAdd <bounding set>, which is what the request
//     means on either engine.
//   - SecurityOpt reads back as "no-new-privileges" (no ":true"); the
//     Sandbox's check accepts every spelling.
//   - Errors: Podman words refusals differently (e.g. killing a stopped
//     container is "container state improper", 409) and sometimes answers
//     500 where Docker answers 404; isGone and classify know both.
//   - Copy-out of a path that disappears between Podman's stat and its
//     copy (a container racing its own download) fails with 500 "no such
//     file or directory", not 404; pathVanished knows it.
//   - Copy-out resolves a symlinked source inside the container when it
//     copies: a source that was a directory at stat time and a symlink a
//     moment later streams the symlink's target (another directory of
//     the container, or its whole root filesystem) under the requested
//     name. Docker sends the symlink itself. Either way the archive only
//     holds container files; the download's caps bound the size.
//   - ExtraHosts "NAME:host-gateway": Podman 4's compat API does not
//     resolve host-gateway (Podman 5 does, containers/podman#19152): it
//     writes "host-gateway NAME" into /etc/hosts, so NAME resolves to
//     nothing. podmanExtraHosts refuses it there. Podman adds
//     host.containers.internal (the host, as seen from the container's
//     network) to /etc/hosts by itself.
//   - Auto-remove is done by conmon's cleanup process a moment after the
//     main process exits; until then inspect still shows the container
//     (state "exited" or "stopping"). Remove waits for it to be gone on
//     both engines.

// libpodHeader is the response header only Podman sends.
const libpodHeader = "Libpod-Api-Version"

// observe is the client's response hook: it remembers whether the engine
// is Podman (and its libpod API version).
func (r *Runtime) observe(resp *http.Response) {
	r.seen.Store(true)
	if v := resp.Header.Get(libpodHeader); v != "" {
		if p := r.libpod.Load(); p == nil || *p != v {
			r.libpod.Store(&v)
		}
	}
}

// podman reports whether the engine answered as Podman, and its libpod API
// version. It knows only after the first response.
func (r *Runtime) podman() (string, bool) {
	p := r.libpod.Load()
	if p == nil || *p == "" {
		return "", false
	}
	return *p, true
}

// sideClient returns an HTTP client and base URL that reach the same engine
// as cli, for libpod endpoints the Engine API client has no call for. A
// caller-supplied client is used as is (tests); otherwise requests go over
// cli's own dialer (unix socket, TCP, TLS alike), as plain HTTP on that
// connection.
func sideClient(cli *client.Client, hc *http.Client) (*http.Client, string) {
	base := "http://engine"
	if u, err := client.ParseHostURL(cli.DaemonHost()); err == nil && u.Path != "" {
		base += strings.TrimSuffix(u.Path, "/")
	}
	if hc != nil {
		return hc, base
	}
	dial := cli.Dialer()
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		// Few calls: keep one idle connection, not a pool.
		MaxIdleConnsPerHost: 1,
	}}, base
}

// libpodGet GETs a libpod endpoint (path after /libpod) into v. The path
// carries the engine's own libpod API version: an older Podman refuses a
// newer one.
func (r *Runtime) libpodGet(ctx context.Context, version, path string, v any) error {
	u := r.base + "/v" + strings.TrimPrefix(version, "v") + "/libpod" + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return fmt.Errorf("libpod %s: %w: %w", path, sandboxagent.ErrEngineUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		err := fmt.Errorf("libpod %s: %s: %s", path, resp.Status, strings.TrimSpace(string(msg)))
		if resp.StatusCode == http.StatusNotFound && strings.HasPrefix(path, "/containers/") {
			err = fmt.Errorf("%w: %w", sandboxagent.ErrContainerNotFound, err)
		}
		return err
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(v); err != nil {
		return fmt.Errorf("libpod %s: %w", path, err)
	}
	return nil
}

// libpodCaps returns the capability bounding set Podman will give the
// container (upper case, without CAP_), and false when this Podman does
// not report it.
func (r *Runtime) libpodCaps(ctx context.Context, version, id string) ([]string, bool, error) {
	var body map[string]json.RawMessage
	if err := r.libpodGet(ctx, version, "/containers/"+url.PathEscape(id)+"/json", &body); err != nil {
		return nil, false, err
	}
	raw, ok := body["BoundingCaps"]
	if !ok {
		return nil, false, nil
	}
	var caps []string
	if err := json.Unmarshal(raw, &caps); err != nil {
		return nil, false, fmt.Errorf("libpod inspect %s: BoundingCaps: %w", id, err)
	}
	return normCaps(caps), true, nil
}

// normCaps upper-cases capability names and strips CAP_.
func normCaps(in []string) []string {
	out := make([]string, 0, len(in))
	for _, c := range in {
		out = append(out, strings.TrimPrefix(strings.ToUpper(c), "CAP_"))
	}
	return out
}

// Capabilities on Podman: a capability named in CapAdd is not only put in
// the bounding set, it is also granted (effective, permitted, inheritable
// and ambient) to a non-root container user, whether the user comes from
// the create request or from the image's USER, and to every exec as that
// user. Docker grants nothing to a non-root user. So "drop ALL, add the
// defaults" would hand the sandbox's unprivileged user CAP_SETUID,
// CAP_DAC_OVERRIDE, ... on Podman. Expressed instead as "drop every Podman
// default that is not wanted" (CapAdd only for wanted capabilities outside
// Podman's default set), the bounding set is the same and a non-root user
// gets no capabilities, as on Docker.

// podmanDefaultCaps returns the default capability set of the Podman
// service (upper case, without CAP_).
func (r *Runtime) podmanDefaultCaps(ctx context.Context, version string) ([]string, error) {
	if v, ok := r.podmanDefaults.Load(version); ok {
		return v.([]string), nil
	}
	var body struct {
		Host struct {
			Security struct {
				Capabilities string `json:"capabilities"`
			} `json:"security"`
		} `json:"host"`
	}
	if err := r.libpodGet(ctx, version, "/info", &body); err != nil {
		return nil, err
	}
	caps := []string{}
	for _, c := range strings.Split(body.Host.Security.Capabilities, ",") {
		if c = strings.TrimSpace(c); c != "" {
			caps = append(caps, c)
		}
	}
	if len(caps) == 0 {
		return nil, errors.New("libpod info reports no default capabilities")
	}
	caps = normCaps(caps)
	r.podmanDefaults.Store(version, caps)
	return caps, nil
}

// dropOnly rewrites "drop ALL, add want" as drops from Podman's default
// set def, plus adds for wanted capabilities def lacks.
func dropOnly(def, want []string) (drop, add []string) {
	want = normCaps(want)
	drop = []string{}
	for _, c := range def {
		if !slices.Contains(want, c) {
			drop = append(drop, c)
		}
	}
	for _, c := range want {
		if !slices.Contains(def, c) && !slices.Contains(add, c) {
			add = append(add, c)
		}
	}
	return drop, add
}

// podmanCaps returns the CapDrop and CapAdd to send for spec: unchanged on
// Docker, or for a privileged container, or when spec does not drop ALL.
func (r *Runtime) podmanCaps(ctx context.Context, spec sandboxagent.ContainerSpec) (drop, add []string, err error) {
	drop, add = spec.CapDrop, spec.CapAdd
	if spec.Privileged || len(add) == 0 || !slices.ContainsFunc(drop, func(c string) bool { return strings.EqualFold(c, "ALL") }) {
		return drop, add, nil
	}
	version, ok, err := r.engine(ctx)
	if err != nil || !ok {
		return drop, add, err
	}
	def, err := r.podmanDefaultCaps(ctx, version)
	if err != nil {
		return nil, nil, fmt.Errorf("podman default capabilities: %w", err)
	}
	drop, add = dropOnly(def, add)
	return drop, add, nil
}

// engine is podman, asking the engine first when no response was seen yet.
func (r *Runtime) engine(ctx context.Context) (string, bool, error) {
	if !r.seen.Load() {
		if _, err := r.cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
			return "", false, err
		}
	}
	v, ok := r.podman()
	return v, ok, nil
}

// pathVanished reports a copy-out error meaning the source path is gone.
// Docker answers 404 (classify knows it); Podman answers 500 "no such
// file or directory" when the path disappears between its stat and its
// copy.
func pathVanished(err error) bool {
	return !containerGone(err) && errorHas(err, "no such file or directory")
}

// hostGateway reports an ExtraHosts entry naming Docker's special
// host-gateway address ("NAME:host-gateway", or "NAME=host-gateway").
func hostGateway(entry string) bool {
	return strings.HasSuffix(entry, ":host-gateway") || strings.HasSuffix(entry, "=host-gateway")
}

// podmanExtraHosts refuses host-gateway entries on a Podman older than 5,
// which would write them into /etc/hosts unresolved. Docker, and a
// version it cannot parse, pass.
func (r *Runtime) podmanExtraHosts(ctx context.Context, hosts []string) error {
	i := slices.IndexFunc(hosts, hostGateway)
	if i < 0 {
		return nil
	}
	version, ok, err := r.engine(ctx)
	if err != nil || !ok {
		return err
	}
	major, _, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	if n, err := strconv.Atoi(major); err != nil || n >= 5 {
		return nil
	}
	return fmt.Errorf("%w: extra host %q: Podman %s does not resolve host-gateway (Podman 5 does); "+
		"use host.containers.internal, which Podman adds to /etc/hosts itself, or host networking",
		sandboxagent.ErrInvalidArgument, hosts[i], version)
}

// seccompFile is the path of a file holding profile, for Podman: its compat
// API reads "seccomp=" as a file on the engine's host, not as the profile's
// text as Docker does (the engine runs on this host: the sandboxes'
// sockets are bind-mounted from it too). The file is named by the
// profile's digest in this user's cache folder and written once.
func seccompFile(profile []byte) (string, error) {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("sandbox-agent-seccomp-%d", os.Getuid()))
	if cache, err := os.UserCacheDir(); err == nil { // else a service without HOME
		dir = filepath.Join(cache, "sandbox-agent", "seccomp")
	}
	name := filepath.Join(dir, strings.ReplaceAll(seccomp.Digest(profile), ":", "-")+".json")
	if old, err := os.ReadFile(name); err == nil && bytes.Equal(old, profile) {
		return name, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("seccomp profile file: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".profile-*")
	if err != nil {
		return "", fmt.Errorf("seccomp profile file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(profile); err != nil {
		tmp.Close()
		return "", fmt.Errorf("seccomp profile file: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return "", fmt.Errorf("seccomp profile file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("seccomp profile file: %w", err)
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return "", fmt.Errorf("seccomp profile file: %w", err)
	}
	return name, nil
}
