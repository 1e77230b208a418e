package kubernetes

import (
	"context"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	units "github.com/docker/go-units"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// containerName is the one container of a sandbox's pod.
const containerName = "sandbox"

// podGrace is the pods' termination grace period in seconds: not 0, which
// makes a deletion a force deletion (see Remove).
const podGrace = 1

// labelNetwork marks pods under the network policy "none"; the
// namespace's isolation policy selects them.
const (
	labelNetwork    = "sandbox-agent.network"
	networkIsolated = "none"
)

// dnsLabel is what a pod name must be (RFC 1123 label).
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// podFor turns the engine-neutral spec into a pod (and a secret holding
// spec.Files, or nil). Whatever the spec asks that a pod cannot do is an
// ErrUnsupportedByRuntime naming the setting.
func (r *Runtime) podFor(spec sandboxagent.ContainerSpec) (*corev1.Pod, *corev1.Secret, error) {
	unsupported := func(setting, why string) (*corev1.Pod, *corev1.Secret, error) {
		return nil, nil, fmt.Errorf("kubernetes: %s: %w: %s", setting, sandboxagent.ErrUnsupportedByRuntime, why)
	}
	if !dnsLabel.MatchString(spec.Name) {
		return nil, nil, fmt.Errorf("kubernetes: %w: sandbox name %q is not a valid pod name (lower-case letters, digits and '-', at most 63)", sandboxagent.ErrInvalidArgument, spec.Name)
	}
	if len(spec.Mounts) > 0 {
		return unsupported("mounts", "a pod cannot mount a folder of the caller's host")
	}
	if spec.MemorySwap != 0 && spec.MemorySwap != spec.MemoryBytes {
		return unsupported("memory_swap", "Kubernetes containers get no swap of their own: memory_swap must equal memory")
	}
	env := make([]corev1.EnvVar, 0, len(spec.Env))
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: literal(v)})
	}
	cmd := make([]string, len(spec.Cmd))
	for i, a := range spec.Cmd {
		cmd[i] = literal(a)
	}
	sc := &corev1.SecurityContext{
		Privileged:               ptr(spec.Privileged),
		AllowPrivilegeEscalation: ptr(!spec.NoNewPrivileges),
		ReadOnlyRootFilesystem:   ptr(spec.ReadonlyRootfs),
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		Capabilities:             &corev1.Capabilities{},
	}
	if r.opts.SeccompLocalhost && len(spec.Seccomp) > 0 {
		sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr(LocalhostSeccompPath(spec.Seccomp))}
	}
	if spec.Privileged {
		sc.AllowPrivilegeEscalation = nil // the API refuses privileged without escalation
		sc.SeccompProfile = nil
	}
	for _, c := range spec.CapDrop {
		sc.Capabilities.Drop = append(sc.Capabilities.Drop, corev1.Capability(strings.TrimPrefix(strings.ToUpper(c), "CAP_")))
	}
	for _, c := range spec.CapAdd {
		sc.Capabilities.Add = append(sc.Capabilities.Add, corev1.Capability(strings.TrimPrefix(strings.ToUpper(c), "CAP_")))
	}
	if spec.User != "" {
		uid, gid, err := numericUser(spec.User)
		if err != nil {
			return unsupported("user", err.Error())
		}
		sc.RunAsUser = &uid
		if gid >= 0 {
			sc.RunAsGroup = &gid
		}
	}
	limits := corev1.ResourceList{}
	if spec.DiskBytes > 0 {
		// The kubelet evicts the pod past it (the container's writable
		// layer, its logs and emptyDirs; not the image).
		limits[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(spec.DiskBytes, resource.BinarySI)
	}
	if spec.MemoryBytes > 0 {
		limits[corev1.ResourceMemory] = *resource.NewQuantity(spec.MemoryBytes, resource.BinarySI)
	}
	if spec.NanoCPUs > 0 {
		limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(spec.NanoCPUs/1e6, resource.DecimalSI)
	}
	requests := corev1.ResourceList{}
	for name, q := range map[corev1.ResourceName]string{corev1.ResourceCPU: r.opts.CPURequest, corev1.ResourceMemory: r.opts.MemoryRequest} {
		want, err := resource.ParseQuantity(q)
		if err != nil {
			return nil, nil, fmt.Errorf("kubernetes: %w: %s request %q: %w", sandboxagent.ErrInvalidArgument, name, q, err)
		}
		if l, ok := limits[name]; ok && want.Cmp(l) > 0 {
			want = l // a request may not exceed its limit
		}
		requests[name] = want
	}
	ctr := corev1.Container{
		Name:            containerName,
		Image:           spec.Image,
		Command:         cmd,
		Env:             env,
		WorkingDir:      spec.WorkDir,
		SecurityContext: sc,
		Resources:       corev1.ResourceRequirements{Limits: limits, Requests: requests},
		ImagePullPolicy: r.opts.PullPolicy,
		// The keepalive watchdog is the main process; its output is not
		// the sandbox's (commands run over exec).
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
	}
	podLabels, annotations := map[string]string{}, map[string]string{}
	for k, v := range spec.Labels {
		if isOurs(k) && len(validation.IsValidLabelValue(v)) > 0 {
			annotations[k] = v // a value no label can hold (a digest); stateOf reads it back
			continue
		}
		podLabels[k] = v
	}
	hostNetwork := false
	switch spec.NetworkMode {
	case "none":
		podLabels[labelNetwork] = networkIsolated
	case "", "bridge", "default", "open":
	case "host":
		hostNetwork = true
	default:
		return unsupported("network", fmt.Sprintf("network %q: a pod is on the cluster's pod network (open), isolated by a NetworkPolicy (none) or on the node's (host)", spec.NetworkMode))
	}
	var aliases []corev1.HostAlias
	for _, h := range spec.ExtraHosts {
		name, ip, ok := strings.Cut(h, ":")
		if !ok || name == "" || ip == "" {
			return nil, nil, fmt.Errorf("kubernetes: %w: extra host %q (want NAME:IP)", sandboxagent.ErrInvalidArgument, h)
		}
		if ip == "host-gateway" {
			return unsupported("extra_hosts", "host-gateway is a Docker address; a pod has no such gateway")
		}
		aliases = append(aliases, corev1.HostAlias{IP: ip, Hostnames: []string{name}})
	}
	var volumes []corev1.Volume
	for i, mnt := range slices.Sorted(maps.Keys(spec.Tmpfs)) {
		size, err := tmpfsSize(spec.Tmpfs[mnt])
		if err != nil {
			return unsupported("tmpfs "+mnt, err.Error())
		}
		name := "tmpfs-" + strconv.Itoa(i)
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: size}}})
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: mnt})
	}
	var secret *corev1.Secret
	if len(spec.Files) > 0 {
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: spec.Name + "-files", Labels: map[string]string{sandboxagent.LabelManaged: "true"}},
			Data:       map[string][]byte{},
		}
		for i, f := range spec.Files {
			if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
				return nil, nil, fmt.Errorf("kubernetes: %w: file path %q", sandboxagent.ErrInvalidArgument, f.Path)
			}
			key := "f" + strconv.Itoa(i)
			secret.Data[key] = f.Data
			ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "files", MountPath: f.Path, SubPath: key, ReadOnly: true})
		}
		items := make([]corev1.KeyToPath, len(spec.Files))
		for i, f := range spec.Files {
			items[i] = corev1.KeyToPath{Key: "f" + strconv.Itoa(i), Path: "f" + strconv.Itoa(i), Mode: ptr(int32(f.Mode.Perm()))}
		}
		volumes = append(volumes, corev1.Volume{Name: "files", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret.Name, Items: items}}})
	}
	runtimeClass := r.opts.RuntimeClass
	if spec.Runtime != "" {
		runtimeClass = spec.Runtime
	}
	// The sandbox's own lifetime (its watchdog ends it then) binds the
	// pod too when it is shorter than the runtime's: activeDeadlineSeconds
	// holds even if the watchdog is gone. It counts from the pod's start,
	// a little before the watchdog's.
	deadline := int64(r.opts.MaxLifetime / time.Second)
	if n, err := strconv.ParseInt(spec.Labels[sandboxagent.LabelMaxLifetime], 10, 64); err == nil && n > 0 && n < deadline {
		deadline = n
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Labels: podLabels, Annotations: annotations},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{ctr},
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr(int64(podGrace)),
			ActiveDeadlineSeconds:         &deadline,
			// Init: the pause process is PID 1 and reaps orphans.
			ShareProcessNamespace:        ptr(spec.Init),
			AutomountServiceAccountToken: ptr(r.opts.ServiceAccount != ""),
			ServiceAccountName:           r.opts.ServiceAccount,
			EnableServiceLinks:           ptr(false),
			NodeSelector:                 r.opts.NodeSelector,
			HostNetwork:                  hostNetwork,
			HostAliases:                  aliases,
			Volumes:                      volumes,
		},
	}
	if runtimeClass != "" {
		pod.Spec.RuntimeClassName = &runtimeClass
	}
	for _, s := range r.opts.ImagePullSecrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	return pod, secret, nil
}

