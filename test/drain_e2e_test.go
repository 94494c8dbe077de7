package test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/schema"
)

// addKubeTenant adds to the work tree a tenant named name, made from the
// staging example, whose sim node groups ask for a Kubernetes API, with
// a loopback endpoint of 127.253.0.0/16 and workers workers; tenantExtra
// is added to the tenant's spec. It returns the endpoint (host:port).
func addKubeTenant(t *testing.T, e *e2e, name string, workers int, tenantExtra string) string {
	t.Helper()
	var r [2]byte
	_, _ = rand.Read(r[:])
	endpoint := fmt.Sprintf("127.253.%d.%d:6443", r[0], r[1]%250+1)
	for _, f := range []string{"tenant.yaml", "nodegroups.yaml", "patches.yaml"} {
		s := strings.ReplaceAll(e.read(e2eManifests+"/staging/"+f), "staging", name)
		s = strings.ReplaceAll(s, "https://127.250.0.2:6443", "https://"+endpoint) // staging's
		s = strings.ReplaceAll(s, "    shape: small\n", "    shape: small\n    kubernetesAPI: true\n")
		if f == "nodegroups.yaml" {
			i := strings.LastIndex(s, "  count: 1\n")
			s = s[:i] + fmt.Sprintf("  count: %d\n", workers) + s[i+len("  count: 1\n"):]
		}
		if f == "tenant.yaml" {
			s += tenantExtra
		}
		e.work.Write(e2eManifests+"/"+name+"/"+f, s)
	}
	if s := e.read(e2eManifests + "/" + name + "/nodegroups.yaml"); strings.Count(s, "kubernetesAPI: true") != 2 {
		t.Fatalf("the %s tenant's manifests were not made as meant:\n%s", name, s)
	}
	return endpoint
}

// startKubeTenant starts the server of the plane's tests with the
// simulated cloud's Kubernetes control planes, adds a tenant with a
// Kubernetes API (addKubeTenant), and waits until its machines are ready
// and the plane has seen their Nodes. It returns a client of its API.
func startKubeTenant(t *testing.T, name string, workers int, tenantExtra string) (*e2e, kubernetes.Interface) {
	t.Helper()
	return startKubeTenantWith(t, name, workers, tenantExtra, nil)
}

// startKubeTenantWith is startKubeTenant with edit, when not nil, run on
// the work tree after the tenant is added and before it is pushed.
func startKubeTenantWith(t *testing.T, name string, workers int, tenantExtra string, edit func(*e2e)) (*e2e, kubernetes.Interface) {
	t.Helper()
	e := newE2E(t, e2eOptions{args: planeArgs("--sim-kube-bin", testenv.KubeBin(t), "--talos-timeout", "60s")})
	addKubeTenant(t, e, name, workers, tenantExtra)
	if edit != nil {
		edit(e)
	}
	e.srv.waitApplied(e.push("Tenant " + name + ", with a Kubernetes API"))
	planeWaitReady(t, e, name)
	waitNodesSeen(t, e, name)
	return e, kubeClient(t, e, name)
}

