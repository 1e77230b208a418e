// Package kubernetes implements sandboxagent.Runtime on a Kubernetes
// cluster with client-go: one Pod per sandbox, commands over the API
// server's exec (WebSocket, SPDY as fallback), files as tar streams over
// exec into the same hostile-archive-safe extraction as every engine.
//
// What the Docker Engine API has and Kubernetes has not is reported by
// Features (no per-exec user, no host bind mounts, no auto-remove, copy as
// the pod's user) or refused with a typed error; the network policy
// "none" is a NetworkPolicy whose enforcement is probed, never assumed.
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// Errors only a cluster has. Each is wrapped in a *PodError naming the
// pod and what the cluster said.
var (
	// ErrUnschedulable: no node can take the pod (resources, selector,
	// taints).
	ErrUnschedulable = errors.New("pod cannot be scheduled")
	// ErrEvicted: the kubelet evicted the pod (node pressure).
	ErrEvicted = errors.New("pod evicted")
)

// PodError is a sandbox's pod failing in a way the cluster reported after
// it accepted the pod. errors.Is matches Err: sandboxagent.ErrImageNotFound,
// ErrUnschedulable, ErrEvicted, sandboxagent.ErrOutOfMemory,
// sandboxagent.ErrContainerNotFound, or sandboxagent.ErrHardening (a
// *sandboxagent.HardeningError: the node cannot load the Localhost
// seccomp profile, Options.SeccompLocalhost).
type PodError struct {
	Pod     string
	Reason  string // the cluster's word: ErrImageNeverPull, Unschedulable, Evicted, OOMKilled…
	Message string
	Err     error
}

func (e *PodError) Error() string {
	msg := fmt.Sprintf("pod %s: %v (%s)", e.Pod, e.Err, e.Reason)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

func (e *PodError) Unwrap() error { return e.Err }

// Options configures the connection and the pods. The zero value uses
// $KUBECONFIG (or ~/.kube/config), else the in-cluster configuration,
// and the kubeconfig's namespace (else "default").
type Options struct {
	// Kubeconfig is a kubeconfig file; "" = $KUBECONFIG, ~/.kube/config,
	// then the in-cluster service account.
	Kubeconfig string
	// Context selects a kubeconfig context ("" = its current one).
	Context string
	// Namespace the pods live in ("" = the kubeconfig's, else "default").
	Namespace string
	// REST, when set, is used as is (Kubeconfig and Context are ignored).
	REST *rest.Config

	// NodeSelector, ServiceAccount and ImagePullSecrets go into every pod.
	// Without ServiceAccount no token is mounted: an agent gets no
	// credentials to the cluster.
	NodeSelector     map[string]string
	ServiceAccount   string
	ImagePullSecrets []string
	// RuntimeClass is the default runtimeClassName (e.g. gVisor's);
	// ContainerSpec.Runtime overrides it.
	RuntimeClass string
	// PullPolicy is every pod's imagePullPolicy ("" = IfNotPresent).
	PullPolicy corev1.PullPolicy
	// CPURequest and MemoryRequest are what the scheduler reserves per
	// sandbox (limits come from the spec); defaults 100m and 128Mi, so a
	// node takes many sandboxes that are mostly idle.
	CPURequest, MemoryRequest string
	// MaxLifetime is the pod's activeDeadlineSeconds, the backstop
	// behind the keepalive watchdog (default 24h); a sandbox with a
	// shorter max lifetime (its label) gets its own.
	MaxLifetime time.Duration
	// ScheduleTimeout is how long a pod may stay unschedulable before
	// Create fails with ErrUnschedulable. 0 (the default): as long as
	// Create's context allows (timeout_start), as a pod waits for room on
	// a busy node; the error then is ErrUnschedulable with the
	// scheduler's message, and the context's.
	ScheduleTimeout time.Duration
	// PodPidsLimit is the kubelet's podPidsLimit where the API server does
	// not let this client read the kubelet's configuration (nodes/proxy);
	// Inspect reports it as the sandbox's pids limit.
	PodPidsLimit int64
	// SeccompLocalhost runs pods under sandbox-agent's own seccomp
	// profile as a Localhost profile, which every node must hold at
	// <kubelet root>/seccomp/sandbox-agent/<sha256 of the file>.json
	// (LocalhostSeccompPath); a node without it fails the pod's start.
	// Off (the default): the node's RuntimeDefault.
	SeccompLocalhost bool
	// ExecGate, when set, admits each exec's start (runtime/execlimit's
	// Queue, shared by the runtimes of one cluster): the slot is held
	// until the command's first output or its end, at most execStartHold,
	// never for a command's whole life.
	ExecGate ExecGate
}

// ExecGate admits the start of an exec: Acquire waits for a slot and
// returns the func giving it back.
type ExecGate interface {
	Acquire(ctx context.Context) (release func(), err error)
}

// Runtime runs sandboxes as pods of one namespace. Safe for concurrent use.
type Runtime struct {
	cs   kubernetes.Interface
	rest *rest.Config
	ns   string
	opts Options

	policyMu sync.Mutex
	policyOK bool // the namespace's isolation policy exists as we made it

	probeMu sync.Mutex
	probed  map[string]error // node name → the network probe's verdict

	pidsMu sync.Mutex
	pids   map[string]int64 // node name → its kubelet's podPidsLimit

	usersMu sync.Mutex
	users   map[string]podUser // pod → who its commands run as
}

var (
	_ sandboxagent.Runtime = (*Runtime)(nil)
	_ interface {
		Features() sandboxagent.RuntimeFeatures
	} = (*Runtime)(nil)
)

// New loads the configuration; it does not contact the cluster (Info
// does, with ErrEngineUnavailable).
func New(ctx context.Context, opts Options) (*Runtime, error) {
	cfg := opts.REST
	ns := opts.Namespace
	if cfg == nil {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		if opts.Kubeconfig != "" {
			rules.ExplicitPath = opts.Kubeconfig
		}
		cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: opts.Context})
		var err error
		cfg, err = cc.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("kubernetes: %w: %w", sandboxagent.ErrEngineUnavailable, err)
		}
		if ns == "" {
			if n, _, err := cc.Namespace(); err == nil {
				ns = n
			}
		}
	}
	if ns == "" {
		ns = "default"
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		// client-go's default (5 requests/s, bursts of 10) queued a
		// 30-sandbox round behind itself; the API server has its own
		// priority and fairness.
		cfg.QPS, cfg.Burst = 100, 200
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w: %w", sandboxagent.ErrEngineUnavailable, err)
	}
	if opts.CPURequest == "" {
		opts.CPURequest = "100m"
	}
	if opts.MemoryRequest == "" {
		opts.MemoryRequest = "128Mi"
	}
	if opts.MaxLifetime <= 0 {
		opts.MaxLifetime = 24 * time.Hour
	}
	if opts.PullPolicy == "" {
		opts.PullPolicy = corev1.PullIfNotPresent
	}
	return &Runtime{cs: cs, rest: cfg, ns: ns, opts: opts, probed: map[string]error{}, pids: map[string]int64{}, users: map[string]podUser{}}, nil
}

