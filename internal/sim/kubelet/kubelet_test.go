package kubelet

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	sx509 "github.com/siderolabs/crypto/x509"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rezuscloud/rezuscloud/internal/kubetest"
	"github.com/rezuscloud/rezuscloud/internal/sim/kubeapi"
)

// cluster is a real control plane with the kubelets of three simulated
// nodes whose readiness the test sets.
type cluster struct {
	cs    kubernetes.Interface
	mu    sync.Mutex
	nodes []Node
}

func (c *cluster) setReady(name string, ready bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.nodes {
		if c.nodes[i].Name == name {
			c.nodes[i].Ready = ready
		}
	}
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	// The API server emulates Kubernetes 1.34, as the simulated cloud's
	// does for a tenant of that release.
	k := kubetest.StartWith(t, 251, []string{"--emulated-version=kube=1.34"})
	cp, b := k.ControlPlane, k.Secrets
	ca, err := sx509.NewCertificateAuthorityFromCertificateAndKey(b.Certs.K8s)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := kubeapi.ClientCertificate(ca, "admin", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: cp.URL(), TLSClientConfig: rest.TLSClientConfig{CAData: b.Certs.K8s.Crt, CertData: pair.CrtPEM, KeyData: pair.KeyPEM}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{cs: cs, nodes: []Node{
		{Name: "cp-1", Address: "127.251.0.1", ControlPlane: true, Ready: true, KubeletVersion: "v1.34.1", OSImage: "Talos (v1.12.6)"},
		{Name: "worker-1", Address: "127.251.0.2", Ready: true, KubeletVersion: "v1.34.1", OSImage: "Talos (v1.12.6)"},
		{Name: "worker-2", Address: "127.251.0.3", Ready: true, KubeletVersion: "v1.34.1", OSImage: "Talos (v1.12.6)"},
	}}
	ctx, cancel := context.WithCancel(context.Background())
	watchRegistrations(t, ctx, cs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = Run(ctx, Options{Config: cfg, Interval: 200 * time.Millisecond, Nodes: func() []Node {
			c.mu.Lock()
			defer c.mu.Unlock()
			return append([]Node(nil), c.nodes...)
		}})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

// watchRegistrations fails the test if a Node ever appears without its
// Ready condition: a reader must never see a registered node with no
// status, as it never does with a real kubelet.
func watchRegistrations(t *testing.T, ctx context.Context, cs kubernetes.Interface) {
	t.Helper()
	w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok && ev.Type == "ADDED" && readyOf(n) == corev1.ConditionUnknown {
				t.Errorf("node %s registered without a Ready condition: %+v", n.Name, n.Status)
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
}

// waitFor polls cond every 100 ms for up to 30 s.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s; last: %s", what, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func nodeReady(n *corev1.Node) corev1.ConditionStatus { return readyOf(n) }

// TestKubelets runs the simulated kubelets of a control plane and two
// workers against a real API, scheduler and controller-manager: the Nodes
// register with their versions and Leases, the control plane tainted; a
// Deployment's pods are scheduled onto the workers and run; a node that
// stops being ready shows NotReady with its pods; an eviction that a
// PodDisruptionBudget allows removes the pod after its grace period, and
// one it forbids is refused.
func TestKubelets(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	waitFor(t, "three Ready nodes", func() (bool, string) {
		l, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for i := range l.Items {
			if nodeReady(&l.Items[i]) == corev1.ConditionTrue {
				ready++
			}
		}
		return ready == 3, "ready nodes: " + string(rune('0'+ready))
	})
	cp, err := c.cs.CoreV1().Nodes().Get(ctx, "cp-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tainted := false
	for _, taint := range cp.Spec.Taints {
		tainted = tainted || taint.Key == labelControlPlane && taint.Effect == corev1.TaintEffectNoSchedule
	}
	if cp.Status.NodeInfo.KubeletVersion != "v1.34.1" || cp.Status.NodeInfo.OSImage != "Talos (v1.12.6)" || !tainted {
		t.Errorf("cp-1: kubelet %q, OS %q, taints %v", cp.Status.NodeInfo.KubeletVersion, cp.Status.NodeInfo.OSImage, cp.Spec.Taints)
	}
	if _, err := c.cs.CoordinationV1().Leases("kube-node-lease").Get(ctx, "worker-1", metav1.GetOptions{}); err != nil {
		t.Errorf("worker-1's Lease: %v", err)
	}

	labels := map[string]string{"app": "web"}
	grace := int64(1)
	replicas := int32(4)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: appsv1.DeploymentSpec{
		Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{Name: "web", Image: "nginx:1.29"}}}},
	}}
	if _, err := c.cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := func() []corev1.Pod {
		l, err := c.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	waitFor(t, "4 available replicas", func() (bool, string) {
		d, err := c.cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.AvailableReplicas == 4, d.Status.String()
	})
	for _, p := range pods() {
		if p.Spec.NodeName != "worker-1" && p.Spec.NodeName != "worker-2" || p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s on %q, %s: want Running on a worker", p.Name, p.Spec.NodeName, p.Status.Phase)
		}
	}

	min := intstr.FromInt32(3)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &min, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := c.cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the budget to allow one disruption", func() (bool, string) {
		p, err := c.cs.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.DisruptionsAllowed == 1, p.Status.String()
	})
	victim := pods()[0]
	evict := func(name string) error {
		return c.cs.PolicyV1().Evictions("default").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}})
	}
	if err := evict(victim.Name); err != nil {
		t.Fatalf("the first eviction, which the budget allows: %v", err)
	}
	waitFor(t, "the evicted pod to be removed", func() (bool, string) {
		_, err := c.cs.CoreV1().Pods("default").Get(ctx, victim.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), "still there"
	})
	waitFor(t, "4 available replicas again", func() (bool, string) {
		d, _ := c.cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
		return d.Status.AvailableReplicas == 4, d.Status.String()
	})

	c.setReady("worker-1", false)
	waitFor(t, "worker-1 NotReady and its pods not ready", func() (bool, string) {
		n, err := c.cs.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
		if err != nil || nodeReady(n) != corev1.ConditionFalse {
			return false, "node still ready"
		}
		for _, p := range pods() {
			if p.Spec.NodeName == "worker-1" && p.DeletionTimestamp == nil {
				for _, cond := range p.Status.Conditions {
					if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
						return false, "pod " + p.Name + " still ready"
					}
				}
			}
		}
		return true, ""
	})
	// With worker-1's pods unavailable, the budget allows no eviction.
	waitFor(t, "the budget to allow none", func() (bool, string) {
		p, _ := c.cs.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "web", metav1.GetOptions{})
		return p.Status.DisruptionsAllowed == 0, p.Status.String()
	})
	var onWorker2 string
	for _, p := range pods() {
		if p.Spec.NodeName == "worker-2" && p.DeletionTimestamp == nil {
			onWorker2 = p.Name
		}
	}
	if err := evict(onWorker2); !apierrors.IsTooManyRequests(err) {
		t.Errorf("an eviction the budget forbids: %v, want 429 Too Many Requests", err)
	}
}

