package events

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/notify"
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
	"github.com/rezuscloud/rezuscloud/store/storetest"
)

// t0 is when the tests' clocks start.
var t0 = time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)

// sink records the events it gets.
type sink struct {
	mu  sync.Mutex
	evs []notify.Event
}

func (s *sink) Notify(ev notify.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evs = append(s.evs, ev)
}

// take returns the events got since the last take.
func (s *sink) take() []notify.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.evs
	s.evs = nil
	return out
}

func (s *sink) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.evs)
}

// fakeClock is a Clock that moves only when the test moves it.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

func newClock() *fakeClock { return &fakeClock{now: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{at: c.now.Add(d), ch: ch})
	return ch
}

// advance moves the clock by d and fires what is due.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = kept
}

// rig is a store, a deriver of it running, its sink and its clock.
type rig struct {
	t     *testing.T
	st    store.Store
	clock *fakeClock
	sink  *sink
	d     *Deriver
	stop  func()
}

// openStore opens a store in dir whose stamps are clock's.
func openStore(t *testing.T, dir string, clock *fakeClock) store.Store {
	t.Helper()
	st, err := bolt.Open(dir, &bolt.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// newRig opens a store in a new directory and runs a deriver of it.
func newRig(t *testing.T) *rig {
	t.Helper()
	clock := newClock()
	r := &rig{t: t, st: openStore(t, t.TempDir(), clock), clock: clock}
	r.start()
	return r
}

// start runs a new deriver of the rig's store, with a new sink: as a
// restarted server would.
func (r *rig) start() {
	r.t.Helper()
	r.sink = &sink{}
	d, err := New(Options{Store: r.st, Sink: r.sink, ExternalURL: "https://rezus.example/", Clock: r.clock})
	if err != nil {
		r.t.Fatal(err)
	}
	r.d = d
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	r.stop = func() { cancel(); <-done }
	r.t.Cleanup(r.stop)
	r.sync()
}

// restart stops the deriver and runs a new one.
func (r *rig) restart() {
	r.stop()
	r.start()
}

// sync waits until the deriver has derived every change the store holds.
func (r *rig) sync() {
	r.t.Helper()
	var rv uint64
	_ = r.st.View(func(tx store.Tx) error { rv = tx.ResourceVersion(); return nil })
	r.waitFor(fmt.Sprintf("the deriver to reach revision %d", rv), func() bool { return r.d.done.Load() >= rv })
}

func (r *rig) waitFor(what string, ok func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// record writes what fn records, at the rig's time, and waits until the
// deriver has derived it.
func (r *rig) record(fn func(status.Recorder) error) {
	r.t.Helper()
	err := r.st.Update(func(tx store.Tx) error { return fn(status.Record(tx, r.clock.Now())) })
	if err != nil {
		r.t.Fatal(err)
	}
	r.sync()
}

// putCommit stores a commit record and waits until it is derived.
func (r *rig) putCommit(c *schema.Commit) {
	r.t.Helper()
	err := r.st.Update(func(tx store.Tx) error {
		_, err := tx.PutObject(schema.KindCommit, c.Metadata.Name, c)
		return err
	})
	if err != nil {
		r.t.Fatal(err)
	}
	r.sync()
}

// events returns what the deriver sent since the last call.
func (r *rig) events() []notify.Event { return r.sink.take() }

// expect fails unless evs are, in order, events of the reasons given.
func expect(t *testing.T, evs []notify.Event, reasons ...notify.Reason) {
	t.Helper()
	var got []notify.Reason
	for _, ev := range evs {
		got = append(got, ev.Reason)
	}
	if fmt.Sprint(got) != fmt.Sprint(reasons) {
		t.Fatalf("events %v, want %v:\n%s", got, reasons, describe(evs))
	}
}

func describe(evs []notify.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "  %s %s tenant=%s machine=%s commit=%s %q: %s\n", ev.Reason, ev.Severity, ev.Tenant, ev.Machine, ev.Commit.Short(), ev.Commit.Subject, ev.Message)
	}
	return b.String()
}

// Revisions of the tests' commits.
const (
	revA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	revB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	revC = "cccccccccccccccccccccccccccccccccccccccc"
)

// commit is the record of revision rev, received at at, with the results
// given.
func commit(rev, msg string, at time.Time, phase schema.CommitPhase, results ...schema.TenantResult) *schema.Commit {
	return &schema.Commit{APIVersion: schema.APIVersion, Kind: schema.KindCommit,
		Metadata: schema.ObjectMeta{Name: schema.CommitName(rev)},
		Spec:     schema.CommitSpec{SHA: rev, Ref: "refs/heads/main", Message: msg},
		Status:   schema.CommitStatus{Phase: phase, Tenants: results, Timings: schema.Timings{ReceivedAt: at}}}
}

// desired is tenant alpha's manifests (label env=prod): one control plane
// and two workers.
func desired() *schema.TenantDesired {
	tn := storetest.Tenant("alpha", "prod", 1)
	tn.Status = schema.TenantStatus{}
	return &schema.TenantDesired{Tenant: tn, NodeGroups: []*schema.NodeGroup{
		storetest.NodeGroup("alpha", "cp", schema.RoleControlPlane, 1, 2),
		storetest.NodeGroup("alpha", "w", schema.RoleWorker, 2, 3),
	}}
}

// alphaMachines are the machines of desired, ready.
func alphaMachines() []*schema.Machine {
	return []*schema.Machine{
		storetest.Machine("alpha-cp-0", "alpha", "cp", schema.RoleControlPlane, "small", 1),
		storetest.Machine("alpha-w-0", "alpha", "w", schema.RoleWorker, "small", 2),
		storetest.Machine("alpha-w-1", "alpha", "w", schema.RoleWorker, "small", 3),
	}
}

// applied brings tenant alpha to revision rev applied, its machines ready:
// the commit record names it pending, the run applies it.
func (r *rig) applied(rev, msg string, gen int64) {
	r.t.Helper()
	at := r.clock.Now()
	r.putCommit(commit(rev, msg, at, schema.CommitApplying, schema.TenantResult{Tenant: "alpha", Phase: schema.CommitPending}))
	r.outcome(status.Applying(rev, gen), gen)
	r.record(func(rec status.Recorder) error {
		return rec.Applied(status.Apply{Desired: desired(), Revision: rev, Generation: gen, Machines: alphaMachines()})
	})
	r.putCommit(commit(rev, msg, at, schema.CommitSucceeded, schema.TenantResult{Tenant: "alpha", Phase: schema.CommitSucceeded,
		Plan: schema.PlanSummary{Add: 4}, StartedAt: at, FinishedAt: at.Add(time.Minute)}))
}

// outcome records an outcome of a run of tenant alpha.
func (r *rig) outcome(o status.Outcome, gen int64) {
	r.t.Helper()
	r.record(func(rec status.Recorder) error {
		return rec.Outcome("alpha", desired().Tenant, gen, func(schema.TenantStatus) status.Outcome { return o })
	})
}
