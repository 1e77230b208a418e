//go:build integration && kubernetes

package kubernetes_test

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/internal/kubetest"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/runtime/kubernetes"
	"github.com/sandbox-agent/sandbox-agent/runtime/runtimetest"
)

// The runtime contract (runtime/runtimetest) on the cluster KUBECONFIG
// names (.ci/k8s.sh start), with the test image imported into the node.
func TestIntegrationContract(t *testing.T) {
	rt := kubetest.Runtime(t)
	runtimetest.Run(t, runtimetest.Backend{
		Runtime: rt,
		Image:   testenv.Image(),
		Config:  testenv.Config(),
		Foreign: func(t *testing.T) func() bool { return foreign(t, rt) },
		// The test cluster enforces NetworkPolicy (.ci/k8s.sh: kube-router);
		// with `k8s.sh netpol off` it does not, and the runtime must
		// detect that and refuse egress none.
		Isolation: isolation(t),
		Unreachable: func(t *testing.T) sandboxagent.Runtime {
			dead, err := kubernetes.New(context.Background(), kubernetes.Options{REST: &rest.Config{Host: "https://127.0.0.1:1"}, Namespace: rt.Namespace()})
			if err != nil {
				t.Fatal(err)
			}
			return dead
		},
	})
}

// isolation is what the suite expects of the cluster's network plugin.
func isolation(t *testing.T) runtimetest.Isolation {
	if kubetest.PolicyEnforced(t) {
		return runtimetest.IsolationPolicy
	}
	return runtimetest.IsolationUnenforced
}

// foreign makes a pod straight through client-go that looks like a
// sandbox of this host whose owner died, except that LabelManaged is not
// "true".
func foreign(t *testing.T, rt *kubernetes.Runtime) func() bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	host, _ := os.Hostname()
	pods := rt.Clientset().CoreV1().Pods(rt.Namespace())
	pod, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "not-ours-", Labels: map[string]string{
			sandboxagent.LabelManaged: "false", sandboxagent.LabelHost: host, sandboxagent.LabelPID: "999999999",
		}},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "c", Image: testenv.Image(), Command: []string{"sleep", "600"}, ImagePullPolicy: corev1.PullIfNotPresent}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	for {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodRunning {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("foreign pod did not run: %+v", p.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return func() bool {
		p, err := pods.Get(context.Background(), pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false
		}
		return err == nil && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning
	}
}
