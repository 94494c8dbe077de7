package reconciler

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/sources"
)

// probeJob records when it runs, and can be held until released.
type probeJob struct {
	key, rev   string
	log        *eventLog
	hold       chan struct{}
	superseded atomic.Bool
	ran        atomic.Bool
}

type eventLog struct {
	mu      sync.Mutex
	events  []string
	running map[string]int
	maxPar  int
	overlap bool
}

func newEventLog() *eventLog { return &eventLog{running: map[string]int{}} }

func (l *eventLog) add(e string) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func (l *eventLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

func (j *probeJob) Run(ctx context.Context) {
	l := j.log
	l.mu.Lock()
	l.running[j.key]++
	if l.running[j.key] > 1 {
		l.overlap = true
	}
	total := 0
	for _, n := range l.running {
		total += n
	}
	if total > l.maxPar {
		l.maxPar = total
	}
	l.events = append(l.events, "start "+j.key+" "+j.rev)
	l.mu.Unlock()
	if j.hold != nil {
		select {
		case <-j.hold:
		case <-ctx.Done():
			l.add("interrupted " + j.key)
		}
	}
	j.ran.Store(true)
	l.mu.Lock()
	l.running[j.key]--
	l.events = append(l.events, "end "+j.key+" "+j.rev)
	l.mu.Unlock()
}

func (j *probeJob) Superseded(Job) { j.superseded.Store(true) }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestQueueCoalescesBursts(t *testing.T) {
	log := newEventLog()
	q := NewQueue(QueueOptions{Workers: 2, Debounce: 200 * time.Millisecond})
	q.Start()
	defer q.Stop()
	var jobs []*probeJob
	for i := 0; i < 10; i++ {
		j := &probeJob{key: "production", rev: string(rune('a' + i)), log: log}
		jobs = append(jobs, j)
		q.Enqueue("production", j)
		time.Sleep(20 * time.Millisecond) // ten revisions within a fraction of a second
	}
	waitFor(t, "the newest job", jobs[9].ran.Load)
	time.Sleep(300 * time.Millisecond)
	if got := log.snapshot(); len(got) != 2 || got[0] != "start production j" {
		t.Fatalf("events %v, want exactly one run of the newest revision j", got)
	}
	for i, j := range jobs[:9] {
		if !j.superseded.Load() || j.ran.Load() {
			t.Errorf("job %d: superseded=%v ran=%v, want superseded and not run", i, j.superseded.Load(), j.ran.Load())
		}
	}
}

func TestQueueParallelAcrossTenantsSerialWithin(t *testing.T) {
	log := newEventLog()
	q := NewQueue(QueueOptions{Workers: 2})
	q.Start()
	defer q.Stop()
	hold := make(chan struct{})
	a := &probeJob{key: "a", rev: "1", log: log, hold: hold}
	b := &probeJob{key: "b", rev: "1", log: log, hold: hold}
	c := &probeJob{key: "c", rev: "1", log: log, hold: hold}
	q.Enqueue("a", a)
	q.Enqueue("b", b)
	q.Enqueue("c", c)
	waitFor(t, "two tenants running", func() bool { return q.Running() == 2 })
	time.Sleep(50 * time.Millisecond)
	if q.Running() != 2 || q.Depth() != 1 || c.ran.Load() {
		t.Fatalf("running %d depth %d: the third tenant must wait for a worker", q.Running(), q.Depth())
	}
	// A newer revision of a running tenant waits for that run, then runs.
	a2 := &probeJob{key: "a", rev: "2", log: log}
	q.Enqueue("a", a2)
	close(hold)
	waitFor(t, "all jobs", func() bool { return a2.ran.Load() && c.ran.Load() && b.ran.Load() })
	if log.overlap {
		t.Error("two runs of one tenant overlapped")
	}
	if log.maxPar > 2 {
		t.Errorf("%d runs at once, want at most 2 workers", log.maxPar)
	}
	ev := log.snapshot()
	endA1, startA2 := -1, -1
	for i, e := range ev {
		switch e {
		case "end a 1":
			endA1 = i
		case "start a 2":
			startA2 = i
		}
	}
	if endA1 < 0 || startA2 < endA1 {
		t.Errorf("events %v: revision 2 of a must start after revision 1 ends", ev)
	}
}

// TestQueueDefaultWorkers checks that a queue without Workers runs one key
// per core the process may use (GOMAXPROCS), and no more.
func TestQueueDefaultWorkers(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	if got := DefaultWorkers(); got != 3 {
		t.Fatalf("DefaultWorkers() = %d with GOMAXPROCS 3, want 3", got)
	}
	log := newEventLog()
	q := NewQueue(QueueOptions{})
	q.Start()
	defer q.Stop()
	hold := make(chan struct{})
	defer close(hold)
	for i := range 5 {
		key := fmt.Sprintf("t%d", i)
		q.Enqueue(key, &probeJob{key: key, rev: "1", log: log, hold: hold})
	}
	waitFor(t, "three tenants running", func() bool { return q.Running() == 3 })
	time.Sleep(50 * time.Millisecond)
	if q.Running() != 3 || q.Depth() != 2 {
		t.Fatalf("running %d, waiting %d; want 3 running (one per core) and 2 waiting", q.Running(), q.Depth())
	}
}

func TestQueueStopWaitsThenInterrupts(t *testing.T) {
	log := newEventLog()
	q := NewQueue(QueueOptions{Workers: 1, Grace: 200 * time.Millisecond})
	q.Start()
	running := &probeJob{key: "a", rev: "1", log: log, hold: make(chan struct{})}
	pending := &probeJob{key: "b", rev: "1", log: log}
	q.Enqueue("a", running)
	waitFor(t, "a running", func() bool { return q.Running() == 1 })
	q.Enqueue("b", pending)
	start := time.Now()
	q.Stop()
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("Stop returned after %v, before the grace period", d)
	}
	ev := log.snapshot()
	if len(ev) != 3 || ev[1] != "interrupted a" {
		t.Errorf("events %v, want the running job interrupted after the grace period", ev)
	}
	if !pending.superseded.Load() || pending.ran.Load() {
		t.Error("a pending job ran after Stop")
	}
}

