package test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// TestTalosUpgradePaths, through the real server, tofu, the sim provider,
// the simulated nodes and a real kube-apiserver: a tenant whose control
// plane and workers run Talos 1.12 and whose node group edge runs Talos
// 1.14. One commit upgrades both (1.12.6 to 1.12.7, 1.14.0 to 1.14.1).
// The nodes' journals show each path: the 1.12 machines get
// MachineService.Upgrade after their drain; the 1.14 machine gets
// LifecycleService.Upgrade, then its Node is cordoned and drained (a pod
// of its own is evicted), then Reboot; every node ends schedulable on its
// new version.
func TestTalosUpgradePaths(t *testing.T) {
	const name = "paths"
	e := newE2E(t, e2eOptions{args: planeArgs("--sim-kube-bin", testenv.KubeBin(t), "--talos-timeout", "60s")})
	addKubeTenant(t, e, name, 1, "")
	dir := e2eManifests + "/" + name
	// The staging example's patch sets machine.kubelet, which the Talos
	// 1.14 layout keeps in a KubeletConfig document of its own.
	e.work.Run("rm", "-rf", "--quiet", "--", dir+"/patches.yaml")
	e.work.Write(dir+"/edge.yaml", `apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: edge
  labels:
    rezuscloud.io/tenant: paths
    rezuscloud.io/role: worker
spec:
  count: 1
  providerClass: sim
  talosVersion: "1.14.0"
  providerConfig:
    shape: small
    kubernetesAPI: true
`)
	e.srv.waitApplied(e.push("Tenant paths: Talos 1.12 and 1.14"))
	planeWaitReady(t, e, name)
	waitNodesSeen(t, e, name)
	cs := kubeClient(t, e, name)

	edge := ""
	for _, m := range e.srv.tenantMachines(name) {
		if m.Spec.NodeGroup == "edge" {
			edge = m.Spec.Hostname
		}
	}
	if edge == "" {
		t.Fatal("no machine of the node group edge")
	}
	// A pod on the edge node makes its drain evict something, and take
	// its grace period, before the reboot.
	createDeployment(t, cs, "edge", 1, map[string]string{"kubernetes.io/hostname": edge}, 0)
	var before string
	e.srv.WaitFor("edge's pod to run on "+edge, func() bool {
		pods, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=edge"})
		if err == nil && len(pods.Items) == 1 && podReady(&pods.Items[0]) {
			before = pods.Items[0].Name
			return true
		}
		return false
	})

	s := sampleDrains(t, cs, "app=edge")
	e.edit(dir+"/tenant.yaml", `talosVersion: "1.12.6"`, `talosVersion: "1.12.7"`)
	e.edit(dir+"/edge.yaml", `talosVersion: "1.14.0"`, `talosVersion: "1.14.1"`)
	e.srv.waitApplied(e.push("Upgrade paths: Talos 1.12.7 and 1.14.1"))
	s.finish()

	calls := planeCalls(t, e, name, "Upgrade", "LifecycleService.Upgrade", "Reboot")
	byMachine := map[string][]string{}
	var disruptions []string // the call that takes each machine down, in order
	cordonAfterInstall := map[string]time.Time{}
	for _, c := range calls {
		byMachine[c.ID] = append(byMachine[c.ID], c.Call)
		switch c.Call {
		case "Upgrade", "Reboot":
			disruptions = append(disruptions, c.ID)
		case "LifecycleService.Upgrade":
			cordonAfterInstall[c.ID] = c.Time
		}
	}
	host := map[string]string{}
	for _, m := range e.srv.tenantMachines(name) {
		host[m.Metadata.Name] = m.Spec.Hostname
		want := []string{"Upgrade"}
		if m.Spec.NodeGroup == "edge" {
			want = []string{"LifecycleService.Upgrade", "Reboot"}
		}
		if got := byMachine[m.Metadata.Name]; !slices.Equal(got, want) {
			t.Errorf("%s (%s) took %q, want %q", m.Metadata.Name, m.Spec.NodeGroup, got, want)
		}
	}
	e.srv.WaitFor("the machines to show their new versions", func() bool {
		for _, m := range e.srv.tenantMachines(name) {
			v := "v1.12.7"
			if m.Spec.NodeGroup == "edge" {
				v = "v1.14.1"
			}
			if m.Status.TalosVersion != v {
				return false
			}
		}
		return true
	})
	var order []string
	for _, id := range disruptions {
		order = append(order, host[id])
	}
	// Each node is cordoned before the call that takes its machine down,
	// one at a time, in the rollout's order.
	if !slices.Equal(s.cordons, order) || s.maxCordoned > 1 {
		t.Errorf("nodes cordoned in the order %v (%d at once), the machines' disrupting calls in the order %v", s.cordons, s.maxCordoned, order)
	}
	for id, installed := range cordonAfterInstall {
		i := slices.Index(s.cordons, host[id])
		if i < 0 || !s.cordonedAt[i].After(installed) {
			t.Errorf("the node %s of %s was not cordoned after its install at %s (cordons %v at %v)", host[id], id, installed.Format(time.RFC3339Nano), s.cordons, s.cordonedAt)
		}
	}
	pods, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=edge"})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Name == before {
		t.Errorf("edge's pod after the rollout: %v %v; want a new one (the old one evicted by the drain)", podNames(pods.Items), err)
	}
	nodes, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			t.Errorf("node %s is still cordoned after the rollout", n.Name)
		}
	}
	t.Logf("calls %v; cordons %v", byMachine, s.cordons)
}

func podNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}
