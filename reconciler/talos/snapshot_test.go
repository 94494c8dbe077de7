package talos

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
)

// members waits until the first n machines of ms are etcd members.
func (r *rig) members(ms []Machine, n int) {
	r.t.Helper()
	eventually(r.t, "etcd members", func() bool {
		for _, m := range ms[:n] {
			if info, _ := r.host.Node(m.ID); !info.EtcdMember {
				return false
			}
		}
		return true
	})
}

func TestSnapshotWaitsForAHealthyMember(t *testing.T) {
	r := newRig(t)
	secrets := bundle(t, "a")
	ms := r.cluster("acme", 2, 1, renderConfig(t, "acme", secrets, "controlplane"), renderConfig(t, "acme", secrets, "worker"))
	ctx := ctxT(t)
	eventually(t, "the control planes to wait for a bootstrap", func() bool {
		return r.plane.prober.Fresh(ctx, "acme", secrets, ms[1]).EtcdPreparing
	})
	// No cluster yet: no member can give a snapshot.
	_, _, err := r.plane.Snapshot(ctx, "acme", secrets, ms)
	var w *WaitingError
	if !errors.As(err, &w) || !strings.Contains(err.Error(), ms[0].label()+": EtcdStatus: failed to query etcd status") ||
		!strings.Contains(err.Error(), ms[1].label()+": EtcdStatus") {
		t.Fatalf("err = %v, want to wait for a healthy member, naming each control plane", err)
	}
	if _, err := r.plane.Bootstrap(ctx, "acme", secrets, ms); err != nil {
		t.Fatal(err)
	}
	r.members(ms, 2)
	// Both members fail their health checks.
	for _, m := range ms[:2] {
		if err := r.host.SetFault(m.ID, talosnode.Fault{Unhealthy: "etcd"}); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err = r.plane.Snapshot(ctx, "acme", secrets, ms)
	if !errors.As(err, &w) || !strings.Contains(err.Error(), ms[0].label()+": etcdserver: request timed out") ||
		!strings.Contains(err.Error(), ms[1].label()+": etcdserver: request timed out") {
		t.Fatalf("err = %v, want to wait for a healthy member", err)
	}
	if got := r.journal(ms[0].ID, "EtcdSnapshot"); len(got) > 0 {
		t.Fatalf("a snapshot was asked of an unhealthy member: %v", got)
	}
}

func TestSnapshot(t *testing.T) {
	r := newRig(t)
	secrets := bundle(t, "a")
	ms := r.cluster("acme", 3, 1, renderConfig(t, "acme", secrets, "controlplane"), renderConfig(t, "acme", secrets, "worker"))
	ctx := ctxT(t)
	if _, err := r.plane.Bootstrap(ctx, "acme", secrets, ms); err != nil {
		t.Fatal(err)
	}
	r.members(ms, 3)
	r.put(ms[0].ID, "/registry/configmaps/default/a", "the value written")
	const filler = 3 << 20 // a stream of many messages
	if err := r.host.SetEtcdFiller(ms[0].ID, filler); err != nil {
		t.Fatal(err)
	}
	// The first control plane's member fails its health check: the
	// snapshot comes from the next one by stable order.
	if err := r.host.SetFault(ms[0].ID, talosnode.Fault{Unhealthy: "etcd"}); err != nil {
		t.Fatal(err)
	}
	shuffled := []Machine{ms[3], ms[2], ms[1], ms[0]}
	snap, info := r.takeSnapshot(ctx, "acme", secrets, shuffled)
	if info.Machine != ms[1].label() || info.DBSizeBytes != int64(len(snap)) || info.RaftIndex == 0 {
		t.Fatalf("snapshot info %+v, want from %s with its DB size (%d) and raft index", info, ms[1].label(), len(snap))
	}
	if len(snap) < filler || !bytes.Contains(snap, []byte("the value written")) {
		t.Fatalf("snapshot of %d bytes, want the data written and the filler of %d", len(snap), filler)
	}
}

func TestSnapshotStalledIsCutOff(t *testing.T) {
	r := newRig(t)
	secrets := bundle(t, "a")
	ms := r.cluster("acme", 1, 0, renderConfig(t, "acme", secrets, "controlplane"), nil)
	ctx := ctxT(t)
	if _, err := r.plane.Bootstrap(ctx, "acme", secrets, ms); err != nil {
		t.Fatal(err)
	}
	r.members(ms, 1)
	// More than the first message, which the hanging node sends.
	if err := r.host.SetEtcdFiller(ms[0].ID, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := r.host.SetFault(ms[0].ID, talosnode.Fault{SnapshotHang: true}); err != nil {
		t.Fatal(err)
	}
	read := func(pl *Plane, ctx context.Context) (int, error) {
		rc, _, err := pl.Snapshot(ctx, "acme", secrets, ms)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		n, err := io.Copy(io.Discard, rc)
		return int(n), err
	}
	opts := r.opts
	opts.SnapshotIdle = 300 * time.Millisecond
	start := time.Now()
	n, err := read(r.newPlane(opts), ctx)
	want := "snapshot stream from " + ms[0].label() + " stalled for 300ms"
	if err == nil || err.Error() != want || n == 0 {
		t.Fatalf("read %d bytes, err = %v; want some bytes, then %q", n, err, want)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("cut off after %s", took)
	}
	// The caller's context bounds the whole stream too.
	ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := read(r.plane, ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's deadline", err)
	}
}
