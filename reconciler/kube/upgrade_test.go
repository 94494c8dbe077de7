package kube

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rezuscloud/rezuscloud/internal/kubetest"
	"github.com/rezuscloud/rezuscloud/internal/sim/kubelet"
	"github.com/rezuscloud/rezuscloud/render/talos"
)

// TestKubernetesUpgradeChecks, against a real API server that emulates
// Kubernetes 1.34 with networking.k8s.io/v1beta1 served: once a client
// requested IPAddresses at v1beta1, which 1.37 removes, DeprecatedAPIs
// names it for an upgrade to 1.37 but not to 1.36; after the API server
// restarted and no client asked again, it names nothing. Component reads
// a static pod's image and readiness and the kubelet's version.
func TestKubernetesUpgradeChecks(t *testing.T) {
	args := []string{"--emulated-version=kube=1.34", "--runtime-config=networking.k8s.io/v1beta1=true"}
	k := kubetest.StartWith(t, 249, args)
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
	bg := context.Background()
	c := NewClients(Options{})
	target := Target{Tenant: "acme", Endpoint: cp.URL(), Bundle: bundle}

	if got, err := c.DeprecatedAPIs(bg, target, "1.37.1"); err != nil || len(got) != 0 {
		t.Fatalf("before any request: %v, %v", got, err)
	}
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/apis/networking.k8s.io/v1beta1/ipaddresses").DoRaw(bg); err != nil {
		t.Fatal(err)
	}
	want := []string{"ipaddresses.v1beta1.networking.k8s.io (removed in 1.37)"}
	if got, err := c.DeprecatedAPIs(bg, target, "1.37.1"); err != nil || !slices.Equal(got, want) {
		t.Errorf("to 1.37.1: %q, %v; want %q", got, err, want)
	}
	if got, err := c.DeprecatedAPIs(bg, target, "1.36.0"); err != nil || len(got) != 0 {
		t.Errorf("to 1.36.0: %q, %v; want none", got, err)
	}
	if _, err := c.DeprecatedAPIs(bg, target, "latest"); err == nil {
		t.Error("an unreadable target version was taken")
	}
	if err := cp.RestartAPIServer(bg, args); err != nil {
		t.Fatal(err)
	}
	if got, err := c.DeprecatedAPIs(bg, target, "1.37.1"); err != nil || len(got) != 0 {
		t.Errorf("after a restart with no request: %q, %v; want none", got, err)
	}

	var mu sync.Mutex
	node := kubelet.Node{Name: "cp-1", Address: "127.249.2.1", ControlPlane: true, Ready: true, KubeletVersion: "v1.34.1",
		StaticPods: []kubelet.StaticPod{{Component: "kube-apiserver", Image: "registry.k8s.io/kube-apiserver:v1.34.1"}}}
	ctx, cancel := context.WithCancel(bg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = kubelet.Run(ctx, kubelet.Options{Interval: 200 * time.Millisecond, Config: cfg, Nodes: func() []kubelet.Node {
			mu.Lock()
			defer mu.Unlock()
			return []kubelet.Node{node}
		}})
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitKube(t, "the API server's static pod at 1.34.1", func() bool {
		p, err := c.Component(bg, target, "cp-1", "kube-apiserver", "1.34.1")
		return err == nil && p == ""
	})
	if p, err := c.Component(bg, target, "cp-1", "kube-apiserver", "1.35.0"); err != nil || !strings.Contains(p, "not v1.35.0 yet") {
		t.Errorf("the API server at 1.35.0 before it moved: %q, %v", p, err)
	}
	if p, err := c.Component(bg, target, "cp-1", Kubelet, "1.35.0"); err != nil || !strings.Contains(p, "kubelet v1.34.1, not v1.35.0 yet") {
		t.Errorf("the kubelet at 1.35.0 before it moved: %q, %v", p, err)
	}
	mu.Lock()
	node.KubeletVersion, node.StaticPods[0].Image = "v1.35.0", "registry.k8s.io/kube-apiserver:v1.35.0"
	mu.Unlock()
	for _, comp := range []string{"kube-apiserver", Kubelet} {
		waitKube(t, comp+" at 1.35.0", func() bool {
			p, err := c.Component(bg, target, "cp-1", comp, "1.35.0")
			return err == nil && p == ""
		})
	}
	if p, err := c.Component(bg, target, "cp-1", "kube-scheduler", "1.35.0"); err != nil || !strings.Contains(p, "no pod kube-system/kube-scheduler-cp-1") {
		t.Errorf("a component the node does not run: %q, %v", p, err)
	}
}