// kubeClient is a client of the tenant's API with the kubeconfig that
// `rezusctl kubeconfig` downloads.
func kubeClient(t *testing.T, e *e2e, tenant string) kubernetes.Interface {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if out, err := exec.Command(servertest.CLI(t), "--server", e.srv.URL(), "kubeconfig", tenant, "-f", kc).CombinedOutput(); err != nil {
		t.Fatalf("rezusctl kubeconfig %s: %v\n%s", tenant, err, out)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 5 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// waitNodesSeen waits until the plane shows every machine of the tenant
// with its Node Ready: only then does a rollout drain it.
func waitNodesSeen(t *testing.T, e *e2e, tenant string) {
	t.Helper()
	e.srv.WaitFor(tenant+"'s machines to show their Nodes Ready", func() bool {
		ms := e.srv.tenantMachines(tenant)
		for _, m := range ms {
			if k := m.Status.Kubernetes; k == nil || !k.Ready {
				return false
			}
		}
		return len(ms) > 0
	})
}

// drainSampler samples, every 50 ms, the available pods of a Deployment
// and, through a watch that misses no change, which Nodes are cordoned.
type drainSampler struct {
	mu           sync.Mutex
	minAvailable int
	samples      int
	maxCordoned  int
	cordons      []string    // each Node as it was seen cordoned, in order
	cordonedAt   []time.Time // when the watch showed each of cordons
	stop         chan struct{}
	done         chan struct{}
}

func sampleDrains(t *testing.T, cs kubernetes.Interface, selector string) *drainSampler {
	t.Helper()
	s := &drainSampler{minAvailable: 1 << 30, stop: make(chan struct{}), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		cordoned := map[string]bool{}
		rv := list.ResourceVersion
		for ctx.Err() == nil {
			// The client's timeout ends each watch: go on from the last
			// version seen, so that no change is missed.
			w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				n, ok := ev.Object.(*corev1.Node)
				if !ok {
					continue
				}
				rv = n.ResourceVersion
				on := n.Spec.Unschedulable && ev.Type != "DELETED"
				s.mu.Lock()
				if on && !cordoned[n.Name] {
					s.cordons = append(s.cordons, n.Name)
					s.cordonedAt = append(s.cordonedAt, time.Now())
				}
				cordoned[n.Name] = on
				c := 0
				for _, v := range cordoned {
					if v {
						c++
					}
				}
				s.maxCordoned = max(s.maxCordoned, c)
				s.mu.Unlock()
			}
			w.Stop()
		}
	}()
	go func() {
		defer close(s.done)
		defer func() { cancel(); <-watched }()
		for {
			select {
			case <-s.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				continue
			}
			avail := 0
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && podReady(&p) {
					avail++
				}
			}
			s.mu.Lock()
			s.samples++
			s.minAvailable = min(s.minAvailable, avail)
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *drainSampler) finish() {
	close(s.stop)
	<-s.done
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func createDeployment(t *testing.T, cs kubernetes.Interface, name string, replicas int32, nodeSelector map[string]string, minAvailable int) {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels}, Spec: appsv1.DeploymentSpec{
		Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64(1)), NodeSelector: nodeSelector,
			Containers: []corev1.Container{{Name: name, Image: "registry.k8s.io/pause:3.10"}},
		}},
	}}
	ctx := context.Background()
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m := intstr.FromInt32(int32(minAvailable))
	b := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: policyv1.PodDisruptionBudgetSpec{
		MinAvailable: &m, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkDrained checks a rollout of n machines whose calls are calls, as
// the sampler s saw it: at no sample fewer than 2 pods of web available,
// never two nodes cordoned at once, the nodes cordoned in the order of
// the calls, and none left cordoned.
func checkDrained(t *testing.T, e *e2e, cs kubernetes.Interface, s *drainSampler, what string, calls []planeCall, n int) {
	t.Helper()
	if len(calls) != n {
		t.Fatalf("%s: calls %+v, want one on each of the %d machines", what, calls, n)
	}
	host := map[string]string{}
	for _, m := range e.srv.tenantMachines("drain") {
		host[m.Metadata.Name] = m.Spec.Hostname
	}
	var order []string
	for _, c := range calls {
		order = append(order, host[c.ID])
	}
	if s.samples < 20 || s.minAvailable < 2 {
		t.Errorf("%s: web had %d pods available at its lowest over %d samples, want at least 2", what, s.minAvailable, s.samples)
	}
	if s.maxCordoned > 1 {
		t.Errorf("%s: %d nodes were cordoned at once, want one at a time", what, s.maxCordoned)
	}
	if !slices.Equal(s.cordons, order) {
		t.Errorf("%s: nodes cordoned in the order %v, the machines' calls in the order %v", what, s.cordons, order)
	}
	nodes, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			t.Errorf("%s: node %s is still cordoned after the rollout", what, n.Name)
		}
	}
	t.Logf("%s of %d machines: cordons %v, web at least %d available over %d samples", what, n, s.cordons, s.minAvailable, s.samples)
}