// TestQueueRetry: a retry runs after its delay; a newer job supersedes a
// pending retry and runs at once; a retry never takes the place of a
// pending job.
func TestQueueRetry(t *testing.T) {
	log := newEventLog()
	q := NewQueue(QueueOptions{Workers: 1})
	q.Start()
	defer q.Stop()

	r1 := &probeJob{key: "a", rev: "retry1", log: log}
	start := time.Now()
	if !q.Retry("a", r1, 200*time.Millisecond) {
		t.Fatal("Retry refused with nothing pending")
	}
	waitFor(t, "the retry", r1.ran.Load)
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("the retry ran after %v, before its delay", d)
	}

	r2 := &probeJob{key: "a", rev: "retry2", log: log}
	q.Retry("a", r2, time.Hour)
	newer := &probeJob{key: "a", rev: "new", log: log}
	q.Enqueue("a", newer)
	waitFor(t, "the newer job", newer.ran.Load)
	if !r2.superseded.Load() || r2.ran.Load() {
		t.Errorf("pending retry: superseded=%v ran=%v, want superseded by the newer job", r2.superseded.Load(), r2.ran.Load())
	}

	hold := make(chan struct{})
	busy := &probeJob{key: "b", rev: "1", log: log, hold: hold}
	q.Enqueue("b", busy)
	waitFor(t, "b running", func() bool { return q.Running() == 1 })
	pending := &probeJob{key: "a", rev: "pending", log: log}
	q.Enqueue("a", pending)
	if q.Retry("a", &probeJob{key: "a", rev: "retry3", log: log}, 0) {
		t.Error("Retry took the place of a pending job")
	}
	close(hold)
	waitFor(t, "the pending job", pending.ran.Load)
	if pending.superseded.Load() {
		t.Error("the pending job was superseded by a retry")
	}
}

// preemptJob is a probeJob that ends its hold when it is preempted.
type preemptJob struct {
	*probeJob
	by chan Job
}

func (j *preemptJob) Preempt(by Job) { j.by <- by }

