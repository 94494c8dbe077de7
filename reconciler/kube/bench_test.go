package kube

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/rezuscloud/rezuscloud/internal/kubetest"
	"github.com/rezuscloud/rezuscloud/internal/sim/kubelet"
	"github.com/rezuscloud/rezuscloud/render/talos"
)

// BenchmarkObserve is one look of the observer at a tenant's Kubernetes
// API (Clients.Observe: /readyz and the list of Nodes over a kept
// connection) at a real control plane holding a tenant's 8 Nodes, and
// reports the CPU it took in this process (cpu-µs/op): the client's side
// alone, since the API server and etcd are other processes. The simulated
// kubelets of the Nodes run in this process too and are counted: a round
// every 10 s, 16 requests at most, against the thousands of the looks.
//
//	go test -run '^$' -bench Observe -benchtime 300x -count 3 ./reconciler/kube/
func BenchmarkObserve(b *testing.B) {
	k := kubetest.Start(b, 249)
	admin, err := talos.KubernetesAdmin(k.Bundle, time.Hour, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = kubelet.Run(ctx, kubelet.Options{Interval: 10 * time.Second,
			Config: &rest.Config{Host: k.URL(), TLSClientConfig: rest.TLSClientConfig{CAData: admin.CA, CertData: admin.Crt, KeyData: admin.Key}},
			Nodes: func() []kubelet.Node {
				var ns []kubelet.Node
				for i := range 8 {
					ns = append(ns, kubelet.Node{Name: fmt.Sprintf("m-%d", i), Address: fmt.Sprintf("127.249.2.%d", i+1), ControlPlane: i < 3, Ready: true, KubeletVersion: "v1.34.1"})
				}
				return ns
			}})
	}()
	b.Cleanup(func() { cancel(); <-done })
	c := NewClients(Options{})
	target := Target{Tenant: "acme", Endpoint: k.URL(), Bundle: k.Bundle}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if o := c.Observe(ctx, target); o.Ready && len(o.Nodes) == 8 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the API did not show 8 Nodes within 30 s")
		}
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	for range b.N {
		if o := c.Observe(ctx, target); !o.Ready || len(o.Nodes) != 8 {
			b.Fatalf("a look: %+v", o)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// BenchmarkObserveNoAnswer is one look at a tenant's API that does not
// answer (nothing listens at its endpoint, as with a simulated tenant
// whose Talos runs kube-apiserver), which builds the tenant's client
// anew each time, and reports the CPU it took (cpu-µs/op).
//
//	go test -run '^$' -bench ObserveNoAnswer -benchtime 2000x -count 3 ./reconciler/kube/
func BenchmarkObserveNoAnswer(b *testing.B) {
	bundle, _ := kubetest.Bundle(b)
	endpoint := refusedEndpoint(b)
	c := NewClients(Options{})
	target := Target{Tenant: "acme", Endpoint: endpoint, Bundle: bundle}
	ctx := context.Background()
	c.Observe(ctx, target) // makes the tenant's entry; no credential: nothing answers
	b.ResetTimer()
	cpu0 := cpuTime()
	for range b.N {
		if o := c.Observe(ctx, target); o.URL != "" {
			b.Fatalf("a look at nothing answered: %+v", o)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// cpuTime is the CPU time of this process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
