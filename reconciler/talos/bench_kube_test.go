package talos

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	sx509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rezuscloud/rezuscloud/internal/kubetest"
	"github.com/rezuscloud/rezuscloud/internal/sim/kubeapi"
	"github.com/rezuscloud/rezuscloud/internal/sim/kubelet"
	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// kubeBenchBlock is the block of 127.0.0.0/8 where this package's tests
// start a Kubernetes control plane (kubetest.Start).
const kubeBenchBlock = 247

// The workloads of BenchmarkRollingUpgradeKubernetes: benchDeployments
// Deployments of benchReplicas pods on the workers, each under a
// PodDisruptionBudget of minAvailable benchReplicas-1, so that a drain
// evicts a second pod of a Deployment only once the first one's
// replacement runs elsewhere.
const (
	benchDeployments = 2
	benchReplicas    = 10
	benchPartOf      = "app.kubernetes.io/part-of=bench"
)

// BenchmarkRollingUpgradeKubernetes is BenchmarkRollingUpgrade with the
// tenant's Kubernetes: a real control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler), the simulated kubelet of each
// of the 3 control planes and 5 workers (reporting every 200 ms), 20 pods
// of two Deployments on the workers under PodDisruptionBudgets of
// minAvailable 9 of 10, and spec.rollout.waitFor selecting both. The plane
// drains each Node before its upgrade, waits for it to be Ready and
// uncordons it, and gates each next machine on the API's /readyz and the
// Deployments. It reports the plane's overhead per machine: the wall time
// of the rollout less the nodes' own time (upgrade stage, reboot, boot)
// and less the drains' own time (cordon and evictions, DrainRecord.Took,
// which holds the eviction API's refusals while a budget blocks and the
// pods' grace period), divided by the machines. The kubelet's reporting
// interval is in the overhead. It fails when a machine was not drained,
// fewer than 20 pods were evicted, or a Node or Deployment is not back.
//
//	go test -run '^$' -bench RollingUpgradeKubernetes -benchtime 1x -count 3 ./reconciler/talos/
func BenchmarkRollingUpgradeKubernetes(b *testing.B) {
	k := kubetest.Start(b, kubeBenchBlock)
	timings := talosnode.DefaultTimings
	h, err := talosnode.Open(talosnode.Options{Dir: b.TempDir(), Timings: timings})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	st, err := bolt.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	drains := &drainLog{byMachine: map[string]DrainRecord{}}
	st.OnCommit(drains.follow)
	pool := NewPool(PoolOptions{})
	defer pool.Close()
	pl, err := New(Options{Store: st, Pool: pool})
	if err != nil {
		b.Fatal(err)
	}
	r := &rig{t: b, host: h, store: st, pool: pool, plane: pl, next: 10}
	cpCfg, wCfg := renderConfig(b, "bench", k.Bundle, "controlplane"), renderConfig(b, "bench", k.Bundle, "worker")
	tr := &tenantRig{rig: r, tenant: "bench", secrets: k.Bundle, cpCfg: cpCfg, wCfg: wCfg}
	tr.ms = r.cluster("bench", 3, 5, cpCfg, wCfg)
	ctx := context.Background()
	if _, err := pl.Bootstrap(ctx, "bench", k.Bundle, tr.ms); err != nil {
		b.Fatal(err)
	}
	if _, err := pl.Roll(ctx, tr.desired(cpCfg, wCfg, "1.12.6")); err != nil {
		b.Fatal(err)
	}
	cs := startBenchKubelets(b, k, h, ids(tr.ms))
	for i := range tr.ms {
		n, _ := h.Node(tr.ms[i].ID)
		tr.ms[i].Node = n.Hostname
	}
	startBenchWorkloads(b, cs)
	own := time.Duration(len(tr.ms)) * (timings.Upgrade + timings.Reboot + timings.Boot)
	b.ResetTimer()
	var wall, drained time.Duration
	for i := range b.N {
		d := tr.desired(cpCfg, wCfg, fmt.Sprintf("1.12.%d", 7+i))
		d.Endpoint, d.WaitFor = k.URL(), benchPartOf
		drains.reset()
		start := time.Now()
		if _, err := pl.Roll(ctx, d); err != nil {
			b.Fatal(err)
		}
		wall += time.Since(start)
		drained += drains.check(b, tr.ms)
		checkBenchBack(b, cs)
	}
	perRun, drainPerRun := wall/time.Duration(b.N), drained/time.Duration(b.N)
	b.ReportMetric(perRun.Seconds(), "wall-s/rollout")
	b.ReportMetric(own.Seconds(), "nodes-s/rollout")
	b.ReportMetric(drainPerRun.Seconds(), "drains-s/rollout")
	b.ReportMetric(float64((perRun-own-drainPerRun).Milliseconds())/float64(len(tr.ms)), "overhead-ms/machine")
}

// drainLog keeps the drain of each machine's operation from the rollout
// records as the plane writes them.
type drainLog struct {
	mu        sync.Mutex
	byMachine map[string]DrainRecord
}

func (l *drainLog) follow(changes []store.Change) {
	for _, c := range changes {
		if c.Resource.Kind != KindRollout {
			continue
		}
		var rec RolloutRecord
		if json.Unmarshal(c.Resource.Object, &rec) != nil || rec.Current == nil || rec.Current.Drain == nil {
			continue
		}
		l.mu.Lock()
		l.byMachine[rec.Current.Machine] = *rec.Current.Drain
		l.mu.Unlock()
	}
}