// TestEnqueuePreemptsTheRunningJob: a job enqueued for a key whose job
// runs is told to that running job (Preempt), which may end its wait for
// it; a job pending behind it is superseded as before, and the running
// one is not; jobs of other keys are not told.
func TestEnqueuePreemptsTheRunningJob(t *testing.T) {
	l := newEventLog()
	q := NewQueue(QueueOptions{Workers: 2})
	q.Start()
	defer q.Stop()
	running := &preemptJob{probeJob: &probeJob{key: "a", rev: "r1", log: l, hold: make(chan struct{})}, by: make(chan Job, 4)}
	other := &preemptJob{probeJob: &probeJob{key: "b", rev: "r1", log: l, hold: make(chan struct{})}, by: make(chan Job, 4)}
	q.Enqueue("a", running)
	q.Enqueue("b", other)
	waitFor(t, "both to run", func() bool { return q.Running() == 2 })

	second := &probeJob{key: "a", rev: "r2", log: l}
	q.Enqueue("a", second)
	select {
	case by := <-running.by:
		if by != second {
			t.Fatalf("preempted by %v, want the job of r2", by)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the running job of a was not told of r2")
	}
	third := &probeJob{key: "a", rev: "r3", log: l}
	q.Enqueue("a", third)
	if by := <-running.by; by != third {
		t.Fatalf("preempted by %v, want the job of r3", by)
	}
	if !second.superseded.Load() || running.superseded.Load() {
		t.Fatalf("superseded: r2 %v (want true), the running r1 %v (want false)", second.superseded.Load(), running.superseded.Load())
	}
	select {
	case by := <-other.by:
		t.Fatalf("the job of b was told of %v", by)
	default:
	}
	close(running.hold)
	close(other.hold)
	waitFor(t, "r3 to run after r1", func() bool { return third.ran.Load() })
}

// TestTenantJobNewerRevision: a tenant job's newerRevision closes when a
// job of another revision preempts it, before or after it was asked for,
// and not for a retry or drift correction of its own revision.
func TestTenantJobNewerRevision(t *testing.T) {
	runOf := func(rev string) *CommitRun { return &CommitRun{snap: sources.Snapshot{Revision: rev}} }
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	j := &tenantJob{run: runOf("r1"), tenant: "acme"}
	newer := j.newerRevision()
	j.Preempt(&tenantJob{run: runOf("r1"), tenant: "acme", attempt: 1})
	j.Preempt(&tenantJob{run: runOf("r1"), tenant: "acme", correct: true})
	if closed(newer) {
		t.Fatal("closed by a job of the same revision")
	}
	j.Preempt(&tenantJob{run: runOf("r2"), tenant: "acme"})
	j.Preempt(&tenantJob{run: runOf("r3"), tenant: "acme"}) // twice: no second close
	if !closed(newer) {
		t.Fatal("not closed by a job of r2")
	}
	early := &tenantJob{run: runOf("r1"), tenant: "acme"}
	early.Preempt(&tenantJob{run: runOf("r2"), tenant: "acme"})
	if !closed(early.newerRevision()) {
		t.Fatal("not closed when preempted before it was asked for")
	}
}

// awayJob is a probeJob whose tenant another replica owns while away is
// set: it is then offloaded.
type awayJob struct {
	probeJob
	away atomic.Bool
}

func (j *awayJob) Elsewhere() bool { return j.away.Load() }
func (j *awayJob) Offloaded() bool { return j.away.Load() }

// TestQueueOffloadsWhileWorkersAreBusy: a job that runs on another
// replica leaves the queue while every worker runs a job here, also one
// whose tenant moved away while it waited (Wake), and the jobs that run
// here still wait for a worker.
func TestQueueOffloadsWhileWorkersAreBusy(t *testing.T) {
	log := newEventLog()
	q := NewQueue(QueueOptions{Workers: 1})
	q.Start()
	defer q.Stop()
	holdA, holdAway := make(chan struct{}), make(chan struct{})
	defer close(holdAway)
	jobs := map[string]*awayJob{}
	for _, key := range []string{"a", "b", "c", "d"} {
		j := &awayJob{probeJob: probeJob{key: key, rev: "1", log: log, hold: holdAway}}
		if key == "a" {
			j.hold = holdA
		}
		j.away.Store(key == "c")
		jobs[key] = j
		q.Enqueue(key, j)
	}
	waitFor(t, "a here and c elsewhere running", func() bool { return q.Running() == 2 })
	time.Sleep(50 * time.Millisecond)
	if q.Running() != 2 || q.Depth() != 2 {
		t.Fatalf("running %d, waiting %d; want a and c running, b and d waiting: %v", q.Running(), q.Depth(), log.snapshot())
	}
	jobs["d"].away.Store(true)
	q.Wake()
	waitFor(t, "d, moved away, running", func() bool { return q.Running() == 3 })
	if q.Depth() != 1 {
		t.Fatalf("waiting %d, want b alone: %v", q.Depth(), log.snapshot())
	}
	close(holdA)
	waitFor(t, "b running once a ended", func() bool { return q.Depth() == 0 })
	events := log.snapshot()
	if ia, ib := slices.Index(events, "end a 1"), slices.Index(events, "start b 1"); ia < 0 || ib < ia {
		t.Fatalf("b started before a ended with one worker: %v", events)
	}
}
