package runtimetest

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// policyPort is where the sandboxes of policyEnforced listen.
const policyPort = "7777"

// connectScript prints open, refused or blocked (nothing came back in
// 1.5 s) for a TCP connection to $1:$2, as the Kubernetes runtime's own
// probe does.
const connectScript = `my ($h, $p) = @ARGV;
my $s = IO::Socket::INET->new(PeerAddr => $h, PeerPort => $p, Proto => 'tcp', Timeout => 1.5);
if ($s) { print "open\n"; exit 0 }
print(($! =~ /refused/i) ? "refused\n" : "blocked\n");`

// listenScript accepts connections on $1, answering each, until the
// exec is cancelled.
const listenScript = `my $s = IO::Socket::INET->new(LocalPort => $ARGV[0], Listen => 16, ReuseAddr => 1) or die "listen: $!";
while (my $c = $s->accept) { print $c "hi\n"; close $c }`

// policyEnforced: with a sandbox listening in each, an isolated sandbox
// (egress none) reaches no open one and no open one reaches it, while
// two open sandboxes reach each other (the control: the network between
// pods works, so "blocked" is the policy's doing). A refusal from a port
// known to listen is a filter too (some plugins reject), so only "open"
// fails the isolation.
func (s *suite) policyEnforced(t *testing.T) {
	ctx := ctxT(t, 4*time.Minute)
	open := s.start(t, sandboxagent.SandboxOptions{Egress: sandboxagent.EgressOpen})
	peer := s.start(t, sandboxagent.SandboxOptions{Egress: sandboxagent.EgressOpen})
	iso := s.start(t, sandboxagent.SandboxOptions{Egress: sandboxagent.EgressNone})

	connect := func(from *sandboxagent.Sandbox, host string) string {
		t.Helper()
		return strings.TrimSpace(sh(t, ctx, from, `exec perl -MIO::Socket::INET -e "$1" "$2" "$3"`, connectScript, host, policyPort))
	}
	// listen starts the listener; it is up once the sandbox reaches it itself.
	listen := func(sb *sandboxagent.Sandbox) string {
		t.Helper()
		lctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		go func() {
			_, _ = sb.Run(lctx, sandboxagent.ExecRequest{Cmd: []string{"perl", "-MIO::Socket::INET", "-e", listenScript, policyPort}})
		}()
		deadline := time.Now().Add(30 * time.Second)
		for connect(sb, "127.0.0.1") != "open" {
			if time.Now().After(deadline) {
				t.Fatal("the listener in the sandbox did not come up")
			}
			time.Sleep(200 * time.Millisecond)
		}
		return podIP(t, ctx, sb)
	}

	openIP := listen(open)
	isoIP := listen(iso)
	// The control, retried: a new pod's rules may take a moment (a
	// default-deny plugin refuses everything until they exist).
	control := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for v := connect(peer, openIP); v != "open"; v = connect(peer, openIP) {
			if time.Now().After(deadline) {
				t.Fatalf("control: an open sandbox cannot reach another (%s): the pod network does not work, so the isolation checks would prove nothing", v)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	control()
	if v := connect(iso, openIP); v == "open" {
		t.Errorf("the isolated sandbox reached an open one at %s:%s (egress not enforced)", openIP, policyPort)
	} else {
		t.Logf("isolated -> open sandbox: %s", v)
	}
	if v := connect(peer, isoIP); v == "open" {
		t.Errorf("an open sandbox reached the isolated one at %s:%s (ingress not enforced)", isoIP, policyPort)
	} else {
		t.Logf("open sandbox -> isolated: %s", v)
	}
	// Both listeners were up throughout: "refused" above was a filter.
	control()
	if v := connect(iso, "127.0.0.1"); v != "open" {
		t.Errorf("the isolated sandbox's listener is gone (%s): the check of its ingress proves nothing", v)
	}
}

// podIP is the sandbox's address on the pod network, from its own
// interfaces (the first global IPv4 address).
func podIP(t *testing.T, ctx context.Context, sb *sandboxagent.Sandbox) string {
	t.Helper()
	out := sh(t, ctx, sb, `awk '/32 host LOCAL/ {print prev} {prev = $2}' /proc/net/fib_trie`)
	for _, f := range strings.Fields(out) {
		if ip := net.ParseIP(f); ip != nil && ip.To4() != nil && !ip.IsLoopback() {
			return f
		}
	}
	t.Fatalf("no pod address in the sandbox's /proc/net/fib_trie: %q", out)
	return ""
}