// Namespace is where this runtime's pods live.
func (r *Runtime) Namespace() string { return r.ns }

// Clientset is the client-go clientset (for callers that need more).
func (r *Runtime) Clientset() kubernetes.Interface { return r.cs }

// Features: Kubernetes exec has argv and stdio only, pods cannot mount the
// caller's folders, and a pod whose process ended stays until deleted.
// With SeccompLocalhost, a sandbox's seccomp profile is a node's file.
func (r *Runtime) Features() sandboxagent.RuntimeFeatures {
	return sandboxagent.RuntimeFeatures{Seccomp: r.opts.SeccompLocalhost}
}

// Info asks the API server for its version.
func (r *Runtime) Info(ctx context.Context) (sandboxagent.EngineInfo, error) {
	v, err := r.cs.Discovery().ServerVersion()
	if err != nil {
		return sandboxagent.EngineInfo{}, fmt.Errorf("kubernetes: %w: %w", sandboxagent.ErrEngineUnavailable, err)
	}
	return sandboxagent.EngineInfo{Name: "kubernetes", Version: v.GitVersion, APIVersion: "v1"}, nil
}

// classify maps API errors to the library's sentinels.
func classify(op string, err error, notFound error) error {
	if err == nil {
		return nil
	}
	switch {
	case apierrors.IsNotFound(err) && notFound != nil:
		return fmt.Errorf("%s: %w: %w", op, notFound, err)
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return fmt.Errorf("%s: %w: %w", op, sandboxagent.ErrInvalidArgument, err)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", op, err)
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s: %w", op, err)
	case isConnErr(err):
		return fmt.Errorf("%s: %w: %w", op, sandboxagent.ErrEngineUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// isConnErr reports a failure to reach the API server at all.
func isConnErr(err error) bool {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return false
	}
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "connection refused") || strings.Contains(s, "no such host") ||
		strings.Contains(s, "dial tcp") || strings.Contains(s, "i/o timeout") || strings.Contains(s, "connection reset")
}

// Create makes the sandbox's pod and returns once its container runs, so
// that what only shows after scheduling (a missing image, no node that
// fits) is Create's typed error and nothing is left behind.
func (r *Runtime) Create(ctx context.Context, spec sandboxagent.ContainerSpec) (string, error) {
	pod, secret, err := r.podFor(spec)
	if err != nil {
		return "", err
	}
	if pod.Labels[labelNetwork] == networkIsolated {
		if err := r.ensurePolicy(ctx); err != nil {
			return "", err
		}
	}
	if secret != nil {
		if _, err := r.cs.CoreV1().Secrets(r.ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			return "", classify("create the sandbox's files (secret)", err, nil)
		}
	}
	created, err := r.cs.CoreV1().Pods(r.ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		if secret != nil {
			_ = r.cs.CoreV1().Secrets(r.ns).Delete(context.WithoutCancel(ctx), secret.Name, metav1.DeleteOptions{})
		}
		if apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("create pod %s: %w: a pod of that name exists", pod.Name, sandboxagent.ErrInvalidArgument)
		}
		return "", classify("create pod", err, nil)
	}
	fail := func(err error) (string, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = r.Remove(rctx, created.Name)
		return "", err
	}
	if secret != nil {
		// The secret goes with the pod (the garbage collector deletes it).
		if err := r.ownSecret(ctx, secret.Name, created); err != nil {
			return fail(err)
		}
	}
	if err := r.waitRunning(ctx, created.Name); err != nil {
		return fail(err)
	}
	return created.Name, nil
}

