package talos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	sx509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"

	"github.com/rezuscloud/rezuscloud/internal/kubetest"
	"github.com/rezuscloud/rezuscloud/internal/sim/kubeapi"
	"github.com/rezuscloud/rezuscloud/internal/sim/kubelet"
	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	rtalos "github.com/rezuscloud/rezuscloud/render/talos"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// benchKube is the Kubernetes API of the probe benchmarks' fleet, as the
// node host's process reads it from the file beside the bundle: one real
// API server that every tenant's endpoint names, to which the host's
// kubelets report the Nodes.
type benchKube struct {
	URL string `json:"url"`
}

// hostname is the host name of machine i of tenant: "" (the host's
// default) without a Kubernetes API, and m-0 to m-7 in every tenant with
// one, so that the one API server holds 8 Nodes and each tenant lists 8,
// as each would from an API of its own. (With names apart the server
// would hold 800 and each tenant would list all 800: a hundred times the
// work of its own API, which the client has no way to narrow.)
func (k *benchKube) hostname(_ string, i int) string {
	if k == nil {
		return ""
	}
	return fmt.Sprintf("m-%d", i)
}

// readBenchKube reads the node host's Kubernetes API; nil when the fleet
// has none.
func readBenchKube(dir string) (*benchKube, error) {
	b, err := os.ReadFile(dir + ".kube")
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var k benchKube
	return &k, json.Unmarshal(b, &k)
}

// runKubelets reports the host's nodes to the API as their kubelets (a
// Node by host name, Ready while a node of that name runs), every 10 s,
// until the returned function is called.
func (k *benchKube) runKubelets(h *talosnode.Host, secrets []byte) (stop func(), err error) {
	b, err := rtalos.ParseSecrets(secrets)
	if err != nil {
		return nil, err
	}
	ca, err := sx509.NewCertificateAuthorityFromCertificateAndKey(b.Certs.K8s)
	if err != nil {
		return nil, err
	}
	pair, err := kubeapi.ClientCertificate(ca, "system:sim-kubelet", "system:masters")
	if err != nil {
		return nil, err
	}
	cfg := &rest.Config{Host: k.URL, TLSClientConfig: rest.TLSClientConfig{CAData: b.Certs.K8s.Crt, CertData: pair.CrtPEM, KeyData: pair.KeyPEM},
		QPS: 400, Burst: 800}
	nodes := func() []kubelet.Node {
		byName := map[string]kubelet.Node{}
		for _, n := range h.Nodes() {
			kn := byName[n.Hostname]
			kn.Name, kn.Address, kn.ControlPlane, kn.KubeletVersion, kn.OSImage = n.Hostname, n.Address, n.ControlPlane, "v1.34.1", "Talos ("+n.Version+")"
			kn.Ready = kn.Ready || n.Stage == runtime.MachineStageRunning && n.Reachable
			byName[n.Hostname] = kn
		}
		out := make([]kubelet.Node, 0, len(byName))
		for _, kn := range byName {
			out = append(out, kn)
		}
		return out
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = kubelet.Run(ctx, kubelet.Options{Config: cfg, Nodes: nodes, Interval: 10 * time.Second})
	}()
	return func() { cancel(); <-done }, nil
}

// BenchmarkObserveFleet runs the status plane's observer (RunObserver,
// with its default intervals: the machines every 2 s, probed at most once
// per the prober's 15 s TTL, and each tenant's Kubernetes API every 10 s)
// over 100 tenants × 8 machines for a minute after its first pass, and
// reports the CPU time it took per second of wall time (cpu-ms/s: 1000 is
// one core busy), the Talos probes per second and its resident memory.
//
// Counted is the CPU of the benchmark's process (getrusage RUSAGE_SELF):
// the observer, its Talos clients and each tenant's Kubernetes clients
// (the TLS, the /readyz and the list of Nodes, decoding them), and the
// status it writes to bbolt. Not counted are the processes it starts,
// which stand for the tenants' machines: the simulated nodes and their
// kubelets (another process), etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler.
//
// The sub-benchmarks:
//   - talos: the Talos API alone; the tenants have no endpoint, so that
//     their Kubernetes API is never looked at.
//   - kubernetes: each tenant's endpoint is one real API server (this
//     machine has not the memory for 100), which holds 8 Nodes, m-0 to
//     m-7, the host names of every tenant's machines (benchKube.hostname):
//     each tenant lists its 8 Nodes, as it would from its own API.
//
// It fails when no machine was probed in the minute, and, with the
// Kubernetes API, unless every machine's status has its Node, Ready.
//
//	go test -run '^$' -bench ObserveFleet -benchtime 1x -count 3 ./reconciler/talos/
func BenchmarkObserveFleet(b *testing.B) {
	b.Run("talos", func(b *testing.B) { observeFleet(b, bundle(b, "fleet"), nil) })
	b.Run("kubernetes", func(b *testing.B) {
		k := kubetest.Start(b, kubeBenchBlock)
		observeFleet(b, k.Bundle, &benchKube{URL: k.URL()})
	})
}