// numericUser parses "UID" or "UID:GID": a pod's securityContext takes
// numbers only (the kubelet does not read the image's /etc/passwd).
func numericUser(u string) (uid, gid int64, err error) {
	us, gs, hasGroup := strings.Cut(u, ":")
	uid, err = strconv.ParseInt(us, 10, 64)
	if err != nil || uid < 0 {
		return 0, 0, fmt.Errorf("user %q: a pod runs as a numeric uid (or uid:gid)", u)
	}
	gid = -1
	if hasGroup {
		gid, err = strconv.ParseInt(gs, 10, 64)
		if err != nil || gid < 0 {
			return 0, 0, fmt.Errorf("user %q: a pod runs as a numeric gid", u)
		}
	}
	return uid, gid, nil
}

// tmpfsSize reads a Docker-style tmpfs option string: only size= (and
// the defaults rw, exec, nosuid, nodev) have a pod equivalent.
func tmpfsSize(opts string) (*resource.Quantity, error) {
	var size *resource.Quantity
	for _, o := range strings.Split(opts, ",") {
		o = strings.TrimSpace(o)
		switch {
		case o == "" || o == "rw" || o == "exec" || o == "nosuid" || o == "nodev":
		case strings.HasPrefix(o, "size="):
			n, err := units.RAMInBytes(o[5:]) // Docker's reading: 64m is 64 MiB
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("tmpfs size %q", o[5:])
			}
			size = resource.NewQuantity(n, resource.BinarySI)
		default:
			return nil, fmt.Errorf("tmpfs option %q has no pod equivalent (a memory-backed emptyDir takes only a size)", o)
		}
	}
	return size, nil
}

