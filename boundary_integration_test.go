//go:build integration

package sandboxagent_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/driver/pi"
	"github.com/sandbox-agent/sandbox-agent/egressproxy"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/seccomp"
)

// connectVia is a bash program that sends a CONNECT for $1 to the egress
// relay named by HTTPS_PROXY and prints the status line.
const connectVia = `p=${HTTPS_PROXY##*:}; exec 3<>/dev/tcp/127.0.0.1/$p || exit 9
printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' "$1" "$1" >&3
IFS= read -r line <&3; echo "$line"`

// hostListener listens on every address of the host and counts the
// connections it accepts (none must come from a sandbox).
func hostListener(t *testing.T) (port int, accepted func() int) {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var mu sync.Mutex
	n := 0
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			n++
			mu.Unlock()
			c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// bridgeGateway is the host's address on the engine's default bridge
// (what a container on a network would use to reach the host).
func bridgeGateway(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"docker0", "podman0", "cni-podman0"} {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ip, _, err := net.ParseCIDR(a.String()); err == nil && ip.To4() != nil {
				return ip.String()
			}
		}
	}
	return "172.17.0.1"
}

// An agent's sandbox under the default policy (model) with an allow-list
// has no way out but its proxies: direct TCP to the host's listening ports
// fails, names do not resolve, a request with the proxy variables unset
// fails, and through the egress proxy a host off the list gets 403 — with
// a record of the denial and a line of egress.jsonl.
func TestIntegrationEgressBoundary(t *testing.T) {
	t.Parallel()
	port, accepted := hostListener(t)
	gw := bridgeGateway(t)
	var mu sync.Mutex
	var records []egressproxy.Record
	srv := drivertest.FakeModel(t, fakemodel.Script{})
	a := testenv.StartAgent(t, pi.New(pi.Options{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key}), drivertest.AuditRoot(t),
		sandboxagent.WithEgress("", "registry.npmjs.org"),
		sandboxagent.WithSandbox(func(o *sandboxagent.SandboxOptions) {
			o.OnEgress = func(r egressproxy.Record) { mu.Lock(); records = append(records, r); mu.Unlock() }
		}))
	sb := a.Container()
	run := func(script string, args ...string) sandboxagent.ExecResult {
		t.Helper()
		res, err := sb.Run(ctxT(t), sandboxagent.ExecRequest{Cmd: append([]string{"bash", "-c", script, "sh"}, args...), Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, addr := range []string{gw, "127.0.0.1"} {
		res := run(`timeout 5 bash -c 'exec 3<>/dev/tcp/$0/$1' "$1" "$2" && echo CONNECTED`, addr, fmt.Sprint(port))
		if strings.Contains(string(res.Stdout), "CONNECTED") {
			t.Errorf("direct TCP to %s:%d (a host listener) connected", addr, port)
		}
	}
	if res := run(`getent hosts registry.npmjs.org deb.debian.org`); res.ExitCode == 0 {
		t.Errorf("names resolve in the sandbox: %s", res.Stdout)
	}
	res := run(`unset HTTP_PROXY HTTPS_PROXY http_proxy https_proxy; timeout 5 bash -c 'exec 3<>/dev/tcp/registry.npmjs.org/443' && echo CONNECTED`)
	if strings.Contains(string(res.Stdout), "CONNECTED") {
		t.Errorf("a direct connection to registry.npmjs.org worked without the proxy")
	}
	res = run(connectVia, "deb.debian.org:443")
	if !strings.Contains(string(res.Stdout), " 403") {
		t.Errorf("CONNECT deb.debian.org through the egress proxy: %q %s, want 403", res.Stdout, res.Stderr)
	}
	res = run(connectVia, "127.0.0.1:"+fmt.Sprint(port))
	if !strings.Contains(string(res.Stdout), " 403") {
		t.Errorf("CONNECT to the host's loopback through the egress proxy: %q, want 403", res.Stdout)
	}
	if n := accepted(); n != 0 {
		t.Errorf("the host listener accepted %d connections from the sandbox", n)
	}
	mu.Lock()
	defer mu.Unlock()
	var denied []string
	for _, r := range records {
		if !r.Allowed {
			denied = append(denied, r.Host)
		}
	}
	if !strings.Contains(strings.Join(denied, " "), "deb.debian.org") {
		t.Errorf("denials recorded: %v, want deb.debian.org", denied)
	}
	if data, err := os.ReadFile(a.NetworkAuditDir() + "/egress.jsonl"); err != nil || !strings.Contains(string(data), `"host":"deb.debian.org"`) {
		t.Errorf("egress.jsonl: %v %s", err, data)
	}
}

// With --allow-host registry.npmjs.org, npm inside an agent image works
// through the egress proxy (npm honours HTTPS_PROXY); the only traffic
// leaving the host goes to the npm registry.
func TestIntegrationEgressAllowHostNPM(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	img, err := catalog.Resolve("pi", "", testenv.Config().ImageName, "")
	if err != nil {
		t.Fatal(err)
	}
	opts := sandboxagent.SandboxOptions{Image: img, AllowHosts: []string{"registry.npmjs.org"}}
	if ca := os.Getenv("SSL_CERT_FILE"); ca != "" {
		opts.TrustCACert = ca // this network intercepts TLS
	}
	sb := testenv.Sandbox(t, rt, opts)
	res, err := sb.Run(ctxT(t), sandboxagent.ExecRequest{Cmd: []string{"npm", "view", "is-number@7.0.0", "version"}, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != "7.0.0" {
		t.Fatalf("npm view through the egress proxy: exit %d: %s %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	res, err = sb.Run(ctxT(t), sandboxagent.ExecRequest{Cmd: []string{"npm", "view", "--registry", "https://deb.debian.org/", "is-number", "version"}, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 || !strings.Contains(string(res.Stdout)+string(res.Stderr), "403") {
		t.Errorf("npm against deb.debian.org: exit %d, want a 403 refusal: %s %s", res.ExitCode, res.Stdout, res.Stderr)
	}
}

// An agent's denied egress attempt during a turn is an egress_denied
// event in the turn's stream and a line of egress.jsonl. The explicit
// host-network opt-in still reaches the model through the proxy.
func TestIntegrationAgentEgressEvents(t *testing.T) {
	t.Parallel()
	for _, network := range []string{"", "host"} {
		t.Run("network="+network, func(t *testing.T) {
			srv := drivertest.FakeModel(t, drivertest.ShellThenDone(`bash -c "$CONNECT" sh deb.debian.org:443`))
			drv := pi.New(pi.Options{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key}) // pi: the one agent image the Podman suite has
			root := drivertest.AuditRoot(t)
			a := testenv.StartAgent(t, drv, root, sandboxagent.WithEgress(sandboxagent.EgressModel, "registry.npmjs.org"),
				sandboxagent.WithNetwork(network),
				sandboxagent.WithSandbox(func(o *sandboxagent.SandboxOptions) { o.Env = map[string]string{"CONNECT": connectVia} }))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			var live []sandboxagent.Event
			res, err := a.Stream(ctx, "try", func(e sandboxagent.Event) {
				if e.Kind == sandboxagent.KindEgressDenied {
					live = append(live, e)
				}
			})
			if err != nil || res.Reply != "DONE" {
				t.Fatalf("turn: %q %v", res.Reply, err)
			}
			if len(live) != 1 || live[0].Payload.Host != "deb.debian.org:443" || live[0].Turn != 1 {
				t.Fatalf("egress_denied events: %+v", live)
			}
			data, err := os.ReadFile(a.NetworkAuditDir() + "/egress.jsonl")
			if err != nil || !strings.Contains(string(data), `"host":"deb.debian.org"`) || !strings.Contains(string(data), `"allowed":false`) {
				t.Errorf("egress.jsonl: %v %s", err, data)
			}
		})
	}
}

// Under sandbox-agent's seccomp profile (the default) an agent image's
// ordinary tools work: git, python (threads, asyncio, a subprocess), node
// (fs promises, a worker thread, a child process). npm's positive control
// is TestIntegrationEgressAllowHostNPM; the CLIs' are the smoke runs.
func TestIntegrationSeccompOrdinaryWork(t *testing.T) {
	t.Parallel()
	rt := testenv.Runtime(t)
	img, err := catalog.Resolve("pi", "", testenv.Config().ImageName, "")
	if err != nil {
		t.Fatal(err)
	}
	sb := testenv.Sandbox(t, rt, sandboxagent.SandboxOptions{Image: img})
	ctx := ctxT(t)
	if st, err := sb.Inspect(ctx); err != nil || st.Seccomp != seccomp.Digest(seccomp.Profile()) {
		t.Fatalf("seccomp %q %v, want sandbox-agent's profile", st.Seccomp, err)
	}
	for _, tc := range []struct {
		name string
		cmd  string
		want string
	}{
		{"git", `cd /tmp && git init -q r && cd r && echo hi > f && git add f && git -c user.name=a -c user.email=a@b commit -qm m && git log --format=%s`, "m"},
		{"python", `python3 -c '
import asyncio, threading, subprocess
t = threading.Thread(target=lambda: None); t.start(); t.join()
async def main():
    p = await asyncio.create_subprocess_exec("echo", "py", stdout=subprocess.PIPE)
    out, _ = await p.communicate()
    print(out.decode().strip())
asyncio.run(main())'`, "py"},
		{"node", `node -e '
const { Worker } = require("worker_threads");
const fs = require("fs/promises");
const cp = require("child_process");
(async () => {
  await fs.writeFile("/tmp/n", "node");
  const w = new Worker("require(\"worker_threads\").parentPort.postMessage(1)", { eval: true });
  await new Promise(r => w.on("message", r));
  console.log(cp.execFileSync("cat", ["/tmp/n"]).toString());
})()'`, "node"},
	} {
		res, err := sb.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"sh", "-c", tc.cmd}, Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != tc.want {
			t.Errorf("%s: exit %d %v: %q %s", tc.name, res.ExitCode, err, res.Stdout, res.Stderr)
		}
	}
}