// observeFleet is one run of BenchmarkObserveFleet.
func observeFleet(b *testing.B, secrets []byte, kube *benchKube) {
	ms := startBenchHost(b, secrets, kube)
	st, err := bolt.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	putFleet(b, st, ms)
	putFleetTenants(b, st, ms, kube)
	pool := NewPool(PoolOptions{MaxIdle: 1024})
	defer pool.Close()
	pl, err := New(Options{Store: st, Pool: pool})
	if err != nil {
		b.Fatal(err)
	}
	bootstrapFleet(b, pl, secrets, ms)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		pl.RunObserver(ctx, ObserverOptions{Bundle: func(string) []byte { return secrets }, AfterFirstPass: func() { close(first) }})
	}()
	defer func() { cancel(); <-done }()
	<-first
	start, cpu0, probes0 := time.Now(), cpuTime(), pl.prober.Probes()
	b.ResetTimer()
	time.Sleep(time.Minute) // the window measured: the observer runs on its own
	wall, cpu, probes := time.Since(start), cpuTime()-cpu0, pl.prober.Probes()-probes0
	b.StopTimer()
	if probes == 0 {
		b.Fatal("no machine was probed in a minute")
	}
	b.ReportMetric(float64(cpu.Milliseconds())/wall.Seconds(), "cpu-ms/s")
	b.ReportMetric(float64(probes)/wall.Seconds(), "probes/s")
	b.ReportMetric(float64(rssKiB())/1024, "rss-MiB")
	if kube != nil {
		checkFleetNodes(b, st, len(ms))
	}
}

// bootstrapFleet bootstraps the etcd of each tenant of ms, 8 at a time,
// so that their control planes run kube-apiserver.
func bootstrapFleet(b *testing.B, pl *Plane, secrets []byte, ms []Machine) {
	b.Helper()
	byTenant := map[string][]Machine{}
	for _, m := range ms {
		tenant, _, _ := strings.Cut(m.ID, "-")
		byTenant[tenant] = append(byTenant[tenant], m)
	}
	var g errgroup.Group
	g.SetLimit(8)
	for tenant, tms := range byTenant {
		g.Go(func() error {
			_, err := pl.Bootstrap(context.Background(), tenant, secrets, tms)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
}

// putFleetTenants stores each tenant of ms with its endpoint (none without
// kube), and the host names of its machines.
func putFleetTenants(b *testing.B, st store.Store, ms []Machine, kube *benchKube) {
	b.Helper()
	err := st.Update(func(tx store.Tx) error {
		for t := range benchTenants {
			tenant := fmt.Sprintf("t%03d", t)
			obj := &schema.Tenant{APIVersion: schema.APIVersion, Kind: schema.KindTenant, Metadata: schema.ObjectMeta{Name: tenant},
				Spec: schema.TenantSpec{KubernetesVersion: "1.34.1", TalosVersion: "1.12.6"}}
			if kube != nil {
				obj.Spec.ControlPlaneEndpoint = kube.URL
			}
			if _, err := tx.PutObject(schema.KindTenant, tenant, obj); err != nil {
				return err
			}
			for i := range benchMachines {
				id := fmt.Sprintf("%s-%d", tenant, i)
				var m schema.Machine
				if err := tx.GetObject(schema.KindMachine, id, &m); err != nil {
					return err
				}
				m.Spec.Hostname = kube.hostname(tenant, i)
				if _, err := tx.PutObject(schema.KindMachine, id, &m); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// checkFleetNodes fails unless each of the n machines' status has its
// Node, Ready.
func checkFleetNodes(b *testing.B, st store.Store, n int) {
	b.Helper()
	ready := 0
	err := st.View(func(tx store.Tx) error {
		for t := range benchTenants {
			ms, err := store.DecodeTenantObjects[schema.Machine](tx, fmt.Sprintf("t%03d", t), schema.KindMachine)
			if err != nil {
				return err
			}
			for _, m := range ms {
				if k := m.Status.Kubernetes; k != nil && k.NodeName == m.Spec.Hostname && k.Ready {
					ready++
				}
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if ready != n {
		b.Fatalf("%d of %d machines have their Node Ready in their status", ready, n)
	}
}