func (l *drainLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.byMachine)
}

// check fails unless every machine was drained and at least every pod
// was evicted once; it returns the sum of the drains' own times.
func (l *drainLog) check(b *testing.B, ms []Machine) time.Duration {
	b.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var took time.Duration
	evicted := 0
	for _, m := range ms {
		d, ok := l.byMachine[m.ID]
		if !ok || d.Node != m.Node || d.Skipped != "" || d.Forced > 0 {
			b.Fatalf("machine %s (node %s) was not drained as it should be: %+v", m.ID, m.Node, d)
		}
		took += d.Took
		evicted += d.Evicted
	}
	if want := benchDeployments * benchReplicas; evicted < want {
		b.Fatalf("the drains evicted %d pods, want at least %d (each pod was on a worker)", evicted, want)
	}
	return took
}

// startBenchKubelets runs the kubelets of the machines (by id) toward k until the
// benchmark ends, Ready while their simulated node runs, and returns an
// admin client of k once every Node is Ready.
func startBenchKubelets(b *testing.B, k *kubetest.Cluster, h *talosnode.Host, machines []string) kubernetes.Interface {
	b.Helper()
	ca, err := sx509.NewCertificateAuthorityFromCertificateAndKey(k.Secrets.Certs.K8s)
	if err != nil {
		b.Fatal(err)
	}
	pair, err := kubeapi.ClientCertificate(ca, "admin", "system:masters")
	if err != nil {
		b.Fatal(err)
	}
	// One client serves every node: it may send as much as their kubelets
	// would with the kubelet's defaults (kubeAPIQPS 50, kubeAPIBurst 100).
	cfg := &rest.Config{Host: k.URL(), TLSClientConfig: rest.TLSClientConfig{CAData: k.Secrets.Certs.K8s.Crt, CertData: pair.CrtPEM, KeyData: pair.KeyPEM},
		QPS: float32(50 * len(machines)), Burst: 100 * len(machines)}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	nodes := func() []kubelet.Node {
		var out []kubelet.Node
		for _, id := range machines {
			n, ok := h.Node(id)
			if !ok {
				continue
			}
			ready := n.Stage == runtime.MachineStageRunning && n.Reachable
			kn := kubelet.Node{Name: n.Hostname, Address: n.Address, ControlPlane: n.ControlPlane, Ready: ready,
				KubeletVersion: "v1.34.1", OSImage: "Talos (" + n.Version + ")"}
			if !ready {
				kn.Reason, kn.Message = "KubeletNotReady", "the node is "+n.Stage.String()
			}
			out = append(out, kn)
		}
		return out
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = kubelet.Run(ctx, kubelet.Options{Config: cfg, Nodes: nodes, Interval: 200 * time.Millisecond})
	}()
	b.Cleanup(func() { cancel(); <-done })
	benchUntil(b, "every Node Ready", func() (bool, error) {
		ns, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil || len(ns.Items) != len(machines) {
			return false, err
		}
		for _, n := range ns.Items {
			if !nodeReady(n) {
				return false, fmt.Errorf("node %s is not Ready", n.Name)
			}
		}
		return true, nil
	})
	return cs
}

// startBenchWorkloads creates the Deployments and their budgets, and
// waits until every pod is available and each budget allows one
// disruption.
func startBenchWorkloads(b *testing.B, cs kubernetes.Interface) {
	b.Helper()
	ctx := context.Background()
	for i := range benchDeployments {
		name := fmt.Sprintf("web-%d", i)
		labels := map[string]string{"app": name, "app.kubernetes.io/part-of": "bench"}
		replicas := int32(benchReplicas)
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels}, Spec: appsv1.DeploymentSpec{
			Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: new(int64(1)),
				Containers:                    []corev1.Container{{Name: "web", Image: "registry.k8s.io/pause:3.10"}},
			}},
		}}
		if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		minAvailable := intstr.FromInt32(benchReplicas - 1)
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &minAvailable, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
		if _, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	checkBenchBack(b, cs)
}

// checkBenchBack waits until every Node is schedulable, every pod of the
// Deployments available and every budget allows one disruption.
func checkBenchBack(b *testing.B, cs kubernetes.Interface) {
	b.Helper()
	ctx := context.Background()
	benchUntil(b, "every Node schedulable and every pod available", func() (bool, error) {
		ns, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, n := range ns.Items {
			if n.Spec.Unschedulable || !nodeReady(n) {
				return false, fmt.Errorf("node %s: unschedulable %t, ready %t", n.Name, n.Spec.Unschedulable, nodeReady(n))
			}
		}
		pdbs, err := cs.PolicyV1().PodDisruptionBudgets("default").List(ctx, metav1.ListOptions{})
		if err != nil || len(pdbs.Items) != benchDeployments {
			return false, err
		}
		for _, p := range pdbs.Items {
			if p.Status.CurrentHealthy != benchReplicas || p.Status.DisruptionsAllowed != 1 {
				return false, fmt.Errorf("PodDisruptionBudget %s: %d healthy, %d disruptions allowed", p.Name, p.Status.CurrentHealthy, p.Status.DisruptionsAllowed)
			}
		}
		return true, nil
	})
}

func nodeReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// benchUntil asks cond every 100 ms until it holds, and fails the
// benchmark after a minute with its last error, which says what it
// waits for.
func benchUntil(b *testing.B, what string, cond func() (bool, error)) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("waited a minute for %s; last: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
