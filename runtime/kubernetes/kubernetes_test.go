package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/seccomp"
)

func fakeRuntime(t *testing.T) (*Runtime, *fake.Clientset) {
	t.Helper()
	cs := fake.NewClientset()
	r := &Runtime{cs: cs, ns: "sb", probed: map[string]error{}, pids: map[string]int64{}, users: map[string]podUser{},
		opts: Options{CPURequest: "100m", MemoryRequest: "128Mi", MaxLifetime: time.Hour, PullPolicy: corev1.PullNever}}
	return r, cs
}

// hardenedSpec is what the Sandbox asks for by default.
func hardenedSpec() sandboxagent.ContainerSpec {
	return sandboxagent.ContainerSpec{
		Name: "sandbox-agent-0123456789abcdef", Image: "img:1", Cmd: []string{"/bin/sh", "-c", "x"},
		Env: []string{"A=1", "B=x=y"}, Labels: map[string]string{sandboxagent.LabelManaged: "true"},
		CapDrop: []string{"ALL"}, CapAdd: sandboxagent.DefaultCaps, NoNewPrivileges: true, Init: true,
		PidsLimit: 1024, MemoryBytes: 4 << 30, MemorySwap: 4 << 30, NanoCPUs: 2e9, NetworkMode: "none",
		Files: []sandboxagent.File{{Path: "/sandbox-agent/ca.pem", Data: []byte("PEM"), Mode: 0o644}},
	}
}