// TestDrainRollout, through the real server, tofu, the sim provider, the
// simulated nodes and a real kube-apiserver: a tenant with a Deployment
// of 3 replicas under a PodDisruptionBudget of minAvailable 2, on 3
// workers. A restart of every machine (restartedAt), and then a Talos
// upgrade by commit, cordon and drain each node in turn before its call: at no sample are fewer than 2 pods
// available, never two nodes are cordoned at once, the nodes are cordoned
// in the rollout's order, each before its machine's reboot, and every node
// ends schedulable. Then a budget that can never be satisfied, on the
// first worker, stops the workers' restart with DrainTimeout naming the
// pod and the budget, with no machine rebooted and the node uncordoned;
// with onTimeout: force the restart goes on. A newer commit stops a drain
// that the budget holds, and the server killed in one resumes from it.
func TestDrainRollout(t *testing.T) {
	e, cs := startKubeTenant(t, "drain", 3, "  drain:\n    timeout: 30s\n")
	createDeployment(t, cs, "web", 3, nil, 2)
	e.srv.WaitFor("web's 3 pods to be available", func() bool {
		b, err := cs.PolicyV1().PodDisruptionBudgets("default").Get(context.Background(), "web", metav1.GetOptions{})
		return err == nil && b.Status.CurrentHealthy == 3 && b.Status.DisruptionsAllowed == 1
	})

	s := sampleDrains(t, cs, "app=web")
	path := e2eManifests + "/drain/tenant.yaml"
	e.edit(path, "  name: drain\n", "  name: drain\n  annotations:\n    rezuscloud.io/restartedAt: \"2026-12-05T10:00:00Z\"\n")
	e.srv.waitApplied(e.push("Restart every machine of drain"))
	s.finish()
	reboots := planeCalls(t, e, "drain", "Reboot")
	checkDrained(t, e, cs, s, "restart", reboots, 4)

	// A Talos upgrade by commit drains each node in turn the same way.
	s = sampleDrains(t, cs, "app=web")
	e.edit(path, `talosVersion: "1.12.6"`, `talosVersion: "1.12.7"`)
	e.srv.waitApplied(e.push("Upgrade drain to Talos 1.12.7"))
	s.finish()
	checkDrained(t, e, cs, s, "Talos upgrade", planeCalls(t, e, "drain", "Upgrade"), 4)

	// A budget that no eviction can satisfy, on the first worker of the
	// rollout's order.
	var first schema.Machine
	for _, m := range e.srv.tenantMachines("drain") {
		if m.Metadata.Name == reboots[1].ID {
			first = m
		}
	}
	if first.Spec.Hostname == "" {
		t.Fatalf("the machine %s of the second reboot is gone", reboots[1].ID)
	}
	createDeployment(t, cs, "db", 1, map[string]string{"kubernetes.io/hostname": first.Spec.Hostname}, 2)
	e.srv.WaitFor("db's pod to run on "+first.Spec.Hostname, func() bool {
		b, err := cs.PolicyV1().PodDisruptionBudgets("default").Get(context.Background(), "db", metav1.GetOptions{})
		return err == nil && b.Status.CurrentHealthy == 1
	})
	rebooted := len(planeCalls(t, e, "drain", "Reboot"))
	e.edit(path, "    timeout: 30s\n", "    timeout: 3s\n")
	e.edit(e2eManifests+"/drain/nodegroups.yaml", "  name: workers\n", "  name: workers\n  annotations:\n    rezuscloud.io/restartedAt: \"2026-12-05T11:00:00Z\"\n")
	e.push("Restart drain's workers, with a budget that blocks")
	var tn schema.Tenant
	e.srv.WaitFor("drain to stall with DrainTimeout", func() bool {
		tn = planeTenant(t, e, "drain")
		c := tn.Status.Conditions.Get(schema.ConditionStalled)
		return c != nil && c.Status == schema.ConditionTrue && c.Reason == schema.ReasonDrainTimeout
	})
	msg := tn.Status.Conditions.Get(schema.ConditionStalled).Message
	for _, want := range []string{"node " + first.Spec.Hostname + " did not drain within 3s", "pod default/db-", "PodDisruptionBudget default/db allows no disruption", "the node was uncordoned"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Stalled message %q does not say %q", msg, want)
		}
	}
	if n := len(planeCalls(t, e, "drain", "Reboot")); n != rebooted {
		t.Errorf("%d reboots after the drain timed out, want %d: no machine rebooted", n, rebooted)
	}
	if n, err := cs.CoreV1().Nodes().Get(context.Background(), first.Spec.Hostname, metav1.GetOptions{}); err != nil || n.Spec.Unschedulable {
		t.Errorf("%s after the stopped drain: cordoned or gone (%v)", first.Spec.Hostname, err)
	}

	e.edit(path, "    timeout: 3s\n", "    timeout: 3s\n    onTimeout: force\n")
	e.srv.waitApplied(e.push("Force drain's drains"))
	if n := len(planeCalls(t, e, "drain", "Reboot")); n != rebooted+3 {
		t.Errorf("%d reboots after onTimeout: force, want %d", n, rebooted+3)
	}
	tn = planeTenant(t, e, "drain")
	if c := tn.Status.Conditions.Get(schema.ConditionStalled); c != nil && c.Status == schema.ConditionTrue {
		t.Errorf("still stalled after onTimeout: force: %s", c.Message)
	}

	// A newer commit stops a drain that db's budget holds: the commit
	// that takes the restart back runs at once, not after the drain's 5
	// minutes (waitApplied would time out first); the held commit's
	// result says that it was superseded, no machine reboots, and the
	// node ends uncordoned.
	rebooted = len(planeCalls(t, e, "drain", "Reboot"))
	e.edit(path, "    timeout: 3s\n    onTimeout: force\n", "    timeout: 5m\n")
	e.edit(e2eManifests+"/drain/nodegroups.yaml", "2026-12-05T11:00:00Z", "2026-12-05T13:00:00Z")
	held := e.push("Restart drain's workers, held by db's budget")
	e.srv.WaitFor(first.Spec.Hostname+" to be cordoned for the held drain", func() bool {
		n, err := cs.CoreV1().Nodes().Get(context.Background(), first.Spec.Hostname, metav1.GetOptions{})
		return err == nil && n.Spec.Unschedulable
	})
	e.edit(e2eManifests+"/drain/nodegroups.yaml", "2026-12-05T13:00:00Z", "2026-12-05T11:00:00Z")
	e.srv.waitApplied(e.push("Take the held restart back"))
	if r := e2eResult(t, e.srv.WaitCommit(held), "drain"); r.Phase != schema.CommitSuperseded ||
		!strings.Contains(r.Error, "a newer revision waits: the drain of node "+first.Spec.Hostname) {
		t.Errorf("the held commit's result: %s %q, want Superseded saying that its drain stopped", r.Phase, r.Error)
	}
	e.srv.WaitFor(first.Spec.Hostname+" to be uncordoned by the newer commit", func() bool {
		n, err := cs.CoreV1().Nodes().Get(context.Background(), first.Spec.Hostname, metav1.GetOptions{})
		return err == nil && !n.Spec.Unschedulable
	})
	if n := len(planeCalls(t, e, "drain", "Reboot")); n != rebooted {
		t.Errorf("%d reboots after the superseded drain, want %d", n, rebooted)
	}

	// The server killed in the middle of a drain (db's budget holds it):
	// once started again, a commit that takes the restart back leaves
	// the rollout nothing to do, and it uncordons the node it cordoned.
	e.edit(e2eManifests+"/drain/nodegroups.yaml", "2026-12-05T11:00:00Z", "2026-12-05T12:00:00Z")
	e.push("Restart drain's workers again")
	e.srv.WaitFor(first.Spec.Hostname+" to be cordoned for its drain", func() bool {
		n, err := cs.CoreV1().Nodes().Get(context.Background(), first.Spec.Hostname, metav1.GetOptions{})
		return err == nil && n.Spec.Unschedulable
	})
	e.srv.Kill()
	// The commit that takes the restart back is there when the server
	// starts again: the server's first run is of it, not of the restart,
	// whose drain the budget would hold for its 5 minutes.
	e.edit(e2eManifests+"/drain/nodegroups.yaml", "2026-12-05T12:00:00Z", "2026-12-05T11:00:00Z")
	e.push("Take the restart back")
	e.srv.Start()
	// Until the restarted simulated cloud serves the API again, the run
	// waits and is tried again: no waitApplied of its first attempt.
	cs = kubeClient(t, e, "drain")
	e.srv.WaitFor(first.Spec.Hostname+" to be uncordoned after the restart", func() bool {
		n, err := cs.CoreV1().Nodes().Get(context.Background(), first.Spec.Hostname, metav1.GetOptions{})
		return err == nil && !n.Spec.Unschedulable
	})
	if n := len(planeCalls(t, e, "drain", "Reboot")); n != rebooted {
		t.Errorf("%d reboots after the killed drain, want %d", n, rebooted)
	}

	// A scale-down drains the machine it removes, then deletes its Node.
	before := map[string]string{}
	for _, m := range e.srv.tenantMachines("drain") {
		before[m.Metadata.Name] = m.Spec.Hostname
	}
	s = sampleDrains(t, cs, "app=web")
	e.edit(e2eManifests+"/drain/nodegroups.yaml", "  count: 3\n", "  count: 2\n")
	e.srv.waitApplied(e.push("Scale drain's workers down to 2"))
	s.finish()
	for _, m := range e.srv.tenantMachines("drain") {
		delete(before, m.Metadata.Name)
	}
	if len(before) != 1 {
		t.Fatalf("machines removed by the scale-down: %v, want one", before)
	}
	for _, gone := range before {
		if _, err := cs.CoreV1().Nodes().Get(context.Background(), gone, metav1.GetOptions{}); err == nil {
			t.Errorf("the Node %s of the removed machine is still in the API", gone)
		}
		if !slices.Contains(s.cordons, gone) {
			t.Errorf("the Node %s of the removed machine was never seen cordoned (cordons %v)", gone, s.cordons)
		}
	}
	if s.minAvailable < 2 {
		t.Errorf("web had %d pods available at its lowest during the scale-down, want at least 2", s.minAvailable)
	}
}

