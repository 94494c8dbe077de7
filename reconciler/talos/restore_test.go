package talos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rezuscloud/rezuscloud/store"
)

// takeSnapshot reads a whole snapshot of the tenant's etcd.
func (r *rig) takeSnapshot(ctx context.Context, tenant string, secrets []byte, ms []Machine) ([]byte, SnapshotInfo) {
	r.t.Helper()
	rc, info, err := r.plane.Snapshot(ctx, tenant, secrets, ms)
	if err != nil {
		r.t.Fatal(err)
	}
	return readClose(r.t, rc), info
}

// readClose reads a stream to its end and closes it.
func readClose(t testing.TB, rc io.ReadCloser) []byte {
	t.Helper()
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// put writes a key of the etcd of machine id's cluster.
func (r *rig) put(id, key, value string) {
	r.t.Helper()
	if err := r.host.EtcdPut(id, key, []byte(value)); err != nil {
		r.t.Fatal(err)
	}
}

// get reads a key of the etcd of machine id's cluster; "" when absent.
func (r *rig) get(id, key string) string {
	r.t.Helper()
	v, ok, err := r.host.EtcdGet(id, key)
	if err != nil {
		r.t.Fatal(err)
	}
	if !ok {
		return ""
	}
	return string(v)
}

// snapshotOf returns a snapshot function for Restore that serves b and
// counts its calls.
func snapshotOf(b []byte, calls *atomic.Int32) func(context.Context) (io.ReadCloser, error) {
	return func(context.Context) (io.ReadCloser, error) {
		calls.Add(1)
		return io.NopCloser(bytes.NewReader(b)), nil
	}
}

// recoveries counts the Bootstrap calls with RecoverEtcd machine id
// accepted; bootstraps counts the others.
func (r *rig) recoveries(id string) (recoveries, bootstraps int) {
	for _, e := range r.journal(id, "Bootstrap") {
		if e.Recover {
			recoveries++
		} else {
			bootstraps++
		}
	}
	return recoveries, bootstraps
}

// stopRestoreAt cancels the context of a restore when its record reaches
// a phase, before the calls of that phase, as a server stopped there
// would. set arms it for one phase and context.
func (r *rig) stopRestoreAt() (set func(phase string, cancel context.CancelFunc)) {
	type stop struct {
		phase  string
		cancel context.CancelFunc
	}
	var armed atomic.Pointer[stop]
	r.store.OnCommit(func(cs []store.Change) {
		for _, c := range cs {
			var rec RestoreRecord
			if c.Resource.Kind != KindRestore || json.Unmarshal(c.Resource.Object, &rec) != nil {
				continue
			}
			if s := armed.Load(); s != nil && s.phase == rec.Phase {
				s.cancel()
			}
		}
	})
	return func(phase string, cancel context.CancelFunc) { armed.Store(&stop{phase, cancel}) }
}

func TestRestoreOverACluster(t *testing.T) {
	r := newRig(t)
	secrets := bundle(t, "a")
	ms := r.cluster("acme", 3, 2, renderConfig(t, "acme", secrets, "controlplane"), renderConfig(t, "acme", secrets, "worker"))
	ctx := ctxT(t)
	if _, err := r.plane.Bootstrap(ctx, "acme", secrets, ms); err != nil {
		t.Fatal(err)
	}
	r.members(ms, 3)
	r.put(ms[0].ID, "/registry/configmaps/default/a", "before")
	snap, _ := r.takeSnapshot(ctx, "acme", secrets, ms)
	r.put(ms[0].ID, "/registry/configmaps/default/a", "after")
	r.put(ms[0].ID, "/registry/configmaps/default/b", "after")

	// The snapshot taken before the restore is noted before it begins.
	if err := r.plane.NotePreSnapshot("acme", "b1", "pre-1"); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	rec, err := r.plane.Restore(ctx, "acme", secrets, ms, "b1", snapshotOf(snap, &calls))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Phase != RestoreDone || rec.Value != "b1" || rec.Machine != ms[0].ID || rec.Error != "" || rec.FinishedAt.IsZero() || rec.PreSnapshot != "pre-1" {
		t.Fatalf("record %+v, want b1 done on %s after pre-1", rec, ms[0].ID)
	}
	if err := r.plane.NotePreSnapshot("acme", "b1", "pre-2"); err != nil {
		t.Fatal(err)
	}
	// Every control plane was wiped (EPHEMERAL, not graceful, with a
	// reboot), the first bootstrapped from the snapshot, the others
	// joined; each worker's kubelet restarted, and no worker reset.
	for _, m := range ms[:3] {
		resets := r.journal(m.ID, "Reset")
		if len(resets) != 1 || resets[0].Graceful || !resets[0].Reboot {
			t.Fatalf("%s: resets %+v, want one, not graceful, with a reboot", m.ID, resets)
		}
	}
	if rec, boot := r.recoveries(ms[0].ID); rec != 1 || boot != 1 {
		t.Fatalf("%s: %d recovering and %d other bootstraps, want 1 and 1", ms[0].ID, rec, boot)
	}
	for _, m := range ms[1:] {
		if rec, boot := r.recoveries(m.ID); rec+boot != 0 {
			t.Fatalf("%s was bootstrapped", m.ID)
		}
	}
	for _, m := range ms[3:] {
		if got := r.journal(m.ID, "ServiceRestart"); len(got) != 1 || got[0].Service != "kubelet" {
			t.Fatalf("%s: ServiceRestart calls %+v, want one of kubelet", m.ID, got)
		}
		if got := r.journal(m.ID, "Reset"); len(got) != 0 {
			t.Fatalf("worker %s was reset", m.ID)
		}
	}
	r.members(ms, 3)
	if a, b := r.get(ms[1].ID, "/registry/configmaps/default/a"), r.get(ms[1].ID, "/registry/configmaps/default/b"); a != "before" || b != "" {
		t.Fatalf("after the restore a=%q b=%q, want the snapshot's a=before and no b", a, b)
	}

	// Once per value: again, and from a new plane on the same store, the
	// record comes back and nothing is called.
	journalLen := func() (n int) {
		for _, m := range ms {
			j, _ := r.host.Journal(m.ID)
			n += len(j)
		}
		return n
	}
	before := journalLen()
	stored, _, err := r.plane.Restored("acme")
	if err != nil || !stored.FinishedAt.Equal(rec.FinishedAt) {
		t.Fatalf("stored %+v, %v; want %+v", stored, err, rec)
	}
	again, err := r.newPlane(r.opts).Restore(ctx, "acme", secrets, ms, "b1", snapshotOf(snap, &calls))
	if err != nil || again != stored {
		t.Fatalf("again: %+v, %v; want %+v", again, err, stored)
	}
	if _, err := r.plane.Bootstrap(ctx, "acme", secrets, ms); err != nil {
		t.Fatal(err)
	}
	if after := journalLen(); after != before {
		t.Fatalf("%d calls after the restore was done", after-before)
	}
	boot, _, err := r.plane.Bootstrapped("acme")
	if err != nil || !boot.Done || boot.Recovery != "b1" || boot.Machine != ms[0].ID {
		t.Fatalf("bootstrap record %+v, %v: want done by the recovery of b1 on %s", boot, err, ms[0].ID)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the snapshot was opened %d times, want once", n)
	}

	if err := r.plane.Forget("acme"); err != nil {
		t.Fatal(err)
	}
	if _, found, err := r.plane.Restored("acme"); found || err != nil {
		t.Fatalf("a forgotten tenant's restore record: found %v, %v", found, err)
	}
}

func TestRestoreResumesAfterAStop(t *testing.T) {
	r := newRig(t)
	secrets := bundle(t, "a")
	ms := r.cluster("acme", 3, 1, renderConfig(t, "acme", secrets, "controlplane"), renderConfig(t, "acme", secrets, "worker"))
	ctx := ctxT(t)
	if _, err := r.plane.Bootstrap(ctx, "acme", secrets, ms); err != nil {
		t.Fatal(err)
	}
	r.members(ms, 3)
	r.put(ms[0].ID, "/registry/secrets/default/s", "kept")
	snap, _ := r.takeSnapshot(ctx, "acme", secrets, ms)
	// Every control plane loses its etcd data.
	if err := r.host.WipeEtcd(ms[0].ID); err != nil {
		t.Fatal(err)
	}
	stopAt := r.stopRestoreAt()
	var calls atomic.Int32
	restore := func(pl *Plane, phase string) (RestoreRecord, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stopAt(phase, cancel)
		return pl.Restore(ctx, "acme", secrets, ms, "b1", snapshotOf(snap, &calls))
	}

	// The server stops once the upload is recorded, before it is made.
	rec, err := restore(r.plane, RestoreRecovering)
	if !errors.Is(err, context.Canceled) || rec.Phase != RestoreRecovering {
		t.Fatalf("stopped at the upload: %+v, %v", rec, err)
	}
	// Meanwhile the bootstrap step leaves the tenant to its restore.
	if boot, err := r.newPlane(r.opts).Bootstrap(ctx, "acme", secrets, ms); err != nil || boot.Done || boot.Recovery != "b1" {
		t.Fatalf("bootstrap during the restore: %+v, %v", boot, err)
	}
	if rec, _ := r.recoveries(ms[0].ID); rec != 0 {
		t.Fatalf("%d recovering bootstraps before the upload", rec)
	}

	// A new server goes on, and stops once the cluster was bootstrapped.
	rec, err = restore(r.newPlane(r.opts), RestoreJoining)
	if !errors.Is(err, context.Canceled) || rec.Phase != RestoreJoining {
		t.Fatalf("stopped after the bootstrap: %+v, %v", rec, err)
	}
	// As a server killed between the bootstrap call and its next record
	// would have left it:
	if err := r.plane.save(KindRestore, "acme", RestoreRecord{Value: "b1", Phase: RestoreBootstrapping, Machine: ms[0].ID, StartedAt: rec.StartedAt}); err != nil {
		t.Fatal(err)
	}
	rec, err = restore(r.newPlane(r.opts), "")
	if err != nil || rec.Phase != RestoreDone {
		t.Fatalf("resumed: %+v, %v", rec, err)
	}
	for i, m := range ms {
		want := 0
		if i == 0 {
			want = 1
		}
		if rec, _ := r.recoveries(m.ID); rec != want {
			t.Fatalf("%s: %d recovering bootstraps, want %d", m.ID, rec, want)
		}
	}
	r.members(ms, 3)
	if got := r.get(ms[2].ID, "/registry/secrets/default/s"); got != "kept" {
		t.Fatalf("after the restore s=%q, want kept", got)
	}
	if got := r.journal(ms[3].ID, "ServiceRestart"); len(got) == 0 {
		t.Fatal("the worker's kubelet was not restarted")
	}
	// Nothing had data: no control plane was reset.
	for _, m := range ms {
		if got := r.journal(m.ID, "Reset"); len(got) != 0 {
			t.Fatalf("%s reset: %+v", m.ID, got)
		}
	}
}

func TestRestoreStopsAtASnapshotThatIsNotValid(t *testing.T) {
	r := newRig(t)
	secrets := bundle(t, "a")
	ms := r.cluster("acme", 2, 0, renderConfig(t, "acme", secrets, "controlplane"), nil)
	ctx := ctxT(t)
	if _, err := r.plane.Bootstrap(ctx, "acme", secrets, ms); err != nil {
		t.Fatal(err)
	}
	r.members(ms, 2)
	if err := r.host.WipeEtcd(ms[0].ID); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	rec, err := r.plane.Restore(ctx, "acme", secrets, ms, "b1", snapshotOf([]byte("not a snapshot"), &calls))
	var w *WaitingError
	if err == nil || errors.As(err, &w) || !strings.Contains(err.Error(), "refused the snapshot of b1") {
		t.Fatalf("err = %v, want the snapshot refused", err)
	}
	if rec.Phase != RestoreRecovering || rec.Error != err.Error() {
		t.Fatalf("record %+v, want stopped at recovering with the error", rec)
	}
	for _, m := range ms {
		if rec, _ := r.recoveries(m.ID); rec != 0 {
			t.Fatalf("%s bootstrapped from a snapshot that is not valid", m.ID)
		}
	}
}
