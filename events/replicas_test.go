package events

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rezuscloud/rezuscloud/notify"
	"github.com/rezuscloud/rezuscloud/reconciler/status"
)

// members is a membership the test changes.
type members struct {
	mu      sync.Mutex
	names   []string
	leading bool
	leader  string
}

func (m *members) setLeader(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.leader = name
}

func (m *members) leaderName() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leader
}

func (m *members) set(leading bool, names ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.names, m.leading = names, leading
}

func (m *members) list() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.names)
}

func (m *members) lead() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leading
}

// TestReplicaLost: the leader tells of a member whose membership ended,
// once; a replica that does not lead keeps it and tells of it when it
// becomes the leader within the window (the dead leader is the one it
// takes over from), not after; it never tells of itself.
func TestReplicaLost(t *testing.T) {
	clock := newClock()
	m := &members{}
	s := &sink{}
	m.set(true, "r1", "r2", "r3")
	w := &memberWatch{o: MembersOptions{Self: "r1", Members: m.list, Leading: m.lead, Sink: s, Window: time.Minute, Clock: clock}, seen: m.list()}
	w.look()
	expect(t, s.take())
	m.set(true, "r1", "r3")
	clock.advance(time.Second)
	w.look()
	evs := s.take()
	expect(t, evs, notify.ReplicaLost)
	if evs[0].Replica != "r2" || evs[0].Severity != notify.SeverityError || evs[0].Tenant != "" || !evs[0].Time.Equal(t0.Add(time.Second)) {
		t.Fatalf("lost:\n%s", describe(evs))
	}
	w.look()
	expect(t, s.take())

	// r3 sees r1, the leader, die; then it leads.
	w = &memberWatch{o: MembersOptions{Self: "r3", Members: m.list, Leading: m.lead, Sink: s, Window: time.Minute, Clock: clock}, seen: m.list()}
	m.set(false, "r3")
	w.look()
	expect(t, s.take())
	clock.advance(20 * time.Second)
	m.set(true, "r3")
	w.look()
	evs = s.take()
	expect(t, evs, notify.ReplicaLost)
	if evs[0].Replica != "r1" {
		t.Fatalf("lost %q, want r1", evs[0].Replica)
	}

	// Seen leaving too long before leading: not told.
	m.set(false, "r3", "r4")
	w.look()
	m.set(false, "r3")
	w.look()
	clock.advance(2 * time.Minute)
	m.set(true, "r3")
	w.look()
	expect(t, s.take())
	// r4 leaves while r5 leads and lives on: r5 tells of it, so r3 does
	// not when it leads later, after r5 died; it tells of r5.
	w = &memberWatch{o: MembersOptions{Self: "r3", Members: m.list, Leading: m.lead, Leader: m.leaderName, Sink: s, Window: time.Minute, Clock: clock}}
	m.set(false, "r3", "r4", "r5")
	m.setLeader("r5")
	w.seen = m.list()
	m.set(false, "r3", "r5")
	w.look()
	clock.advance(leaderTells)
	w.look()
	m.set(false, "r3")
	m.setLeader("")
	w.look()
	clock.advance(5 * time.Second)
	m.set(true, "r3")
	m.setLeader("r3")
	w.look()
	evs = s.take()
	expect(t, evs, notify.ReplicaLost)
	if evs[0].Replica != "r5" {
		t.Fatalf("lost %q, want only r5, the leader that told of r4", evs[0].Replica)
	}
	// Both leave at once, the leader too: r4 was not told of.
	w = &memberWatch{o: MembersOptions{Self: "r3", Members: m.list, Leading: m.lead, Leader: m.leaderName, Sink: s, Window: time.Minute, Clock: clock}}
	m.set(false, "r3", "r4", "r5")
	m.setLeader("r5")
	w.seen = m.list()
	m.set(false, "r3")
	w.look()
	clock.advance(10 * time.Second)
	m.set(true, "r3")
	m.setLeader("r3")
	w.look()
	evs = s.take()
	expect(t, evs, notify.ReplicaLost, notify.ReplicaLost)

	// Fenced itself: never told of itself.
	m.set(true)
	w.look()
	expect(t, s.take())
}

// TestWatchMembers runs the loop on the system's clock.
func TestWatchMembers(t *testing.T) {
	m := &members{}
	m.set(true, "a", "b")
	s := &sink{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	looked := make(chan struct{})
	var once sync.Once
	list := func() []string {
		defer once.Do(func() { close(looked) })
		return m.list()
	}
	go func() {
		defer close(done)
		WatchMembers(ctx, MembersOptions{Self: "a", Members: list, Leading: m.lead, Sink: s, Interval: 5 * time.Millisecond})
	}()
	<-looked
	m.set(true, "a")
	deadline := time.Now().Add(5 * time.Second)
	for s.len() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	evs := s.take()
	expect(t, evs, notify.ReplicaLost)
	if evs[0].Replica != "b" {
		t.Fatalf("lost %q", evs[0].Replica)
	}
}

// TestFallingBehindLoadsAgain: a commit whose changes go past MaxPending
// is dropped, the state is loaded again from the store and counted, and
// the changes after it are told as usual.
func TestFallingBehindLoadsAgain(t *testing.T) {
	clock := newClock()
	st := openStore(t, t.TempDir(), clock)
	s := &sink{}
	reg := prometheus.NewRegistry()
	d, err := New(Options{Store: st, Sink: s, Clock: clock, MaxPending: 2, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, st: st, clock: clock, sink: s, d: d}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	r.sync()
	r.outcome(status.Applying(revA, 1), 1)
	r.outcome(retrying(1, "boom", t0.Add(time.Minute), 1), 1)
	expect(t, r.events(), notify.ReconcileFailed)
	if n := counter(t, reg, "rezuscloud_events_resyncs_total", ""); n != 0 {
		t.Fatalf("resyncs %v before any overflow", n)
	}

	// The tenant and its three machines in one commit: past MaxPending.
	r.record(func(rec status.Recorder) error {
		return rec.Applied(status.Apply{Desired: desired(), Revision: revA, Generation: 1, Machines: alphaMachines()})
	})
	r.waitFor("a resync", func() bool { return counter(t, reg, "rezuscloud_events_resyncs_total", "") == 1 })
	expect(t, r.events())
	r.outcome(retrying(1, "boom", t0.Add(2*time.Minute), 2), 2)
	expect(t, r.events(), notify.ReconcileFailed)
	if got := counter(t, reg, "rezuscloud_events_derived_total", string(notify.ReconcileFailed)); got != 2 {
		t.Fatalf("derived ReconcileFailed %v, want 2", got)
	}
}

// counter is the value of the counter name in reg, of the series whose
// one label has the value label ("" for a counter without labels).
func counter(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if lp := m.GetLabel(); (label == "" && len(lp) == 0) || (len(lp) == 1 && lp[0].GetValue() == label) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
