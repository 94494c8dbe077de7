package talos

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	rtalos "github.com/rezuscloud/rezuscloud/render/talos"
)

// TestRestoreOfARealEtcd: a tenant whose cluster has a Kubernetes API,
// with a real etcd behind it, loses every control plane's etcd; the
// restore of a snapshot the plane took brings back what Kubernetes held
// then (a ConfigMap written with client-go), and not what came after.
func TestRestoreOfARealEtcd(t *testing.T) {
	dir := t.TempDir()
	r := newRigOn(t, talosnode.Options{Dir: dir, KubeBin: testenv.KubeBin(t)})
	opts := r.opts
	opts.Wait, opts.Timeout, opts.Poll = 2*time.Minute, 2*time.Minute, 100*time.Millisecond
	pl := r.newPlane(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	var b [2]byte
	rand.Read(b[:])
	endpoint := "https://" + netip.AddrFrom4([4]byte{127, 245, b[0], b[1]%250 + 1}).String() + ":6443"
	secrets := bundle(t, "a")
	simStore, err := sim.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ms []Machine
	for i, role := range []string{"controlplane", "controlplane", "worker"} {
		cfg, err := rtalos.MachineConfig(rtalos.ConfigInput{ClusterName: "acme", ControlPlaneEndpoint: endpoint,
			KubernetesVersion: "1.34.1", TalosVersion: "1.12.6", Role: role, Secrets: secrets, Now: testNow})
		if err != nil {
			t.Fatal(err)
		}
		ng := map[string]string{"controlplane": "cp", "worker": "w"}[role]
		rec, err := simStore.Create(sim.Spec{Name: fmt.Sprint("acme-", i), Tenant: "acme", NodeGroup: ng, Role: role, Shape: "small",
			Image: "talos-1.12.6", UserData: cfg, KubernetesAPI: true}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, Machine{ID: rec.ID, Name: rec.Name, Address: rec.Address, NodeGroup: ng, ControlPlane: role == "controlplane"})
	}
	if err := r.host.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := pl.Bootstrap(ctx, "acme", secrets, ms); err != nil {
		t.Fatal(err)
	}
	cs := kubeClient(t, secrets, endpoint)
	serving := func() bool { _, ok := r.host.KubernetesURL(ms[0].ID); return ok }
	waitLong(t, "the Kubernetes API", serving)
	configMap := func(name string) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Data: map[string]string{"k": name}}
		_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
		return err
	}
	if err := configMap("kept"); err != nil {
		t.Fatal(err)
	}
	r.members(ms, 2)
	rc, info, err := pl.Snapshot(ctx, "acme", secrets, ms)
	if err != nil {
		t.Fatal(err)
	}
	snap := readClose(t, rc)
	if info.Machine != ms[0].label() || len(snap) < 4096 {
		t.Fatalf("a snapshot of %d bytes from %s", len(snap), info.Machine)
	}
	if err := configMap("later"); err != nil {
		t.Fatal(err)
	}
	if err := r.host.WipeEtcd(ms[0].ID); err != nil {
		t.Fatal(err)
	}

	var calls atomic.Int32
	rec, err := pl.Restore(ctx, "acme", secrets, ms, "b1", snapshotOf(snap, &calls))
	if err != nil || rec.Phase != RestoreDone {
		t.Fatalf("restore: %+v, %v", rec, err)
	}
	waitLong(t, "the Kubernetes API after the restore", serving)
	got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{})
	if err != nil || got.Data["k"] != "kept" {
		t.Fatalf("the ConfigMap of the snapshot after the restore: %+v, %v", got, err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "later", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the ConfigMap written after the snapshot: %v, want it not found", err)
	}
	if n, _ := r.recoveries(ms[0].ID); n != 1 {
		t.Fatalf("%d recovering bootstraps", n)
	}
	if got := r.journal(ms[2].ID, "ServiceRestart"); len(got) != 1 {
		t.Fatalf("the worker's kubelet restarts: %+v", got)
	}
}

// kubeClient is a client of the tenant's Kubernetes API as its admin.
func kubeClient(t *testing.T, secrets []byte, endpoint string) kubernetes.Interface {
	t.Helper()
	kc, err := rtalos.Kubeconfig("acme", endpoint, secrets, time.Hour, time.Now())
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
	return cs
}

// waitLong polls cond until it holds or 2 minutes pass: a real control
// plane takes seconds to start.
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
