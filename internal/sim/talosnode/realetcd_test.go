package talosnode

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/render/talos"
)

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRealEtcdRecover: a cluster with a Kubernetes API has a real etcd
// behind it. A ConfigMap written with client-go is in the snapshot a
// control plane streams; WipeEtcd stops the API; after the reset of
// EPHEMERAL on both control planes, EtcdRecover and Bootstrap with
// RecoverEtcd, the API serves again from the restored etcd (etcdutl) and
// the ConfigMap is back, with both control planes members. A simulated
// snapshot is refused by this cluster. The reset of EPHEMERAL on both
// control planes, without WipeEtcd, loses the real etcd as well.
func TestRealEtcdRecover(t *testing.T) {
	dir := t.TempDir()
	h, err := Open(Options{Dir: dir, Timings: testTimings, PollInterval: 100 * time.Millisecond, KubeBin: testenv.KubeBin(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	var r [2]byte
	rand.Read(r[:])
	endpoint := netip.AddrFrom4([4]byte{127, 247, r[0], r[1]%250 + 1})
	secrets := bundle(t, "a")
	cfg, err := talos.MachineConfig(talos.ConfigInput{ClusterName: "acme", ControlPlaneEndpoint: "https://" + endpoint.String() + ":6443",
		KubernetesVersion: "1.34.1", TalosVersion: "1.12.6", Role: "controlplane", Secrets: secrets, Now: testNow})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sim.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids, cps []string
	for i := range 2 {
		rec, err := st.Create(sim.Spec{Name: fmt.Sprint("acme-cp-", i), Tenant: "acme", NodeGroup: "cp", Role: "controlplane", Shape: "small",
			Image: "talos-1.12.6", UserData: cfg, KubernetesAPI: true}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		ids, cps = append(ids, rec.ID), append(cps, rec.Address)
	}
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		waitRunning(t, h, id)
	}
	cp0 := adminClient(t, secrets, cps[0])
	if err := cp0.Bootstrap(ctxT(t), &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}
	kc, err := talos.Kubeconfig("acme", "https://"+endpoint.String()+":6443", secrets, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	rc.Timeout = 5 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	serving := func() bool { _, ok := h.KubernetesURL(ids[0]); return ok }
	waitFor(t, "the Kubernetes API", 90*time.Second, serving)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctxT(t), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both control planes members", func() bool {
		a, _ := h.Node(ids[0])
		b, _ := h.Node(ids[1])
		return a.EtcdMember && b.EtcdMember
	})
	snap, err := readAll(adminClient(t, secrets, cps[1]).EtcdSnapshot(ctxT(t), &machine.EtcdSnapshotRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(snap) < 4096 || binary.LittleEndian.Uint32(snap[16:20]) != bboltMagic {
		t.Fatalf("a snapshot of %d bytes that is not etcd's", len(snap))
	}
	// The member's status is the real etcd's: its database is about as
	// large as the snapshot (the API server writes meanwhile).
	es, err := adminClient(t, secrets, cps[1]).EtcdStatus(ctxT(t))
	if db := es.GetMessages()[0].GetMemberStatus().GetDbSize(); err != nil || db < int64(len(snap))/2 || db > 2*int64(len(snap)) {
		t.Fatalf("EtcdStatus: database of %d bytes, %v; the snapshot has %d", db, err, len(snap))
	} else {
		t.Logf("etcd: a database of %d bytes, a snapshot of %d", db, len(snap))
	}
	if err := h.EtcdPut(ids[0], "k", nil); err == nil {
		t.Fatal("EtcdPut wrote to a cluster whose etcd is real")
	}

	if err := h.WipeEtcd(ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctxT(t), "kept", metav1.GetOptions{}); err == nil {
		t.Fatal("the Kubernetes API answers after WipeEtcd")
	}
	for _, a := range cps {
		err := adminClient(t, secrets, a).ResetGeneric(ctxT(t), &machine.ResetRequest{Reboot: true,
			SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "EPHEMERAL", Wipe: true}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		waitRunning(t, h, id)
	}
	simSnap := new(bytes.Buffer)
	if err := writeSnapshot(simSnap, &etcdData{}); err != nil {
		t.Fatal(err)
	}
	_, err = cp0.EtcdRecover(ctxT(t), simSnap)
	wantCode(t, "EtcdRecover of a simulated snapshot", err, codes.InvalidArgument, "this cluster runs a real etcd")
	if _, err := cp0.EtcdRecover(ctxT(t), bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if err := cp0.Bootstrap(ctxT(t), &machine.BootstrapRequest{RecoverEtcd: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Kubernetes API after the recovery", 90*time.Second, serving)
	got, err := cs.CoreV1().ConfigMaps("default").Get(ctxT(t), "kept", metav1.GetOptions{})
	if err != nil || got.Data["k"] != "v" {
		t.Fatalf("the ConfigMap after the recovery: %+v %v", got, err)
	}
	eventually(t, "both control planes members again", func() bool {
		a, _ := h.Node(ids[0])
		b, _ := h.Node(ids[1])
		return a.EtcdMember && b.EtcdMember
	})
	j, _ := h.Journal(ids[0])
	if last := j[len(j)-1]; last.Call != "Bootstrap" || !last.Recover || last.Error != "" {
		t.Fatalf("journal: %+v", last)
	}

	// The reset of EPHEMERAL on both control planes loses the etcd too:
	// the API stops, and a recovery from the same snapshot does not bring
	// back what was written after it.
	cm.Name = "later"
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctxT(t), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, a := range cps {
		err := adminClient(t, secrets, a).ResetGeneric(ctxT(t), &machine.ResetRequest{Reboot: true,
			SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "EPHEMERAL", Wipe: true}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		waitRunning(t, h, id)
	}
	waitFor(t, "the Kubernetes API to stop", 30*time.Second, func() bool { return !serving() })
	if _, err := cp0.EtcdRecover(ctxT(t), bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if err := cp0.Bootstrap(ctxT(t), &machine.BootstrapRequest{RecoverEtcd: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Kubernetes API after the second recovery", 90*time.Second, serving)
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctxT(t), "kept", metav1.GetOptions{}); err != nil {
		t.Fatalf("the ConfigMap of the snapshot after the second recovery: %v", err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctxT(t), "later", metav1.GetOptions{}); err == nil {
		t.Fatal("a ConfigMap written after the snapshot is there after a recovery from it")
	}
}