// The pod carries every hardening setting, and what the API server
// records reads back as the spec asked (so the Sandbox's check passes
// on a faithful cluster and fails on one that drops a field).
func TestPodForRoundTrip(t *testing.T) {
	r, _ := fakeRuntime(t)
	spec := hardenedSpec()
	pod, secret, err := r.podFor(spec)
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	sc := c.SecurityContext
	switch {
	case *sc.AllowPrivilegeEscalation, *sc.Privileged:
		t.Error("escalation or privileged allowed")
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("no RuntimeDefault seccomp profile")
	case *pod.Spec.AutomountServiceAccountToken:
		t.Error("a service account token is mounted into the sandbox")
	case *pod.Spec.EnableServiceLinks:
		t.Error("service links leak the namespace's services into the environment")
	case pod.Spec.RestartPolicy != corev1.RestartPolicyNever || pod.Spec.ActiveDeadlineSeconds == nil || *pod.Spec.ActiveDeadlineSeconds != 3600:
		t.Errorf("restart %s deadline %v", pod.Spec.RestartPolicy, pod.Spec.ActiveDeadlineSeconds)
	case pod.Labels[labelNetwork] != networkIsolated:
		t.Error("network none does not select the isolation policy")
	case c.ImagePullPolicy != corev1.PullNever:
		t.Errorf("pull policy %s", c.ImagePullPolicy)
	}
	if got := c.Env[1]; got.Name != "B" || got.Value != "x=y" {
		t.Errorf("env %v", c.Env)
	}
	// The kubelet expands $(VAR) and reads "$$" as "$" in commands and
	// environment values: everything arrives escaped.
	spec2 := hardenedSpec()
	spec2.Cmd = []string{"sh", "-c", `echo $$ $(HOME) $x`}
	spec2.Env = []string{"V=$(PATH)$$"}
	p2, _, err := r.podFor(spec2)
	if err != nil {
		t.Fatal(err)
	}
	if got := p2.Spec.Containers[0].Command[2]; got != `echo $$$$ $$(HOME) $$x` {
		t.Errorf("command %q", got)
	}
	if got := p2.Spec.Containers[0].Env[0].Value; got != `$$(PATH)$$$$` {
		t.Errorf("env value %q", got)
	}
	if q := c.Resources.Requests[corev1.ResourceCPU]; q.String() != "100m" {
		t.Errorf("cpu request %s", q.String())
	}
	if secret == nil || string(secret.Data["f0"]) != "PEM" || c.VolumeMounts[0].MountPath != "/sandbox-agent/ca.pem" || c.VolumeMounts[0].SubPath != "f0" {
		t.Errorf("files: secret %v mounts %v", secret, c.VolumeMounts)
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	st := stateOf(pod)
	if !st.Running || st.Status != sandboxagent.StatusRunning || !st.NoNewPrivileges || !st.Init || st.Privileged ||
		st.MemoryBytes != spec.MemoryBytes || st.MemorySwap != spec.MemorySwap || st.NanoCPUs != spec.NanoCPUs ||
		st.NetworkMode != "none" || strings.Join(st.CapAdd, ",") != strings.Join(spec.CapAdd, ",") || st.CapDrop[0] != "ALL" {
		t.Errorf("state %+v", st)
	}
}

// A sandbox's max lifetime shorter than the runtime's is the pod's
// deadline; a longer one, none (0) or a broken label leaves the runtime's.
func TestPodForDeadline(t *testing.T) {
	r, _ := fakeRuntime(t) // MaxLifetime 1 h
	for label, want := range map[string]int64{"": 3600, "0": 3600, "6": 6, "86400": 3600, "x": 3600} {
		spec := hardenedSpec()
		if label != "" {
			spec.Labels[sandboxagent.LabelMaxLifetime] = label
		}
		pod, _, err := r.podFor(spec)
		if err != nil {
			t.Fatal(err)
		}
		if d := pod.Spec.ActiveDeadlineSeconds; d == nil || *d != want {
			t.Errorf("label %q: deadline %v, want %d", label, d, want)
		}
	}
}

// What a pod cannot do is refused by name, never dropped.
func TestPodForRefuses(t *testing.T) {
	r, _ := fakeRuntime(t)
	for name, tc := range map[string]struct {
		edit func(*sandboxagent.ContainerSpec)
		want error
	}{
		"bind mount":   {func(s *sandboxagent.ContainerSpec) { s.Mounts = []sandboxagent.Mount{{Source: "/x", Target: "/y"}} }, sandboxagent.ErrUnsupportedByRuntime},
		"swap":         {func(s *sandboxagent.ContainerSpec) { s.MemorySwap = 2 * s.MemoryBytes }, sandboxagent.ErrUnsupportedByRuntime},
		"user name":    {func(s *sandboxagent.ContainerSpec) { s.User = "node" }, sandboxagent.ErrUnsupportedByRuntime},
		"host-gateway": {func(s *sandboxagent.ContainerSpec) { s.ExtraHosts = []string{"h:host-gateway"} }, sandboxagent.ErrUnsupportedByRuntime},
		"net name":     {func(s *sandboxagent.ContainerSpec) { s.NetworkMode = "mynet" }, sandboxagent.ErrUnsupportedByRuntime},
		"tmpfs noexec": {func(s *sandboxagent.ContainerSpec) { s.Tmpfs = map[string]string{"/t": "noexec"} }, sandboxagent.ErrUnsupportedByRuntime},
		"bad name":     {func(s *sandboxagent.ContainerSpec) { s.Name = "Sandbox_1" }, sandboxagent.ErrInvalidArgument},
		"rel file":     {func(s *sandboxagent.ContainerSpec) { s.Files[0].Path = "ca.pem" }, sandboxagent.ErrInvalidArgument},
	} {
		spec := hardenedSpec()
		tc.edit(&spec)
		if _, _, err := r.podFor(spec); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	spec := hardenedSpec()
	spec.User, spec.Tmpfs = "1000:1000", map[string]string{"/scratch": "rw,size=64m"}
	pod, _, err := r.podFor(spec)
	if err != nil {
		t.Fatal(err)
	}
	if sc := pod.Spec.Containers[0].SecurityContext; *sc.RunAsUser != 1000 || *sc.RunAsGroup != 1000 {
		t.Errorf("user %v:%v", *sc.RunAsUser, *sc.RunAsGroup)
	}
	if v := pod.Spec.Volumes[0].EmptyDir; v == nil || v.Medium != corev1.StorageMediumMemory || v.SizeLimit.String() != "64Mi" {
		t.Errorf("tmpfs volume %+v", pod.Spec.Volumes[0])
	}
}

// runAfterCreate plays the kubelet: once the pod exists it gets status.
func runAfterCreate(t *testing.T, cs *fake.Clientset, name string, status corev1.PodStatus) {
	t.Helper()
	go func() {
		for range 200 {
			pod, err := cs.CoreV1().Pods("sb").Get(context.Background(), name, metav1.GetOptions{})
			if err == nil {
				pod.Status = status
				_, _ = cs.CoreV1().Pods("sb").UpdateStatus(context.Background(), pod, metav1.UpdateOptions{})
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

// Create returns once the container runs, with the files' secret owned
// by the pod and the namespace's isolation policy in place.
func TestCreateWaitsForRunning(t *testing.T) {
	r, cs := fakeRuntime(t)
	spec := hardenedSpec()
	runAfterCreate(t, cs, spec.Name, corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
		{Name: containerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cs.CoreV1().Secrets("sb").Get(ctx, spec.Name+"-files", metav1.GetOptions{})
	if err != nil || len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Name != id {
		t.Fatalf("secret %v %v", s, err)
	}
	p, err := cs.NetworkingV1().NetworkPolicies("sb").Get(ctx, policyName, metav1.GetOptions{})
	if err != nil || !intact(p) {
		t.Fatalf("policy %v %v", p, err)
	}
	if st, err := r.Inspect(ctx, id); err != nil || st.NetworkMode != "none" || !st.Running {
		t.Fatalf("inspect %+v %v", st, err)
	}
	// A policy someone loosened is no isolation any more.
	p.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{}}
	if _, err := cs.NetworkingV1().NetworkPolicies("sb").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.Inspect(ctx, id); st.NetworkMode == "none" {
		t.Fatal("a loosened policy still reads as network none")
	}
	p.Spec.Egress = nil
	if _, err := cs.NetworkingV1().NetworkPolicies("sb").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.Inspect(ctx, id); st.NetworkMode != "none" {
		t.Fatalf("restored policy reads %q", st.NetworkMode)
	}
	// Policies add up: another one selecting every pod and allowing DNS
	// egress opens the sandbox too.
	other := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow-dns"}, Spec: networkingv1.NetworkPolicySpec{
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, Egress: []networkingv1.NetworkPolicyEgressRule{{}}}}
	if _, err := cs.NetworkingV1().NetworkPolicies("sb").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.Inspect(ctx, id); !strings.Contains(st.NetworkMode, "allow-dns") {
		t.Fatalf("another policy opening the sandbox reads %q", st.NetworkMode)
	}
	if err := r.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Inspect(ctx, id); !errors.Is(err, sandboxagent.ErrContainerNotFound) {
		t.Fatalf("inspect after remove: %v", err)
	}
	if err := r.Remove(ctx, id); err != nil {
		t.Fatalf("second remove: %v", err)
	}
}

// What shows only after scheduling is Create's typed error, and the pod
// is deleted.
func TestCreateFailsTyped(t *testing.T) {
	waiting := func(reason string) corev1.PodStatus {
		return corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{
			{Name: containerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "m"}}}}}
	}
	for name, tc := range map[string]struct {
		status corev1.PodStatus
		want   error
	}{
		"never pull": {waiting("ErrImageNeverPull"), sandboxagent.ErrImageNotFound},
		"backoff":    {waiting("ImagePullBackOff"), sandboxagent.ErrImageNotFound},
		"seccomp profile missing": {corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{
			{Name: containerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerError",
				Message: `failed to create containerd container: cannot load seccomp profile "/var/lib/kubelet/seccomp/sandbox-agent/x.json": no such file or directory`}}}}}, sandboxagent.ErrHardening},
		"unschedulable": {corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes"}}}, ErrUnschedulable},
		"evicted": {corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}, ErrEvicted},
		"oom": {corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{
			{Name: containerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}}, sandboxagent.ErrOutOfMemory},
	} {
		t.Run(name, func(t *testing.T) {
			r, cs := fakeRuntime(t)
			r.opts.ScheduleTimeout = time.Millisecond
			spec := hardenedSpec()
			runAfterCreate(t, cs, spec.Name, tc.status)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := r.Create(ctx, spec)
			var pe *PodError
			if !errors.Is(err, tc.want) || !errors.As(err, &pe) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if _, err := cs.CoreV1().Pods("sb").Get(ctx, spec.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("pod left behind: %v", err)
			}
		})
	}
}