func ptr[T any](v T) *T { return &v }

// literal escapes s from the kubelet's $(VAR) expansion of a container's
// command and environment, where "$$" stands for "$": without it the
// keepalive script's "$$" (its own pid) arrived as "$", and the watchdog
// counted itself as a running command forever.
func literal(s string) string { return strings.ReplaceAll(s, "$", "$$") }

// ownSecret makes the pod the owner of its files' secret, so the cluster
// deletes the secret with the pod (also when gc or a person deletes it).
func (r *Runtime) ownSecret(ctx context.Context, name string, pod *corev1.Pod) error {
	s, err := r.cs.CoreV1().Secrets(r.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return classify("own the files secret", err, nil)
	}
	s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}
	if _, err := r.cs.CoreV1().Secrets(r.ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		_ = r.cs.CoreV1().Secrets(r.ns).Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
		return classify("own the files secret", err, nil)
	}
	return nil
}

// waitRunning waits until the pod's container runs, or fails with the
// cluster's reason (a *PodError).
func (r *Runtime) waitRunning(ctx context.Context, name string) error {
	var unschedulableSince time.Time
	var unschedulable *PodError
	for delay := 20 * time.Millisecond; ; delay = min(delay*2, 250*time.Millisecond) {
		pod, err := r.cs.CoreV1().Pods(r.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("pod %s: %w: deleted while starting", name, sandboxagent.ErrContainerNotFound)
			}
			if ctx.Err() != nil && unschedulable != nil {
				return fmt.Errorf("%w: %w", unschedulable, ctx.Err())
			}
			return classify("wait for pod", err, sandboxagent.ErrContainerNotFound)
		}
		if perr := startFailure(pod); perr != nil {
			return perr
		}
		unschedulable = nil
		if c := condition(pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			if unschedulableSince.IsZero() {
				unschedulableSince = time.Now()
			}
			unschedulable = &PodError{Pod: name, Reason: c.Reason, Message: c.Message, Err: ErrUnschedulable}
			if r.opts.ScheduleTimeout > 0 && time.Since(unschedulableSince) >= r.opts.ScheduleTimeout {
				return unschedulable
			}
		}
		if cs := mainStatus(pod); cs != nil && (cs.State.Running != nil || cs.State.Terminated != nil) {
			return nil // it runs, or ran (a main process that exited at once, as on every engine)
		}
		select {
		case <-ctx.Done():
			if unschedulable != nil {
				return fmt.Errorf("%w: %w", unschedulable, ctx.Err())
			}
			return fmt.Errorf("wait for pod %s to run: %w", name, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// imageReasons are the container waiting reasons that mean the image
// cannot be had (the kubelet retries some of them forever).
var imageReasons = map[string]bool{
	"ErrImageNeverPull": true, "ImagePullBackOff": true, "ErrImagePull": true,
	"InvalidImageName": true, "ImageInspectError": true,
}

// startFailure is what keeps the pod from ever running (its image, an
// eviction, a config error) as a *PodError, or nil; a main process that
// ran and exited is not one.
func startFailure(pod *corev1.Pod) error {
	if pod.Status.Reason == "Evicted" {
		return &PodError{Pod: pod.Name, Reason: "Evicted", Message: pod.Status.Message, Err: ErrEvicted}
	}
	cs := mainStatus(pod)
	if cs != nil && cs.State.Waiting != nil && imageReasons[cs.State.Waiting.Reason] {
		return &PodError{Pod: pod.Name, Reason: cs.State.Waiting.Reason, Message: cs.State.Waiting.Message, Err: sandboxagent.ErrImageNotFound}
	}
	if cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CreateContainerError" && strings.Contains(cs.State.Waiting.Message, "seccomp") {
		// The node lacks the Localhost profile (SeccompLocalhost): the
		// kubelet would retry for ever.
		return &PodError{Pod: pod.Name, Reason: cs.State.Waiting.Reason, Message: cs.State.Waiting.Message, Err: &sandboxagent.HardeningError{
			Setting: "seccomp", Want: "sandbox-agent's profile as the node's Localhost profile (docs/kubernetes.md)", Got: "the node cannot load it",
		}}
	}
	if cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CreateContainerConfigError" {
		return &PodError{Pod: pod.Name, Reason: cs.State.Waiting.Reason, Message: cs.State.Waiting.Message, Err: sandboxagent.ErrInvalidArgument}
	}
	if cs != nil && cs.State.Terminated != nil && cs.State.Terminated.Reason == "OOMKilled" {
		return &PodError{Pod: pod.Name, Reason: "OOMKilled", Message: cs.State.Terminated.Message, Err: sandboxagent.ErrOutOfMemory}
	}
	if pod.Status.Phase == corev1.PodFailed && (cs == nil || cs.State.Terminated == nil) {
		// Refused by the kubelet (admission, the deadline) before it ran.
		return &PodError{Pod: pod.Name, Reason: pod.Status.Reason, Message: pod.Status.Message, Err: sandboxagent.ErrContainerNotFound}
	}
	return nil
}

// podFailure is the pod's fatal state as a *PodError, or nil: what
// keeps it from running, or a main process that ended.
func podFailure(pod *corev1.Pod) error {
	if err := startFailure(pod); err != nil {
		return err
	}
	if cs := mainStatus(pod); cs != nil && cs.State.Terminated != nil {
		t := cs.State.Terminated
		return &PodError{Pod: pod.Name, Reason: t.Reason, Message: fmt.Sprintf("main process exited %d", t.ExitCode), Err: sandboxagent.ErrContainerNotFound}
	}
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return &PodError{Pod: pod.Name, Reason: pod.Status.Reason, Message: pod.Status.Message, Err: sandboxagent.ErrContainerNotFound}
	}
	return nil
}