// Start verifies what can only be verified on a running pod: that the
// network policy "none" is enforced by the cluster's network plugin. (The
// pod started when Create made it; a main process that already exited is
// not an error, as on every engine.)
func (r *Runtime) Start(ctx context.Context, id string) error {
	pod, err := r.cs.CoreV1().Pods(r.ns).Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		return classify("start pod", err, sandboxagent.ErrContainerNotFound)
	}
	if perr := startFailure(pod); perr != nil {
		return perr
	}
	if cs := mainStatus(pod); pod.Labels[labelNetwork] == networkIsolated && cs != nil && cs.State.Running != nil {
		return r.checkIsolation(ctx, pod)
	}
	return nil
}

// Inspect reports the pod as the API server recorded it.
func (r *Runtime) Inspect(ctx context.Context, id string) (sandboxagent.ContainerState, error) {
	pod, err := r.cs.CoreV1().Pods(r.ns).Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		return sandboxagent.ContainerState{}, classify("inspect pod", err, sandboxagent.ErrContainerNotFound)
	}
	st := stateOf(pod)
	st.PidsLimit = r.podPidsLimit(ctx, pod.Spec.NodeName)
	if st.NetworkMode == networkIsolated {
		if why := r.isolation(ctx, pod.Labels); why != "" {
			st.NetworkMode = why
		}
	}
	return st, nil
}

// Kill ends the sandbox. A pod's main process cannot be signalled from
// outside (and inside, init ignores SIGKILL from its own namespace), so
// Kill deletes the pod, as Remove does.
func (r *Runtime) Kill(ctx context.Context, id string) error {
	return r.Remove(ctx, id)
}

// Remove deletes the pod and returns once the API server no longer has
// it, which, with a grace period (of one second: the keepalive watchdog
// dies at SIGTERM), is once the kubelet reported its containers stopped.
// A grace period of 0 would be a force deletion: the object goes at once
// while the containers may still run. A missing pod is not an error.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	r.usersMu.Lock()
	delete(r.users, id)
	r.usersMu.Unlock()
	grace := int64(podGrace)
	bg := metav1.DeletePropagationBackground
	err := r.cs.CoreV1().Pods(r.ns).Delete(ctx, id, metav1.DeleteOptions{GracePeriodSeconds: &grace, PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) {
		return classify("remove pod", err, nil)
	}
	for delay := 10 * time.Millisecond; ; delay = min(delay*2, 250*time.Millisecond) {
		_, err := r.cs.CoreV1().Pods(r.ns).Get(ctx, id, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return classify("remove pod", err, nil)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("remove pod %s: %w", id, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// List returns the namespace's pods carrying all the labels.
func (r *Runtime) List(ctx context.Context, want map[string]string) ([]sandboxagent.ContainerState, error) {
	sel := labels.NewSelector()
	for k, v := range want {
		op, vals := selection.Equals, []string{v}
		if v == "" {
			op, vals = selection.Exists, nil
		}
		req, err := labels.NewRequirement(k, op, vals)
		if err != nil {
			return nil, fmt.Errorf("list pods: %w: label %q: %w", sandboxagent.ErrInvalidArgument, k, err)
		}
		sel = sel.Add(*req)
	}
	list, err := r.cs.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, classify("list pods", err, nil)
	}
	out := make([]sandboxagent.ContainerState, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp != nil {
			continue // on its way out
		}
		out = append(out, stateOf(&list.Items[i]))
	}
	return out, nil
}
