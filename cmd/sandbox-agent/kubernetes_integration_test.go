//go:build integration && kubernetes

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-agent/sandbox-agent/internal/kubetest"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// kubeEnv points the command line at the cluster kubetest found.
func kubeEnv(t *testing.T) map[string]string {
	rt := kubetest.Runtime(t)
	return map[string]string{
		"SANDBOX_AGENT_RUNTIME": "kubernetes", "KUBECONFIG": os.Getenv("KUBECONFIG"),
		"SANDBOX_AGENT_KUBERNETES_NAMESPACE": rt.Namespace(),
		"SANDBOX_AGENT_IMAGE_NAME":           os.Getenv("SANDBOX_AGENT_IMAGE_NAME"),
		// .ci/k8s.sh puts sandbox-agent's seccomp profile on the node.
		"SANDBOX_AGENT_KUBERNETES_SECCOMP_LOCALHOST": "true",
	}
}

// The agent turn and the smoke steps of the Docker suite, on Kubernetes,
// under the default egress (model): the CLI in a pod that a NetworkPolicy
// cuts off the network reaches the fake model on this host through the
// exec tunnel and the model proxy. pi's smoke also runs under the gVisor
// RuntimeClass. On a cluster whose plugin ignores NetworkPolicy
// (SANDBOX_AGENT_TEST_NETWORKPOLICY=unenforced, `k8s.sh netpol off`) the
// default egress must be refused instead.
func TestIntegrationKubernetesAgent(t *testing.T) {
	env := kubeEnv(t)
	if !kubetest.PolicyEnforced(t) {
		t.Run("egress model refused", func(t *testing.T) {
			script := filepath.Join(t.TempDir(), "s.json")
			if err := os.WriteFile(script, []byte(`{"responses":[{"text":"hi"}]}`), 0o644); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := runCLI(t, env, "ask", "--driver", agentDriver, "--fake-model", script, "hi")
			if code != exitError || !strings.Contains(stderr, "does not enforce NetworkPolicy") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 125 and the NetworkPolicy finding", code, stdout, stderr)
			}
		})
		return
	}
	t.Run("ask", func(t *testing.T) { checkAgentAsk(t, "kubernetes", env) })
	t.Run("repo", func(t *testing.T) { checkCLIRepo(t, env) })
	t.Run("smoke", func(t *testing.T) { checkAgentSmoke(t, "kubernetes", env) })
	t.Run("egress model reaches the model only", func(t *testing.T) { checkModelEgressOnly(t, env) })
	t.Run("smoke gvisor", func(t *testing.T) {
		// The RuntimeClass is gVisor indeed: its kernel answers inside.
		code, stdout, stderr := runCLI(t, env, "exec", "--image", testenv.Image(), "--oci-runtime", "gvisor", "--", "dmesg")
		if code != 0 || !strings.Contains(stdout, "Starting gVisor") {
			t.Fatalf("exec under RuntimeClass gvisor: exit %d, stdout %q, stderr %q; want gVisor's kernel log", code, stdout, stderr)
		}
		checkSmoke(t, "kubernetes+gvisor", env, []string{agentDriver}, "--oci-runtime", "gvisor")
	})
}

