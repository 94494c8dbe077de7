package events

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/notify"
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// probe records what a probe of machine id found at the rig's time.
func (r *rig) probe(id string, p status.Probe) {
	r.t.Helper()
	p.At = r.clock.Now()
	r.record(func(rec status.Recorder) error {
		_, err := rec.MachineObserved(id, p)
		return err
	})
}

var (
	down = status.Probe{Connected: false, Error: "dial tcp 10.0.0.2:50000: connection refused"}
	up   = status.Probe{Connected: true, Stage: schema.StageReady, Ready: true}
)

// touch writes something unrelated, so that the deriver runs once more.
func (r *rig) touch() {
	r.t.Helper()
	if err := r.st.Update(func(tx store.Tx) error { _, err := tx.Put("TestNote", "n", []byte(r.clock.Now().String())); return err }); err != nil {
		r.t.Fatal(err)
	}
	r.sync()
}

// TestMachineNotReady: a machine not ready for longer than the threshold
// is told once per time it is not ready, on the injected clock; one that
// is ready again in time is not; a restart does not tell again of one that
// was due before it.
func TestMachineNotReady(t *testing.T) {
	r := newRig(t)
	r.applied(revA, "Create alpha", 1)
	r.probe("alpha-w-0", down)
	r.clock.advance(4 * time.Minute)
	r.touch()
	expect(t, r.events())
	r.clock.advance(time.Minute)
	r.waitFor("MachineNotReady", func() bool { return r.sink.len() > 0 })
	r.touch()
	evs := r.events()
	expect(t, evs, notify.MachineNotReady)
	ev := evs[0]
	if ev.Tenant != "alpha" || ev.Machine != "alpha-w-0" || ev.Severity != notify.SeverityError || ev.Commit.SHA != revA ||
		ev.URL != "https://rezus.example/tenants/alpha" || !ev.Time.Equal(t0.Add(5*time.Minute)) {
		t.Fatalf("not ready:\n%s", describe(evs))
	}
	for _, s := range []string{"5m0s", "node group w", "connection refused"} {
		if !strings.Contains(ev.Message, s) {
			t.Errorf("message %q lacks %q", ev.Message, s)
		}
	}
	r.clock.advance(time.Hour)
	r.touch()
	expect(t, r.events())

	// Ready again in time: nothing. Then not ready for long again.
	r.probe("alpha-w-0", up)
	r.probe("alpha-w-0", down)
	r.clock.advance(3 * time.Minute)
	r.probe("alpha-w-0", up)
	r.clock.advance(3 * time.Minute)
	r.touch()
	expect(t, r.events())
	r.probe("alpha-w-0", down)
	r.probe("alpha-w-1", down)
	r.clock.advance(6 * time.Minute)
	r.waitFor("two MachineNotReady", func() bool { return r.sink.len() >= 2 })
	r.touch()
	evs = r.events()
	expect(t, evs, notify.MachineNotReady, notify.MachineNotReady)
	if evs[0].Machine != "alpha-w-0" || evs[1].Machine != "alpha-w-1" {
		t.Fatalf("machines:\n%s", describe(evs))
	}

	// Both are still down at a restart: told before, not again. One
	// that went down shortly before it is told when its time is up.
	r.probe("alpha-cp-0", down)
	r.clock.advance(time.Minute)
	r.restart()
	r.clock.advance(time.Hour)
	r.waitFor("MachineNotReady of alpha-cp-0", func() bool { return r.sink.len() > 0 })
	r.touch()
	evs = r.events()
	expect(t, evs, notify.MachineNotReady)
	if evs[0].Machine != "alpha-cp-0" {
		t.Fatalf("after the restart:\n%s", describe(evs))
	}
}

// TestMachineOfRemovedTenant: the machines of a tenant that is being
// destroyed are not told of.
func TestMachineOfRemovedTenant(t *testing.T) {
	r := newRig(t)
	r.applied(revA, "Create alpha", 1)
	r.record(func(rec status.Recorder) error { return rec.Removing("alpha", 2) })
	r.probe("alpha-w-0", down)
	r.clock.advance(time.Hour)
	r.touch()
	expect(t, r.events())
}

// TestMachineNotReadyAcrossDowntime: a machine that went down shortly
// before the server stopped, and whose time was up while no server ran,
// is told of once the server runs again; one told of before the stop is
// not told of again; and the records of what was told go with the
// machines' readiness.
func TestMachineNotReadyAcrossDowntime(t *testing.T) {
	r := newRig(t)
	r.applied(revA, "Create alpha", 1)
	r.probe("alpha-w-0", down)
	r.clock.advance(6 * time.Minute)
	r.waitFor("MachineNotReady of alpha-w-0", func() bool { return r.sink.len() > 0 })
	r.touch()
	expect(t, r.events(), notify.MachineNotReady)
	if !r.toldRecorded("alpha-w-0") {
		t.Fatal("MachineNotReady of alpha-w-0 was told, and not recorded in the store")
	}

	r.probe("alpha-w-1", down)
	r.clock.advance(time.Minute)
	r.stop() // the server is down for ten minutes
	r.clock.advance(10 * time.Minute)
	r.start()
	r.waitFor("MachineNotReady of alpha-w-1", func() bool { return r.sink.len() > 0 })
	r.touch()
	evs := r.events()
	expect(t, evs, notify.MachineNotReady)
	if evs[0].Machine != "alpha-w-1" {
		t.Fatalf("after the downtime, want alpha-w-1 told of, alpha-w-0 not again:\n%s", describe(evs))
	}

	// Ready again: the record goes; one ready while no server ran is
	// forgotten at the next start.
	r.probe("alpha-w-0", up)
	if r.toldRecorded("alpha-w-0") {
		t.Error("alpha-w-0 is ready again, and still recorded as told")
	}
	r.stop()
	ready := up
	ready.At = r.clock.Now()
	if err := r.st.Update(func(tx store.Tx) error {
		_, err := status.Record(tx, r.clock.Now()).MachineObserved("alpha-w-1", ready)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	r.start()
	r.touch()
	if r.toldRecorded("alpha-w-1") {
		t.Error("alpha-w-1, ready while no server ran, is still recorded as told")
	}
	expect(t, r.events())
}

// toldRecorded reports whether the store records that MachineNotReady
// was told of machine id.
func (r *rig) toldRecorded(id string) bool {
	r.t.Helper()
	var b []byte
	if err := r.st.View(func(tx store.Tx) error {
		var err error
		if b, err = tx.Series(toldPrefix + id); errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return err
	}); err != nil {
		r.t.Fatal(err)
	}
	return b != nil
}