// setStatic sets the static pods of node name.
func (c *cluster) setStatic(name string, pods ...StaticPod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.nodes {
		if c.nodes[i].Name == name {
			c.nodes[i].StaticPods = pods
		}
	}
}

// TestStaticPods: a control plane's components show as mirror pods in
// kube-system, owned by its Node, running their config's image and Ready
// with the node; a new image restarts the pod on it.
func TestStaticPods(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	old, next := "registry.k8s.io/kube-apiserver:v1.34.1", "registry.k8s.io/kube-apiserver:v1.35.0"
	c.setStatic("cp-1", StaticPod{Component: "kube-apiserver", Image: old}, StaticPod{Component: "kube-scheduler", Image: "registry.k8s.io/kube-scheduler:v1.34.1"})
	running := func(image string) func() (bool, string) {
		return func() (bool, string) {
			p, err := c.cs.CoreV1().Pods("kube-system").Get(ctx, "kube-apiserver-cp-1", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			ready := false
			for _, cond := range p.Status.Conditions {
				ready = ready || (cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue)
			}
			st := fmt.Sprintf("spec %s, status %+v", p.Spec.Containers[0].Image, p.Status.ContainerStatuses)
			return ready && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Image == image &&
				p.Spec.NodeName == "cp-1" && len(p.OwnerReferences) == 1 && p.OwnerReferences[0].Kind == "Node", st
		}
	}
	waitFor(t, "the API server's mirror pod running "+old, running(old))
	if _, err := c.cs.CoreV1().Pods("kube-system").Get(ctx, "kube-scheduler-cp-1", metav1.GetOptions{}); err != nil {
		t.Errorf("the scheduler's mirror pod: %v", err)
	}
	c.setStatic("cp-1", StaticPod{Component: "kube-apiserver", Image: next}, StaticPod{Component: "kube-scheduler", Image: "registry.k8s.io/kube-scheduler:v1.34.1"})
	waitFor(t, "the API server's mirror pod running "+next, running(next))
}