func TestListSkipsPodsBeingDeleted(t *testing.T) {
	r, cs := fakeRuntime(t)
	now := metav1.Now()
	for _, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "sb", Labels: map[string]string{sandboxagent.LabelManaged: "true"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "sb", Labels: map[string]string{sandboxagent.LabelManaged: "true"}, DeletionTimestamp: &now, Finalizers: []string{"x"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: "sb"}},
	} {
		if _, err := cs.CoreV1().Pods("sb").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := r.List(context.Background(), map[string]string{sandboxagent.LabelManaged: "true"})
	if err != nil || len(got) != 1 || got[0].Name != "a" {
		t.Fatalf("list %+v %v", got, err)
	}
}

// With SeccompLocalhost a sandbox's profile is the node's file named by
// the profile's hash, and Inspect reads it back as the profile's digest;
// without it (or without a profile: EngineSeccomp) the node's
// RuntimeDefault, read back as none. Another version's file reads back
// as a path that matches no digest.
func TestPodForSeccompLocalhost(t *testing.T) {
	ours := seccomp.Profile()
	for _, tc := range []struct {
		name      string
		localhost bool
		profile   []byte
		wantType  corev1.SeccompProfileType
		wantState string
	}{
		{"localhost", true, ours, corev1.SeccompProfileTypeLocalhost, seccomp.Digest(ours)},
		{"localhost, engine default asked", true, nil, corev1.SeccompProfileTypeRuntimeDefault, ""},
		{"off", false, ours, corev1.SeccompProfileTypeRuntimeDefault, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := fakeRuntime(t)
			r.opts.SeccompLocalhost = tc.localhost
			if got := r.Features().Seccomp; got != tc.localhost {
				t.Errorf("Features().Seccomp = %v", got)
			}
			spec := hardenedSpec()
			spec.Seccomp = tc.profile
			// The root labels the sandbox with the digest, a value no
			// Kubernetes label can hold: it travels as an annotation.
			spec.Labels["sandbox-agent.seccomp"] = seccomp.Digest(ours)
			pod, _, err := r.podFor(spec)
			if err != nil {
				t.Fatal(err)
			}
			p := pod.Spec.Containers[0].SecurityContext.SeccompProfile
			if p == nil || p.Type != tc.wantType {
				t.Fatalf("seccomp profile %+v, want type %s", p, tc.wantType)
			}
			if tc.wantType == corev1.SeccompProfileTypeLocalhost {
				// The file holds the compacted profile: its SHA-256 is the name.
				file, err := LocalhostSeccompFile(ours)
				if err != nil {
					t.Fatal(err)
				}
				sum := sha256.Sum256(file)
				if want := "sandbox-agent/" + hex.EncodeToString(sum[:]) + ".json"; p.LocalhostProfile == nil || *p.LocalhostProfile != want {
					t.Errorf("localhost profile %v, want %s", p.LocalhostProfile, want)
				}
			}
			if got := stateOf(pod).Seccomp; got != tc.wantState {
				t.Errorf("Inspect: seccomp %q, want %q", got, tc.wantState)
			}
			if _, ok := pod.Labels["sandbox-agent.seccomp"]; ok || pod.Annotations["sandbox-agent.seccomp"] != seccomp.Digest(ours) {
				t.Errorf("labels %v, annotations %v: want the digest as an annotation", pod.Labels, pod.Annotations)
			}
			if st := stateOf(pod); st.Labels["sandbox-agent.seccomp"] != seccomp.Digest(ours) || st.Labels[sandboxagent.LabelManaged] != "true" {
				t.Errorf("Inspect: labels %v, want the digest and the pod's labels", st.Labels)
			}
		})
	}
	// Another version's file reads back as its digest (adoption compares
	// it with the sandbox's label); any other Localhost file as its path.
	for path, want := range map[string]string{
		"sandbox-agent/" + strings.Repeat("0a", 32) + ".json": "sha256:" + strings.Repeat("0a", 32),
		"sandbox-agent/" + strings.Repeat("0A", 32) + ".json": "localhost/sandbox-agent/" + strings.Repeat("0A", 32) + ".json",
		"other/profile.json":      "localhost/other/profile.json",
		"sandbox-agent/../x.json": "localhost/sandbox-agent/../x.json",
	} {
		if got := seccompOf(&corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &path}); got != want {
			t.Errorf("Localhost %q reads back as %q, want %q", path, got, want)
		}
	}
}
