package kube

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/rezuscloud/rezuscloud/internal/kubetest"
	"github.com/rezuscloud/rezuscloud/internal/sim/kubelet"
	"github.com/rezuscloud/rezuscloud/render/talos"
)

// TestURLs: the endpoint is dialled first when it names an IP address,
// never when it names a host (which would need a name server); then every
// control plane at 6443.
func TestURLs(t *testing.T) {
	cps := []netip.Addr{netip.MustParseAddr("127.9.0.1"), netip.MustParseAddr("127.9.0.2")}
	for endpoint, want := range map[string][]string{
		"https://127.250.0.1:6443":      {"https://127.250.0.1:6443", "https://127.9.0.1:6443", "https://127.9.0.2:6443"},
		"https://127.9.0.1:6443":        {"https://127.9.0.1:6443", "https://127.9.0.2:6443"},
		"https://acme.example.internal": {"https://127.9.0.1:6443", "https://127.9.0.2:6443"},
		"https://[::1]:443":             {"https://[::1]:443", "https://127.9.0.1:6443", "https://127.9.0.2:6443"},
	} {
		if got := URLs(endpoint, cps); !slices.Equal(got, want) {
			t.Errorf("URLs(%s) = %v, want %v", endpoint, got, want)
		}
	}
}

// TestObserve looks at a real control plane with the simulated kubelets
// of two nodes, through the credential the bundle gives: at its endpoint,
// then with an endpoint given by name (not dialled: the control plane's
// address answers), then with nothing that answers, and with another
// cluster's bundle, whose CA the API does not trust.
func TestObserve(t *testing.T) {
	k := kubetest.Start(t, 249)
	cp, bundle, addr := k.ControlPlane, k.Bundle, k.Options.Address
	admin, err := talos.KubernetesAdmin(bundle, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = kubelet.Run(ctx, kubelet.Options{Interval: 200 * time.Millisecond,
			Config: &rest.Config{Host: cp.URL(), TLSClientConfig: rest.TLSClientConfig{CAData: admin.CA, CertData: admin.Crt, KeyData: admin.Key}},
			Nodes: func() []kubelet.Node {
				return []kubelet.Node{
					{Name: "cp-1", Address: addr.String(), ControlPlane: true, Ready: true, KubeletVersion: "v1.34.1"},
					{Name: "worker-1", Address: "127.249.0.9", Ready: false, Reason: "KubeletNotReady", Message: "the node is rebooting", KubeletVersion: "v1.34.1"},
				}
			}})
	}()
	t.Cleanup(func() { cancel(); <-done })

	c := NewClients(Options{})
	target := Target{Tenant: "acme", Endpoint: cp.URL(), ControlPlanes: []netip.Addr{netip.MustParseAddr("127.249.0.250")}, Bundle: bundle}
	var o Observation
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if o = c.Observe(context.Background(), target); len(o.Nodes) == 2 || time.Now().After(deadline) {
			break
		}
	}
	if !o.Ready || o.URL != cp.URL() || len(o.Nodes) != 2 {
		t.Fatalf("at the endpoint: %+v", o)
	}
	cp1, w1 := o.Nodes[0], o.Nodes[1]
	if cp1.Name != "cp-1" || !cp1.Ready || !cp1.Schedulable || cp1.KubeletVersion != "v1.34.1" {
		t.Errorf("cp-1: %+v", cp1)
	}
	notReady := slices.ContainsFunc(w1.Conditions, func(c Condition) bool {
		return c.Type == "Ready" && c.Status == "False" && c.Message == "the node is rebooting"
	})
	if w1.Name != "worker-1" || w1.Ready || !notReady {
		t.Errorf("worker-1: %+v", w1)
	}

	byName := Target{Tenant: "acme", Endpoint: "https://acme.example.internal:6443", ControlPlanes: []netip.Addr{addr}, Bundle: bundle}
	if o := c.Observe(context.Background(), byName); !o.Ready || o.URL != cp.URL() {
		t.Errorf("an endpoint by name, the control plane's address answering: %+v", o)
	}

	nobody := Target{Tenant: "gone", Endpoint: "https://127.249.0.251:6443", ControlPlanes: []netip.Addr{netip.MustParseAddr("127.249.0.252")}, Bundle: bundle}
	o = c.Observe(context.Background(), nobody)
	if o.Ready || o.URL != "" || !strings.Contains(o.Problem, "https://127.249.0.251:6443: ") || !strings.Contains(o.Problem, "https://127.249.0.252:6443: ") {
		t.Errorf("nothing answering: %+v", o)
	}

	other, _ := kubetest.Bundle(t)
	o = c.Observe(context.Background(), Target{Tenant: "stranger", Endpoint: cp.URL(), Bundle: other})
	if o.Ready || o.URL != "" || !strings.Contains(o.Problem, "certificate") {
		t.Errorf("another cluster's bundle: %+v", o)
	}
}

// TestACredentialWaitsForAnAPIThatTakesConnections: a tenant whose API
// refuses costs no credential; the first address that takes a connection
// issues it, and a bundle that makes none says so.
func TestACredentialWaitsForAnAPIThatTakesConnections(t *testing.T) {
	bundle, _ := kubetest.Bundle(t)
	endpoint := refusedEndpoint(t)
	c := NewClients(Options{Timeout: time.Second})
	ctx := context.Background()
	issued := func(tenant string) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		tc := c.byTenant[tenant]
		return tc != nil && tc.tls != nil
	}
	if o := c.Observe(ctx, Target{Tenant: "acme", Endpoint: endpoint, Bundle: bundle}); !strings.HasPrefix(o.Problem, "no answer") || issued("acme") {
		t.Fatalf("an API that refuses: %q, credential issued %v; want no answer and no credential", o.Problem, issued("acme"))
	}

	// An address that takes the connection, then closes it: no API, but
	// the credential is needed to ask.
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	go func() {
		for {
			conn, err := open.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	endpoint = "https://" + open.Addr().String()
	if o := c.Observe(ctx, Target{Tenant: "acme", Endpoint: endpoint, Bundle: bundle}); o.Ready || !issued("acme") {
		t.Fatalf("an address that takes connections: %+v, credential issued %v; want not ready and a credential", o, issued("acme"))
	}
	if o := c.Observe(ctx, Target{Tenant: "bad", Endpoint: endpoint, Bundle: []byte("not a bundle")}); !strings.HasPrefix(o.Problem, "no credential for the API: ") {
		t.Fatalf("a bundle that makes no credential: %q, want it said", o.Problem)
	}
}

// refusedEndpoint is the URL of a loopback port that refuses connections.
func refusedEndpoint(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close() // refused from now on
	return "https://" + l.Addr().String()
}
