package kube

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rezuscloud/rezuscloud/internal/kubetest"
	"github.com/rezuscloud/rezuscloud/internal/sim/kubelet"
	"github.com/rezuscloud/rezuscloud/render/talos"
)

// TestDrain drains the nodes of a real control plane whose simulated
// kubelets run a Deployment of three replicas under a
// PodDisruptionBudget: a drain cordons the node and evicts its pods, one
// that a budget blocks times out naming the pod and the budget (and,
// forced, deletes the pod), a DaemonSet-like bare pod is refused unless
// forced, an uncordon makes the node schedulable again, a Node is
// deleted, and an API that does not answer is an *UnreachableError.
func TestDrain(t *testing.T) {
	k := kubetest.Start(t, 249)
	cp, bundle := k.ControlPlane, k.Bundle
	admin, err := talos.KubernetesAdmin(bundle, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: cp.URL(), TLSClientConfig: rest.TLSClientConfig{CAData: admin.CA, CertData: admin.Crt, KeyData: admin.Key}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = kubelet.Run(ctx, kubelet.Options{Interval: 200 * time.Millisecond, Config: cfg, Nodes: func() []kubelet.Node {
			var ns []kubelet.Node
			for i, name := range []string{"w1", "w2", "w3"} {
				ns = append(ns, kubelet.Node{Name: name, Address: "127.249.1." + string(rune('1'+i)), Ready: true, KubeletVersion: "v1.34.1"})
			}
			return ns
		}})
	}()
	t.Cleanup(func() { cancel(); <-done })

	bg := context.Background()
	deploy(t, cs, "web", 3)
	pdb(t, cs, "web", 2)
	waitKube(t, "3 pods of web available and its budget to allow 1 disruption", func() bool {
		b, err := cs.PolicyV1().PodDisruptionBudgets("default").Get(bg, "web", metav1.GetOptions{})
		return err == nil && b.Status.CurrentHealthy == 3 && b.Status.DisruptionsAllowed == 1
	})
	c := NewClients(Options{})
	target := Target{Tenant: "acme", Endpoint: cp.URL(), Bundle: bundle}

	if problem, err := c.Readyz(bg, target); err != nil || problem != "" {
		t.Errorf("/readyz: %q, %v", problem, err)
	}
	if left, err := c.Unavailable(bg, target, "app=web"); err != nil || len(left) != 0 {
		t.Errorf("web, fully available: %v, %v", left, err)
	}
	node := nodeOfPod(t, cs, "app=web")
	res, err := c.Drain(bg, target, node, Drain{Timeout: 30 * time.Second, IgnoreDaemonSets: true})
	if err != nil || res.TimedOut || res.Refused || len(res.Evicted) == 0 || res.URL != cp.URL() {
		t.Fatalf("drain of %s: %+v, %v", node, res, err)
	}
	if s, err := c.Node(bg, target, node); err != nil || !s.Found || s.Schedulable || !s.Ready {
		t.Errorf("%s after its drain: %+v, %v; want ready and cordoned", node, s, err)
	}
	if on := podsOn(t, cs, node, "app=web"); len(on) != 0 {
		t.Errorf("pods of web left on %s after its drain: %v", node, on)
	}
	waitKube(t, "web to be fully available again", func() bool {
		left, err := c.Unavailable(bg, target, "app in (web)")
		return err == nil && len(left) == 0
	})
	// A Deployment whose pod no node takes is not available.
	deploy(t, cs, "nowhere", 1, "kubernetes.io/hostname", "no-such-node")
	waitKube(t, "nowhere to be seen unavailable", func() bool {
		left, err := c.Unavailable(bg, target, "app in (web, nowhere)")
		return err == nil && len(left) == 1 && strings.HasPrefix(left[0], "Deployment default/nowhere: 0 of 1 available")
	})
	if found, err := c.Cordon(bg, target, node, false); err != nil || !found {
		t.Fatalf("uncordon %s: %v %v", node, found, err)
	}
	if s, _ := c.Node(bg, target, node); !s.Schedulable {
		t.Errorf("%s after the uncordon: %+v", node, s)
	}

	// A budget that never allows a disruption: the drain times out and
	// names the pod and the budget; forced, it deletes the pod.
	deploy(t, cs, "db", 1)
	pdb(t, cs, "db", 2)
	waitKube(t, "the pod of db to run", func() bool { return nodeOfPodOK(cs, "app=db") != "" })
	dbNode := nodeOfPod(t, cs, "app=db")
	res, err = c.Drain(bg, target, dbNode, Drain{Timeout: 3 * time.Second, IgnoreDaemonSets: true})
	if err != nil || !res.TimedOut || len(res.Blocked) != 1 || len(res.Forced) != 0 {
		t.Fatalf("drain blocked by a budget: %+v, %v", res, err)
	}
	if b := res.Blocked[0]; !strings.HasPrefix(b, "pod default/db-") || !strings.Contains(b, "PodDisruptionBudget default/db allows no disruption") {
		t.Errorf("blocked: %q", b)
	}
	if on := podsOn(t, cs, dbNode, "app=db"); len(on) != 1 {
		t.Errorf("the blocked pod of db: %v, want it still on %s", on, dbNode)
	}
	res, err = c.Drain(bg, target, dbNode, Drain{Timeout: 2 * time.Second, IgnoreDaemonSets: true, Force: true})
	if err != nil || !res.TimedOut || len(res.Forced) != 1 || !strings.HasPrefix(res.Forced[0], "default/db-") {
		t.Fatalf("forced drain: %+v, %v", res, err)
	}

	// A pod of no controller is refused, unless forced.
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: "w3", TerminationGracePeriodSeconds: new(int64(1)), Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	if _, err := cs.CoreV1().Pods("default").Create(bg, bare, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err = c.Drain(bg, target, "w3", Drain{Timeout: 5 * time.Second, IgnoreDaemonSets: true})
	if err != nil || !res.Refused || !slices.ContainsFunc(res.Blocked, func(s string) bool { return strings.Contains(s, "default/bare") }) {
		t.Errorf("drain of a node with a bare pod: %+v, %v", res, err)
	}

	if err := c.DeleteNode(bg, target, "w2"); err != nil {
		t.Fatal(err)
	}
	if s, err := c.Node(bg, target, "w2"); err != nil || s.Found {
		t.Errorf("w2 after its deletion: %+v %v", s, err)
	}
	if res, err := c.Drain(bg, target, "gone", Drain{}); err != nil || len(res.Evicted) != 0 {
		t.Errorf("drain of a node that does not exist: %+v %v", res, err)
	}

	nobody := Target{Tenant: "gone", Endpoint: "https://127.249.0.251:6443", ControlPlanes: []netip.Addr{netip.MustParseAddr("127.249.0.252")}, Bundle: bundle}
	var unreachable *UnreachableError
	if _, err := c.Drain(bg, nobody, "w1", Drain{}); !errors.As(err, &unreachable) || !strings.Contains(err.Error(), "127.249.0.252:6443") {
		t.Errorf("drain with nothing answering: %v", err)
	}
}

func deploy(t *testing.T, cs kubernetes.Interface, name string, replicas int32, nodeSelector ...string) {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels}, Spec: appsv1.DeploymentSpec{
		Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64(1)), NodeSelector: map[string]string{},
			Containers: []corev1.Container{{Name: name, Image: "registry.k8s.io/pause:3.10"}},
		}},
	}}
	for i := 0; i+1 < len(nodeSelector); i += 2 {
		d.Spec.Template.Spec.NodeSelector[nodeSelector[i]] = nodeSelector[i+1]
	}
	if _, err := cs.AppsV1().Deployments("default").Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func pdb(t *testing.T, cs kubernetes.Interface, name string, minAvailable int) {
	t.Helper()
	m := intstr.FromInt32(int32(minAvailable))
	b := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: policyv1.PodDisruptionBudgetSpec{
		MinAvailable: &m, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}}}
	if _, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(context.Background(), b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// nodeOfPodOK is the node of the first running pod the selector picks.
func nodeOfPodOK(cs kubernetes.Interface, selector string) string {
	l, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return ""
	}
	for _, p := range l.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p.Spec.NodeName
		}
	}
	return ""
}

func nodeOfPod(t *testing.T, cs kubernetes.Interface, selector string) string {
	t.Helper()
	n := nodeOfPodOK(cs, selector)
	if n == "" {
		t.Fatalf("no running pod of %s", selector)
	}
	return n
}

// podsOn are the pods the selector picks on node.
func podsOn(t *testing.T, cs kubernetes.Interface, node, selector string) []string {
	t.Helper()
	l, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: selector, FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range l.Items {
		out = append(out, p.Name)
	}
	return out
}

// waitKube polls cond every 100 ms for up to 60 s.
func waitKube(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 60 s for %s", what)
		}
	}
}