// TestRolloutWaitFor: a tenant whose spec.rollout.waitFor selects a
// Deployment that cannot be available holds its rollout after the first
// machine (the control plane) until the Deployment is gone; then the
// worker is restarted too.
func TestRolloutWaitFor(t *testing.T) {
	e, cs := startKubeTenant(t, "gated", 1, "  rollout:\n    waitFor: gate=yes\n")
	labels := map[string]string{"app": "blocker", "gate": "yes"}
	blocker := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "blocker", Namespace: "default", Labels: labels}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": "no-such-node"},
			Containers:   []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		}},
	}}
	ctx := context.Background()
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, blocker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	path := e2eManifests + "/gated/tenant.yaml"
	e.edit(path, "  name: gated\n", "  name: gated\n  annotations:\n    rezuscloud.io/restartedAt: \"2026-12-05T10:00:00Z\"\n")
	sha := e.push("Restart every machine of gated")
	e.srv.WaitFor("the control plane's reboot", func() bool { return len(planeCalls(t, e, "gated", "Reboot")) == 1 })
	want := `the workloads of "gate=yes" to be available: Deployment default/blocker: 0 of 1 available`
	var ro *schema.RolloutStatus
	e.srv.WaitFor("gated's status to say what the rollout waits for", func() bool {
		ro = planeTenant(t, e, "gated").Status.Rollout
		return ro != nil && strings.Contains(ro.Waiting, want)
	})
	if c := planeTenant(t, e, "gated").Status.Conditions.Get(schema.ConditionUpgrading); c == nil || !strings.Contains(c.Message, want) {
		t.Errorf("the Upgrading condition does not say what the rollout waits for: %+v", c)
	}
	time.Sleep(3 * time.Second) // the machine is back in about a second: the gate holds the worker
	if r := planeCalls(t, e, "gated", "Reboot"); len(r) != 1 || !r[0].CP {
		t.Fatalf("reboots while the workloads of gate=yes are unavailable: %+v, want only the control plane's", r)
	}
	if err := cs.AppsV1().Deployments("default").Delete(ctx, "blocker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.srv.waitApplied(sha)
	if r := planeCalls(t, e, "gated", "Reboot"); len(r) != 2 || r[1].CP {
		t.Errorf("reboots once the blocker is gone: %+v, want the worker's after the control plane's", r)
	}
}
