package test

import (
	"context"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/schema"
)

// TestMetalDrainBeforeReset: examples/metal's tenant on three bare-metal
// machines whose cluster runs a real Kubernetes API. A commit that takes a
// control plane out cordons and drains its Node before the machine leaves
// etcd and is reset, and deletes the Node after the apply.
func TestMetalDrainBeforeReset(t *testing.T) {
	host, addrs, fp := startMetalMachines(t, talosnode.Options{KubeBin: testenv.KubeBin(t), MetalKubernetesAPI: true})
	e, dir := newMetalRepo(t, metalNodeGroups(addrs, fp, 2))
	e.first = e.push("Tenant metal-lab on three machines, with a Kubernetes API")
	e.srv = newE2EServer(t, metalServer(e, "--talos-wait", "30s", "--allow-loopback-metal"))
	e.srv.Start()
	e.srv.waitApplied(e.first)
	waitNodesSeen(t, e, metalTenant)
	cs := kubeClient(t, e, metalTenant)

	s := sampleDrains(t, cs, "app=web")
	e.work.Write(dir+"/nodegroups.yaml", metalNodeGroups(addrs, fp, 1))
	c := e.srv.waitApplied(e.push("One control plane\n\nRezuscloud-Allow-Deletions: 1\n"))
	s.finish()
	if r := e2eResult(t, c, metalTenant); c.Status.Phase != schema.CommitSucceeded || r.Plan.Destroy != 1 {
		t.Fatalf("scale-down %s, plan %s (want -1): %s", c.Status.Phase, r.Plan, e2eBrief(c.Status))
	}
	j := metalCalls(t, host, addrs[1], "EtcdLeaveCluster", "Reset")
	if callNames(j) != "EtcdLeaveCluster,Reset" {
		t.Fatalf("journal of the removed control plane: %+v; want it to leave etcd, then be reset", j)
	}
	s.mu.Lock()
	i := slices.Index(s.cordons, "lab-cp-2")
	var cordonedAt time.Time
	if i >= 0 {
		cordonedAt = s.cordonedAt[i]
	}
	s.mu.Unlock()
	switch {
	case i < 0:
		t.Fatalf("lab-cp-2 was never cordoned (cordons: %v)", s.cordons)
	case !cordonedAt.Before(j[0].Time):
		t.Errorf("lab-cp-2 cordoned at %s, after it left etcd at %s", cordonedAt.Format(time.StampMilli), j[0].Time.Format(time.StampMilli))
	}
	e.srv.WaitFor("the Node of the removed control plane to be deleted", func() bool {
		_, err := cs.CoreV1().Nodes().Get(context.Background(), "lab-cp-2", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}
