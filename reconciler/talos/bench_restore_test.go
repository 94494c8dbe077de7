package talos

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// restoreOverheadTarget bounds the time a restore spends beyond the
// simulated nodes' own stages, per machine of the tenant.
const restoreOverheadTarget = 2 * time.Second

// BenchmarkRestore restores the etcd of a tenant of 3 control planes and
// 1 worker from a snapshot the plane took (Plane.Snapshot), on simulated
// nodes with the default stage durations and a plane with its default
// options, and reports the wall time of Plane.Restore against the nodes'
// own stage time, and the plane's overhead per machine: the difference,
// divided by the tenant's 4 machines. It fails when that overhead is
// 2 s or more.
//
// Two cases, each op restoring a new backup value over the cluster the
// last op left:
//
//   - etcd-lost: every control plane lost its etcd (Host.WipeEtcd), as
//     after losing their disks. They wait for a bootstrap, so the restore
//     resets none: the nodes' own time is nil (EtcdRecover, Bootstrap and
//     ServiceRestart take no stage), and the whole wall time is the
//     plane's.
//   - etcd-kept: the cluster still runs on data of its own (a restore
//     over an operator's mistake). The restore resets every control plane
//     at once (Reset of EPHEMERAL with a reboot: the resetting stage, the
//     reboot, the boot). Their stages overlap, so the nodes' own time is
//     one machine's Reset + Reboot + Boot; the sum over the machines is
//     reported beside it.
//
// A key written before the snapshot and overwritten after it must read
// as before once the restore is done. With -test.v, each op's phases are
// logged with the time each began.
//
//	go test -run '^$' -bench Restore -benchtime 3x -v ./reconciler/talos/
func BenchmarkRestore(b *testing.B) {
	b.Run("etcd-lost", func(b *testing.B) { benchRestore(b, true) })
	b.Run("etcd-kept", func(b *testing.B) { benchRestore(b, false) })
}

// restoreBench is a bootstrapped tenant of 3 control planes and a worker
// on simulated nodes of the default timings, with a snapshot of its etcd.
type restoreBench struct {
	*rig
	timings talosnode.Timings
	secrets []byte
	ms      []Machine
	snap    []byte

	mu     sync.Mutex
	phases []phaseAt // the restore records written, in order
}

// phaseAt is a restore record's phase and when it was written.
type phaseAt struct {
	phase string
	at    time.Time
}

func newRestoreBench(b *testing.B) *restoreBench {
	b.Helper()
	timings := talosnode.DefaultTimings
	h, err := talosnode.Open(talosnode.Options{Dir: b.TempDir(), Timings: timings})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close() })
	st, err := bolt.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	pool := NewPool(PoolOptions{})
	b.Cleanup(pool.Close)
	pl, err := New(Options{Store: st, Pool: pool})
	if err != nil {
		b.Fatal(err)
	}
	rb := &restoreBench{rig: &rig{t: b, host: h, store: st, pool: pool, plane: pl, next: 10}, timings: timings, secrets: bundle(b, "bench")}
	st.OnCommit(rb.notePhases)
	rb.ms = rb.cluster("bench", 3, 1, renderConfig(b, "bench", rb.secrets, "controlplane"), renderConfig(b, "bench", rb.secrets, "worker"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := pl.Bootstrap(ctx, "bench", rb.secrets, rb.ms); err != nil {
		b.Fatal(err)
	}
	rb.members(rb.ms, 3)
	rb.put(rb.ms[0].ID, "/registry/configmaps/default/a", "before")
	rb.snap, _ = rb.takeSnapshot(ctx, "bench", rb.secrets, rb.ms)
	return rb
}

// notePhases keeps the phase of each restore record written.
func (rb *restoreBench) notePhases(cs []store.Change) {
	now := time.Now()
	for _, c := range cs {
		var rec RestoreRecord
		if c.Resource.Kind != KindRestore || json.Unmarshal(c.Resource.Object, &rec) != nil {
			continue
		}
		rb.mu.Lock()
		if n := len(rb.phases); n == 0 || rb.phases[n-1].phase != rec.Phase {
			rb.phases = append(rb.phases, phaseAt{rec.Phase, now})
		}
		rb.mu.Unlock()
	}
}

// takePhases returns the phases noted since the last call, each with how
// long after start its record was written.
func (rb *restoreBench) takePhases(start time.Time) string {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	var parts []string
	for _, p := range rb.phases {
		parts = append(parts, fmt.Sprintf("%s +%v", p.phase, p.at.Sub(start).Round(time.Millisecond)))
	}
	rb.phases = nil
	return strings.Join(parts, ", ")
}

// resets counts the Reset calls each control plane accepted.
func (rb *restoreBench) resets() (n int) {
	for _, m := range rb.ms {
		if m.ControlPlane {
			n += len(rb.journal(m.ID, "Reset"))
		}
	}
	return n
}

func benchRestore(b *testing.B, lose bool) {
	rb := newRestoreBench(b)
	stages := rb.timings.Reset + rb.timings.Reboot + rb.timings.Boot
	var wall, own, sum time.Duration
	var resets int
	var calls atomic.Int32
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		rb.put(rb.ms[0].ID, "/registry/configmaps/default/a", "after")
		if lose {
			if err := rb.host.WipeEtcd(rb.ms[0].ID); err != nil {
				b.Fatal(err)
			}
		}
		before := rb.resets()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		b.StartTimer()
		start := time.Now()
		rec, err := rb.plane.Restore(ctx, "bench", rb.secrets, rb.ms, fmt.Sprintf("b%d", i), snapshotOf(rb.snap, &calls))
		took := time.Since(start)
		b.StopTimer()
		cancel()
		if err != nil || rec.Phase != RestoreDone {
			b.Fatalf("restore: %+v, %v", rec, err)
		}
		if got := rb.get(rb.ms[1].ID, "/registry/configmaps/default/a"); got != "before" {
			b.Fatalf("after the restore a=%q, want the snapshot's %q", got, "before")
		}
		n := rb.resets() - before
		if n > 0 { // the control planes' stages run at once
			own += stages
		}
		sum += time.Duration(n) * stages
		resets += n
		wall += took
		b.Logf("op %d: %v wall, %d control planes reset; phases: %s", i, took.Round(time.Millisecond), n, rb.takePhases(start))
		b.StartTimer()
	}
	b.StopTimer()
	machines := time.Duration(len(rb.ms))
	perOp := func(d time.Duration) time.Duration { return d / time.Duration(b.N) }
	overhead := perOp(wall-own) / machines
	b.ReportMetric(perOp(wall).Seconds(), "wall-s/restore")
	b.ReportMetric(perOp(own).Seconds(), "nodes-s/restore")
	b.ReportMetric(perOp(sum).Seconds(), "nodes-sum-s/restore")
	b.ReportMetric(float64(resets)/float64(b.N), "resets/restore")
	b.ReportMetric(float64(overhead.Milliseconds()), "overhead-ms/machine")
	wantResets := 3 // every control plane holds data
	if lose {
		wantResets = 0 // none holds data: each waits for a bootstrap
	}
	if resets != wantResets*b.N {
		b.Errorf("%d control planes reset in %d restores, want %d each", resets, b.N, wantResets)
	}
	if overhead >= restoreOverheadTarget {
		b.Errorf("restore overhead %v per machine (wall %v, nodes' own stages %v, %d machines), want < %v",
			overhead, perOp(wall), perOp(own), len(rb.ms), restoreOverheadTarget)
	}
}