func condition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func mainStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == containerName {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func mainContainer(pod *corev1.Pod) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == containerName {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}

// stateOf reports a pod in the library's words, hardening as recorded.
func stateOf(pod *corev1.Pod) sandboxagent.ContainerState {
	st := sandboxagent.ContainerState{
		ID: pod.Name, Name: pod.Name, Labels: maps.Clone(pod.Labels), Created: pod.CreationTimestamp.Time,
		Status: sandboxagent.StatusUnknown,
	}
	// Our labels whose values no label can hold are annotations (podFor).
	for k, v := range pod.Annotations {
		if isOurs(k) {
			if st.Labels == nil {
				st.Labels = map[string]string{}
			}
			st.Labels[k] = v
		}
	}
	switch pod.Status.Phase {
	case corev1.PodPending:
		st.Status = sandboxagent.StatusCreated
	case corev1.PodRunning:
		st.Status = sandboxagent.StatusRunning
	case corev1.PodSucceeded, corev1.PodFailed:
		st.Status = sandboxagent.StatusExited
	}
	if cs := mainStatus(pod); cs != nil {
		switch {
		case cs.State.Running != nil:
			st.Running = pod.DeletionTimestamp == nil
		case cs.State.Terminated != nil:
			st.Status = sandboxagent.StatusExited
			st.ExitCode = int(cs.State.Terminated.ExitCode)
			st.OOMKilled = cs.State.Terminated.Reason == "OOMKilled"
			st.Reason = cs.State.Terminated.Reason
		}
	}
	if pod.Status.Reason != "" { // the pod's own (Evicted, DeadlineExceeded) says more
		st.Reason = pod.Status.Reason
		if pod.Status.Message != "" {
			st.Reason += ": " + pod.Status.Message
		}
	}
	if !st.Running && st.Status == sandboxagent.StatusRunning {
		st.Status = sandboxagent.StatusExited
	}
	c := mainContainer(pod)
	if c == nil {
		return st
	}
	st.Image = c.Image
	st.Init = pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace
	if pod.Spec.RuntimeClassName != nil {
		st.Runtime = *pod.Spec.RuntimeClassName
	}
	if sc := c.SecurityContext; sc != nil {
		st.Privileged = sc.Privileged != nil && *sc.Privileged
		st.NoNewPrivileges = sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
		st.ReadonlyRootfs = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
		st.Seccomp = seccompOf(sc.SeccompProfile)
		if sc.Capabilities != nil {
			for _, cp := range sc.Capabilities.Drop {
				st.CapDrop = append(st.CapDrop, string(cp))
			}
			for _, cp := range sc.Capabilities.Add {
				st.CapAdd = append(st.CapAdd, string(cp))
			}
		}
		if sc.RunAsUser != nil {
			st.User = strconv.FormatInt(*sc.RunAsUser, 10)
			if sc.RunAsGroup != nil {
				st.User += ":" + strconv.FormatInt(*sc.RunAsGroup, 10)
			}
		}
	}
	if q, ok := c.Resources.Limits[corev1.ResourceEphemeralStorage]; ok {
		st.DiskBytes = q.Value()
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		st.MemoryBytes = q.Value()
		st.MemorySwap = st.MemoryBytes // no swap for containers
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		st.NanoCPUs = q.MilliValue() * 1e6
	}
	switch {
	case pod.Spec.HostNetwork:
		st.NetworkMode = "host"
	case pod.Labels[labelNetwork] == networkIsolated:
		st.NetworkMode = networkIsolated
	default:
		st.NetworkMode = "bridge"
	}
	return st
}

// isOurs reports whether a label key is sandbox-agent's own.
func isOurs(key string) bool { return strings.HasPrefix(key, "sandbox-agent.") }
