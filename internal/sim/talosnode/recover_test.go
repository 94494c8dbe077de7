package talosnode

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
)

// TestEtcdRecoverRefusesGarbage: an upload that is not a whole snapshot
// of the simulated etcd is refused, journaled with its error, and leaves
// nothing for a bootstrap; a Bootstrap with RecoverEtcd and no snapshot
// fails and changes nothing.
func TestEtcdRecoverRefusesGarbage(t *testing.T) {
	h := openHost(t, "")
	c := bootstrapped(t, h, 2, 1)
	if err := h.EtcdPut(c.cpIDs[0], "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	good, _ := c.snapshot(t, c.cps[0])
	if err := h.WipeEtcd(c.cpIDs[0]); err != nil {
		t.Fatal(err)
	}
	noise := make([]byte, 100<<10)
	rand.Read(noise)
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x20
	cp := adminClient(t, c.secrets, c.cps[1])
	// In this order, so that the journal's last entry is of an upload
	// with bytes.
	for _, c := range []struct {
		name string
		b    []byte
	}{
		{"an empty stream", nil}, {"random bytes", noise}, {"a truncated snapshot", good[:len(good)-10]},
		{"a snapshot with a byte changed", flipped}, {"a snapshot with bytes after it", append(bytes.Clone(good), 0)},
	} {
		_, err := cp.EtcdRecover(ctxT(t), bytes.NewReader(c.b))
		wantCode(t, "EtcdRecover of "+c.name, err, codes.InvalidArgument, "error verifying snapshot")
	}
	if _, err := os.Stat(filepath.Join(h.diskDir(c.cpIDs[1]), recoverySimFile)); !os.IsNotExist(err) {
		t.Fatalf("a refused upload left a snapshot: %v", err)
	}
	j, _ := h.Journal(c.cpIDs[1])
	if last := j[len(j)-1]; last.Call != "EtcdRecover" || !strings.Contains(last.Error, "error verifying snapshot") || last.Size == 0 {
		t.Fatalf("journal: %+v", last)
	}
	_, err := adminClient(t, c.secrets, c.wks[0]).EtcdRecover(ctxT(t), bytes.NewReader(good))
	wantCode(t, "EtcdRecover on a worker", err, codes.Unimplemented, "etcd recover is only available on control plane nodes")

	err = cp.Bootstrap(ctxT(t), &machine.BootstrapRequest{RecoverEtcd: true})
	wantCode(t, "Bootstrap with RecoverEtcd without a snapshot", err, codes.FailedPrecondition, "error verifying snapshot")
	if info, _ := h.Node(c.cpIDs[1]); info.EtcdMember {
		t.Fatal("a failed recovery made the node a member")
	}
	j, _ = h.Journal(c.cpIDs[1])
	if last := j[len(j)-1]; last.Call != "Bootstrap" || !last.Recover || last.Error == "" {
		t.Fatalf("journal: %+v", last)
	}
}

// TestEtcdRecoverCycle: data written to a cluster's etcd survive the loss
// of every control plane's etcd through a snapshot, the reset of
// EPHEMERAL on each, EtcdRecover and Bootstrap with RecoverEtcd on the
// first: the others join, the data and the filler are back (a snapshot
// taken after is the same bytes), the uploaded snapshot is gone from the
// node's disk, and the cluster's journals hold exactly one Bootstrap, with
// Recover. A second bootstrap is refused.
func TestEtcdRecoverCycle(t *testing.T) {
	h := openHost(t, "")
	c := bootstrapped(t, h, 3, 1)
	for i, k := range []string{"/registry/a", "/registry/b", "/registry/c"} {
		if err := h.EtcdPut(c.cpIDs[i], k, []byte(strings.Repeat(k, i+1))); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.SetEtcdFiller(c.cpIDs[0], 2<<20+17); err != nil {
		t.Fatal(err)
	}
	before, _ := c.snapshot(t, c.cps[1])
	if err := h.WipeEtcd(c.cpIDs[0]); err != nil {
		t.Fatal(err)
	}
	for _, a := range c.cps {
		c.resetEphemeral(t, a)
	}
	for _, id := range c.cpIDs {
		waitRunning(t, h, id) // the reset's stages begin at the call
	}
	cp0 := adminClient(t, c.secrets, c.cps[0])
	if r, err := cp0.EtcdRecover(ctxT(t), bytes.NewReader(before)); err != nil || len(r.Messages) != 1 {
		t.Fatalf("EtcdRecover: %v %v", r, err)
	}
	if err := cp0.Bootstrap(ctxT(t), &machine.BootstrapRequest{RecoverEtcd: true}); err != nil {
		t.Fatal(err)
	}
	c.waitMembers(t, c.cpIDs...)
	for i, k := range []string{"/registry/a", "/registry/b", "/registry/c"} {
		if v, ok, err := h.EtcdGet(c.cpIDs[2], k); err != nil || !ok || string(v) != strings.Repeat(k, i+1) {
			t.Fatalf("%s after the recovery: %q %v %v", k, v, ok, err)
		}
	}
	if after, _ := c.snapshot(t, c.cps[2]); !bytes.Equal(after, before) {
		t.Fatalf("the snapshot after the recovery (%d bytes) differs from the one recovered (%d bytes)", len(after), len(before))
	}
	if _, err := os.Stat(filepath.Join(h.diskDir(c.cpIDs[0]), recoverySimFile)); !os.IsNotExist(err) {
		t.Fatalf("the uploaded snapshot stays after the recovery: %v", err)
	}
	if _, err := adminClient(t, c.secrets, c.cps[1]).EtcdRecover(ctxT(t), bytes.NewReader(before)); err != nil {
		t.Fatal(err)
	}
	err := adminClient(t, c.secrets, c.cps[1]).Bootstrap(ctxT(t), &machine.BootstrapRequest{RecoverEtcd: true})
	wantCode(t, "a second recovery", err, codes.AlreadyExists, "etcd data directory is not empty")
	recovers, bootstraps := 0, 0
	for _, id := range append(c.cpIDs, c.wIDs...) {
		j, _ := h.Journal(id)
		for _, e := range j {
			if e.Call == "Bootstrap" && e.Error == "" {
				bootstraps++
				if e.Recover {
					recovers++
				}
			}
		}
	}
	if recovers != 1 || bootstraps != 2 { // the first bootstrap, and the recovery
		t.Fatalf("successful bootstraps: %d, with recovery %d; want 2 and 1", bootstraps, recovers)
	}
}

// TestServiceRestartKubelet: every node restarts its kubelet on request,
// journaled, and lists it running since then; an unknown service and
// machined are refused, and so is a client of role os:reader.
func TestServiceRestartKubelet(t *testing.T) {
	h := openHost(t, "")
	c := bootstrapped(t, h, 1, 1)
	ctx := ctxT(t)
	for i, a := range []string{c.cps[0], c.wks[0]} {
		cl := adminClient(t, c.secrets, a)
		was := services(t, ctx, cl)["kubelet"].Events.Events[0].Ts.AsTime()
		r, err := cl.ServiceRestart(ctx, "kubelet")
		if err != nil || r.Messages[0].Resp != `Service "kubelet" restarted` {
			t.Fatalf("restart the kubelet of %s: %v %v", a, r, err)
		}
		s := services(t, ctx, cl)["kubelet"]
		if s.State != "Running" || !s.Events.Events[0].Ts.AsTime().After(was) {
			t.Fatalf("kubelet of %s after its restart: %s since %s (was since %s)", a, s.State, s.Events.Events[0].Ts.AsTime(), was)
		}
		j, _ := h.Journal([]string{c.cpIDs[0], c.wIDs[0]}[i])
		if last := j[len(j)-1]; last.Call != "ServiceRestart" || last.Service != "kubelet" || last.Error != "" {
			t.Fatalf("journal of %s: %+v", a, last)
		}
		if _, err := cl.ServiceRestart(ctx, "nope"); err == nil || !strings.Contains(err.Error(), `service "nope" not defined`) {
			t.Fatalf("restart of an unknown service: %v", err)
		}
		if _, err := cl.ServiceRestart(ctx, "machined"); err == nil {
			t.Fatal("machined restarted")
		}
	}
	_, err := readerClient(t, c.secrets, c.wks[0]).ServiceRestart(ctx, "kubelet")
	wantCode(t, "restart as os:reader", err, codes.PermissionDenied, "not authorized")
}