// checkModelEgressOnly proves from inside a pod under egress model that
// the network goes nowhere while the model works: the agent's shell tool
// connects over TCP and sends a datagram (DNS's transport) to listeners
// of this test on the node's pod-network address; then it answers DONE
// (through the tunnel to the model proxy). The same probes from a pod
// under egress open reach both listeners: the control that shows the
// listeners and the pod network work, so the silence is the policy's.
func checkModelEgressOnly(t *testing.T, env map[string]string) {
	nodeIP := nodeAddress(t)
	tcpLn, err := net.Listen("tcp", net.JoinHostPort(nodeIP, "0"))
	if err != nil {
		t.Fatalf("listen on the node's pod-network address: %v", err)
	}
	defer tcpLn.Close()
	var tcpConns, udpPackets atomic.Int64
	go func() {
		for {
			c, err := tcpLn.Accept()
			if err != nil {
				return
			}
			tcpConns.Add(1)
			_, _ = c.Write([]byte("hi\n"))
			_ = c.Close()
		}
	}()
	udp, err := net.ListenPacket("udp", net.JoinHostPort(nodeIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			udpPackets.Add(1)
			_, _ = udp.WriteTo(buf[:n], from)
		}
	}()
	tcpPort := tcpLn.Addr().(*net.TCPAddr).Port
	udpPort := udp.LocalAddr().(*net.UDPAddr).Port
	// perl (every image has it: the runtime's own probe needs it); no
	// single quote inside the programs.
	probe := fmt.Sprintf(`perl -MIO::Socket::INET -e 'my $s = IO::Socket::INET->new(PeerAddr => "%[1]s", PeerPort => %[2]d, Proto => "tcp", Timeout => 2); print $s ? "tcp open\n" : ($! =~ /refused/i ? "tcp refused\n" : "tcp blocked\n")'
perl -MIO::Socket::INET -e 'my $s = IO::Socket::INET->new(PeerAddr => "%[1]s", PeerPort => %[3]d, Proto => "udp") or do { print "udp error $!\n"; exit }; $s->send("query"); my $r = ""; my $in = ""; vec($in, fileno($s), 1) = 1; print((select($in, undef, undef, 2) && $s->recv($r, 64) && $r eq "query") ? "udp answered\n" : "udp silent\n")'`, nodeIP, tcpPort, udpPort)

	dir := t.TempDir()
	script := filepath.Join(dir, "script.json")
	s, _ := json.Marshal(map[string]any{"responses": []map[string]string{
		{"tool": "shell", "command": "mkdir -p /tmp/agent && (" + probe + ") > /tmp/agent/net.txt 2>&1"},
		{"text": "DONE"},
	}})
	if err := os.WriteFile(script, s, 0o644); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(dir, "result")
	code, stdout, stderr := runCLI(t, env, "ask", "--driver", agentDriver, "--fake-model", script, "--json", "--timeout", "4m",
		"--download", "/tmp/agent:"+dest, "Probe the network, then answer DONE.")
	agentUnavailable(t, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var result resultLine
	if code != exitOK || json.Unmarshal([]byte(lines[len(lines)-1]), &result) != nil || result.Reply != "DONE" {
		t.Fatalf("the turn under egress model: exit %d, reply %q\nstdout:\n%s\nstderr:\n%s", code, result.Reply, stdout, stderr)
	}
	got, err := os.ReadFile(filepath.Join(dest, "net.txt"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("egress model, from the pod: %q (the model answered DONE through the tunnel)", got)
	for _, want := range []string{"tcp blocked", "udp silent"} {
		if !strings.Contains(string(got), want+"\n") {
			t.Errorf("egress model: want %q in the pod's findings %q", want, got)
		}
	}
	if n, m := tcpConns.Load(), udpPackets.Load(); n != 0 || m != 0 {
		t.Errorf("egress model: the node's listeners got %d connections and %d datagrams, want none", n, m)
	}

	// The control: the same probes from a pod under egress open.
	// Retried for a while: a default-deny plugin refuses a new pod's
	// traffic until its rules exist.
	retried := `for i in $(seq 30); do out=$(` + probe + `); case $out in *"tcp open"*"udp answered"*) break ;; esac; sleep 1; done; echo "$out"`
	code, stdout, stderr = runCLI(t, env, "exec", "--image", testenv.Image(), "--egress", "open", "--", "sh", "-c", retried)
	if code != 0 || !strings.Contains(stdout, "tcp open\n") || !strings.Contains(stdout, "udp answered\n") {
		t.Fatalf("control (egress open): exit %d, stdout %q, stderr %q: want tcp open and udp answered", code, stdout, stderr)
	}
	if tcpConns.Load() == 0 || udpPackets.Load() == 0 {
		t.Errorf("control: the listeners saw %d connections, %d datagrams", tcpConns.Load(), udpPackets.Load())
	}
}

// nodeAddress is the node's InternalIP, its address on the pod network
// (the test cluster has one node).
func nodeAddress(t *testing.T) string {
	t.Helper()
	rt := kubetest.Runtime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nodes, err := rt.Clientset().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("the test cluster's node: %v (%d nodes)", err, len(nodes.Items))
	}
	for _, a := range nodes.Items[0].Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	t.Fatalf("node %s has no InternalIP", nodes.Items[0].Name)
	return ""
}
