package test

import (
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// TestSimKubernetesAPI adds a tenant whose sim node groups set
// providerConfig.kubernetesAPI, with a loopback control plane endpoint:
// once it is bootstrapped the simulated cloud serves a real Kubernetes API
// there, and kubectl works with the kubeconfig that `rezusctl kubeconfig`
// downloads, and lists a Ready Node for each machine. The API comes back after a restart of the server, and stops,
// its folder gone, when the tenant is removed from git. The example
// tenants, which do not ask for one, get none.
func TestSimKubernetesAPI(t *testing.T) {
	kubeBin := testenv.KubeBin(t)
	e := newE2E(t, e2eOptions{args: planeArgs("--sim-kube-bin", kubeBin)})
	endpoint := addKubeTenant(t, e, "kube", 1, "")
	e.srv.waitApplied(e.push("Tenant kube, with a Kubernetes API"))
	planeWaitReady(t, e, "kube")

	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if out, err := exec.Command(servertest.CLI(t), "--server", e.srv.URL(), "kubeconfig", "kube", "-f", kc).CombinedOutput(); err != nil {
		t.Fatalf("rezusctl kubeconfig kube: %v\n%s", err, out)
	}
	kubectl := func() (string, error) {
		out, err := exec.Command(filepath.Join(kubeBin, "kubectl"), "--kubeconfig", kc, "--request-timeout", "5s", "get", "namespaces", "-o", "name").CombinedOutput()
		return string(out), err
	}
	waitKubectl := func(when string) {
		t.Helper()
		var out string
		e.srv.WaitFor("kubectl get namespaces "+when, func() bool {
			var err error
			out, err = kubectl()
			return err == nil && strings.Contains(out, "namespace/kube-system")
		})
	}
	waitKubectl("after the bootstrap")

	// Each machine's simulated kubelet registers its Node, Ready, with the
	// tenant's Kubernetes version.
	var nodes string
	e.srv.WaitFor("the kube tenant's two Nodes to be Ready", func() bool {
		out, err := exec.Command(filepath.Join(kubeBin, "kubectl"), "--kubeconfig", kc, "--request-timeout", "5s", "get", "nodes",
			"-o", `jsonpath={range .items[*]}{.metadata.name} {.status.nodeInfo.kubeletVersion} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`).CombinedOutput()
		nodes = string(out)
		return err == nil && strings.Count(nodes, " v1.34.1 True\n") == 2
	})
	for _, m := range e.srv.tenantMachines("kube") {
		if !strings.Contains(nodes, m.Spec.Hostname+" ") {
			t.Errorf("no Node of machine %s (%s) in:\n%s", m.Metadata.Name, m.Spec.Hostname, nodes)
		}
	}
	// The plane observes the API: each machine's status shows its Node,
	// and the tenant counts the Ready ones.
	e.srv.WaitFor("the kube tenant's machines to show their Nodes Ready", func() bool {
		for _, m := range e.srv.tenantMachines("kube") {
			k := m.Status.Kubernetes
			if k == nil || k.NodeName != m.Spec.Hostname || !k.Ready || !k.Schedulable || k.KubeletVersion != "v1.34.1" {
				return false
			}
		}
		tn := planeTenant(t, e, "kube")
		return tn.Status.Machines.NodesReady == 2 && tn.Status.APIReady
	})
	for _, m := range e.srv.tenantMachines("staging") {
		if m.Status.Kubernetes != nil {
			t.Errorf("staging, which has no Kubernetes API, shows a Node for %s: %+v", m.Metadata.Name, m.Status.Kubernetes)
		}
	}

	simDir := e.data + "-sim"
	planes, _ := filepath.Glob(filepath.Join(simDir, "kubernetes", "*"))
	if len(planes) != 1 {
		t.Errorf("control planes under %s/kubernetes: %v, want one: only the kube tenant asks for one", simDir, planes)
	}

	e.srv.Stop()
	if conn, err := net.DialTimeout("tcp", endpoint, time.Second); err == nil {
		conn.Close()
		t.Errorf("%s answers while the server is stopped", endpoint)
	}
	e.srv.Start()
	waitKubectl("after a restart of the server")

	e.work.Remove(e2eManifests + "/kube")
	e.srv.waitApplied(e.push("Remove tenant kube"))
	e.srv.WaitFor("the kube tenant's API to stop", func() bool {
		conn, err := net.DialTimeout("tcp", endpoint, time.Second)
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
	// The API stops first; its etcd, and then its folder, after it.
	e.srv.WaitFor("the kube tenant's control plane to leave nothing under "+simDir+"/kubernetes", func() bool {
		planes, _ := filepath.Glob(filepath.Join(simDir, "kubernetes", "*"))
		return len(planes) == 0
	})
}
