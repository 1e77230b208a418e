package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/exectar"
)

// policyName is the namespace's NetworkPolicy isolating every pod under
// the network policy "none": no ingress, no egress (the sandbox reaches
// the host's proxies through an exec tunnel, not the network).
const policyName = "sandbox-agent-isolate"

func isolationPolicy() *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: policyName, Labels: map[string]string{sandboxagent.LabelManaged: "true"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{labelNetwork: networkIsolated}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

// intact reports whether p isolates as isolationPolicy does: the same
// selector, both directions, and no rule letting anything through.
func intact(p *networkingv1.NetworkPolicy) bool {
	s := p.Spec
	if len(s.PodSelector.MatchExpressions) != 0 || len(s.PodSelector.MatchLabels) != 1 || s.PodSelector.MatchLabels[labelNetwork] != networkIsolated {
		return false
	}
	if len(s.Ingress) != 0 || len(s.Egress) != 0 {
		return false
	}
	var in, eg bool
	for _, t := range s.PolicyTypes {
		in = in || t == networkingv1.PolicyTypeIngress
		eg = eg || t == networkingv1.PolicyTypeEgress
	}
	return in && eg
}

// ensurePolicy creates the isolation policy once per namespace; one that
// exists but lets traffic through is a *HardeningError.
func (r *Runtime) ensurePolicy(ctx context.Context) error {
	r.policyMu.Lock()
	defer r.policyMu.Unlock()
	if r.policyOK {
		return nil
	}
	api := r.cs.NetworkingV1().NetworkPolicies(r.ns)
	_, err := api.Create(ctx, isolationPolicy(), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return classify("create NetworkPolicy "+policyName, err, nil)
	}
	p, err := api.Get(ctx, policyName, metav1.GetOptions{})
	if err != nil {
		return classify("read NetworkPolicy "+policyName, err, nil)
	}
	if !intact(p) {
		return &sandboxagent.HardeningError{Setting: "network", Want: "NetworkPolicy " + policyName + " denying all ingress and egress", Got: "a policy of that name with other rules"}
	}
	r.policyOK = true
	return nil
}

// isolation re-reads the namespace's policies (someone may have changed
// them since): "" when ours is intact and no other one selecting a pod
// with these labels lets traffic in or out (policies add up), else what
// is wrong.
func (r *Runtime) isolation(ctx context.Context, podLabels map[string]string) string {
	list, err := r.cs.NetworkingV1().NetworkPolicies(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "pod network (the namespace's NetworkPolicies cannot be read: " + err.Error() + ")"
	}
	ours := false
	for i := range list.Items {
		p := &list.Items[i]
		if p.Name == policyName {
			ours = intact(p)
			continue
		}
		if len(p.Spec.Ingress) == 0 && len(p.Spec.Egress) == 0 {
			continue // denies only
		}
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err != nil || sel.Matches(labels.Set(podLabels)) {
			return "pod network (NetworkPolicy " + p.Name + " also selects the sandbox and lets traffic through)"
		}
	}
	if !ours {
		return "pod network (policy " + policyName + " missing or changed)"
	}
	return ""
}

// probeTimeout is how long the probe's connection may take before it
// counts as dropped by the policy.
const probeTimeout = 1500 * time.Millisecond

// checkIsolation proves, once per node, that the network plugin enforces
// the policy: from inside the pod it connects to the node's kubelet port
// (every node listens there, and nothing else answers for it). A
// connection that opens, or is refused, crossed the network: the policy
// is not enforced and the sandbox is not what was asked.
func (r *Runtime) checkIsolation(ctx context.Context, pod *corev1.Pod) error {
	node := pod.Spec.NodeName
	r.probeMu.Lock()
	defer r.probeMu.Unlock()
	if err, ok := r.probed[node]; ok {
		return err
	}
	target := pod.Status.HostIP
	if target == "" || net.ParseIP(target) == nil {
		return fmt.Errorf("kubernetes: %w: pod %s has no host IP to probe the network policy with", sandboxagent.ErrNetwork, pod.Name)
	}
	var out, errb bytes.Buffer
	code, err := r.Exec(ctx, pod.Name, sandboxagent.RuntimeExec{
		Cmd:    []string{"perl", "-MIO::Socket::INET", "-e", probeScript, target, "10250", strconv.FormatFloat(probeTimeout.Seconds(), 'f', 1, 64)},
		Stdout: &exectar.Limited{W: &out, N: 256}, Stderr: &exectar.Limited{W: &errb, N: 4096},
	})
	if err != nil {
		return fmt.Errorf("kubernetes: probe the network policy: %w", err)
	}
	verdict := strings.TrimSpace(out.String())
	var res error
	switch {
	case code == 0 && verdict == "blocked":
		res = nil
	case code == 0 && (verdict == "open" || verdict == "refused"):
		res = &sandboxagent.HardeningError{
			Setting: "network",
			Want:    "none (NetworkPolicy " + policyName + " enforced)",
			Got:     "the pod reached its node at " + target + ":10250 (" + verdict + "): this cluster's network plugin does not enforce NetworkPolicy; use one that does, or egress open",
		}
	default:
		return fmt.Errorf("kubernetes: %w: the network-policy probe exited %d: %s %s (the image needs perl)", sandboxagent.ErrNetwork, code, verdict, strings.TrimSpace(errb.String()))
	}
	r.probed[node] = res
	return res
}

// probeScript prints open (connected), refused (an answer came back) or
// blocked (nothing came back in time).
const probeScript = `my ($h, $p, $t) = @ARGV;
my $s = IO::Socket::INET->new(PeerAddr => $h, PeerPort => $p, Proto => 'tcp', Timeout => $t);
if ($s) { print "open\n"; exit 0 }
print(($! =~ /refused/i) ? "refused\n" : "blocked\n");`
