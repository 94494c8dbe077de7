package reconciler

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"time"
)

// Job is one unit of queued work for one key (a tenant).
type Job interface {
	// Run does the work. ctx ends when the queue's shutdown grace period
	// is over; a run should then stop as cleanly as it can.
	Run(ctx context.Context)
	// Superseded is called instead of Run when a newer job for the same
	// key replaced this one before it started.
	Superseded(by Job)
}

// A preemptible job is told, while it runs, of each job that Enqueue adds
// for its key behind it, so that it may end a wait sooner for it.
type preemptible interface {
	Preempt(by Job)
}

// An offloaded job runs elsewhere (on another replica) and only waits
// here: it does not take one of the queue's workers while it waits, and
// it leaves the queue while every worker is busy. Elsewhere says, taking
// nothing, whether the job would run elsewhere now; Offloaded decides,
// once, as the job leaves the queue. The key stays busy until its Run
// returns.
type offloaded interface {
	Elsewhere() bool
	Offloaded() bool
}

// DefaultShutdownGrace is the default of Options.ShutdownGrace and
// QueueOptions.Grace.
const DefaultShutdownGrace = 5 * time.Minute

// DefaultWorkers is the default of Options.Workers and
// QueueOptions.Workers: one tenant run per core the process may use
// (GOMAXPROCS, which follows the CPU limit of a container), since a tofu
// run keeps about one core busy.
func DefaultWorkers() int { return max(1, runtime.GOMAXPROCS(0)) }

// QueueOptions configure a Queue.
type QueueOptions struct {
	// Workers is how many keys run here at once; offloaded jobs, which
	// only wait here, do not count. Default DefaultWorkers.
	Workers int
	// Debounce is how long a key stays quiet before its newest job runs,
	// so that bursts of revisions coalesce into one run. Default 0.
	Debounce time.Duration
	// Grace is how long Stop waits for running jobs before it cancels
	// their context. Default DefaultShutdownGrace.
	Grace time.Duration
}

// Queue runs jobs keyed by tenant: at most one job per key at a time (serial
// within a tenant), up to Workers keys at once (parallel across tenants),
// and only the newest pending job of a key (a newer one replaces an older
// one that has not started; one that arrives during a run runs next).
type Queue struct {
	opts QueueOptions

	mu      sync.Mutex
	cond    *sync.Cond
	pending map[string]*entry
	order   []string // keys with a pending job, oldest first
	running map[string]Job
	local   int // running jobs that run here, not offloaded
	stopped bool

	runCtx    context.Context
	cancelRun context.CancelFunc
	// stopping ends when Stop begins, before the grace period: for jobs
	// that only wait on another replica, with nothing of their own to save.
	stopping context.Context
	stop     context.CancelFunc
	wg       sync.WaitGroup
	started  bool
}

type entry struct {
	job     Job
	readyAt time.Time
}

// NewQueue returns a queue; Start starts its workers.
func NewQueue(opts QueueOptions) *Queue {
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers()
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultShutdownGrace
	}
	q := &Queue{opts: opts, pending: map[string]*entry{}, running: map[string]Job{}}
	q.cond = sync.NewCond(&q.mu)
	q.runCtx, q.cancelRun = context.WithCancel(context.Background())
	q.stopping, q.stop = context.WithCancel(context.Background())
	return q
}

// Start launches the queue.
func (q *Queue) Start() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.started {
		return
	}
	q.started = true
	q.wg.Add(1)
	go q.dispatch()
}

// Enqueue adds job for key. A job of key that has not started yet is
// superseded by this one.
func (q *Queue) Enqueue(key string, job Job) {
	q.mu.Lock()
	if q.stopped {
		q.mu.Unlock()
		job.Superseded(nil)
		return
	}
	old := q.pending[key]
	if old == nil {
		q.order = append(q.order, key)
	}
	q.pending[key] = &entry{job: job, readyAt: time.Now().Add(q.opts.Debounce)}
	q.cond.Broadcast()
	running := q.running[key]
	q.mu.Unlock()
	if old != nil {
		old.job.Superseded(job)
	}
	if p, ok := running.(preemptible); ok {
		p.Preempt(job)
	}
}

// Retry adds job for key to run after delay, unless a job of key is
// pending already (a newer one, which goes first and takes the retry's
// place) or the queue has stopped; it reports whether it added job. A job
// that Enqueue adds for key later supersedes the retry.
func (q *Queue) Retry(key string, job Job, delay time.Duration) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped || q.pending[key] != nil {
		return false
	}
	q.order = append(q.order, key)
	q.pending[key] = &entry{job: job, readyAt: time.Now().Add(delay)}
	q.cond.Broadcast()
	return true
}

// job returns key's running job, else its pending one, else nil.
func (q *Queue) job(key string) Job {
	q.mu.Lock()
	defer q.mu.Unlock()
	if j := q.running[key]; j != nil {
		return j
	}
	if e := q.pending[key]; e != nil {
		return e.job
	}
	return nil
}

// Depth returns how many jobs wait to run.
func (q *Queue) Depth() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// Running returns how many jobs run now.
func (q *Queue) Running() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.running)
}

// Wake has the queue look again at which of its jobs would run
// elsewhere: a change of the replicas or of the shards they hold.
func (q *Queue) Wake() {
	q.mu.Lock()
	q.cond.Broadcast()
	q.mu.Unlock()
}

// next blocks until a job may run, and returns it with its key: the
// oldest ready job while a worker is free, else the oldest ready one
// that would run elsewhere. ok is false once the queue stops.
func (q *Queue) next() (string, Job, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if q.stopped {
			return "", nil, false
		}
		now := time.Now()
		var wake time.Time
		full := q.local >= q.opts.Workers
		for i, key := range q.order {
			if q.running[key] != nil {
				continue
			}
			e := q.pending[key]
			if e.readyAt.After(now) {
				if wake.IsZero() || e.readyAt.Before(wake) {
					wake = e.readyAt
				}
				continue
			}
			if o, ok := e.job.(offloaded); full && (!ok || !o.Elsewhere()) {
				continue
			}
			q.order = slices.Delete(q.order, i, i+1)
			delete(q.pending, key)
			q.running[key] = e.job
			return key, e.job, true
		}
		if !wake.IsZero() {
			t := time.AfterFunc(time.Until(wake), func() {
				q.mu.Lock()
				q.cond.Broadcast()
				q.mu.Unlock()
			})
			q.cond.Wait()
			t.Stop()
			continue
		}
		q.cond.Wait()
	}
}

// dispatch starts each job as it leaves the queue: an offloaded one at
// once, one that runs here once a worker is free. A job taken to run
// elsewhere whose tenant came to this replica the instant it left runs
// here beside the workers.
func (q *Queue) dispatch() {
	defer q.wg.Done()
	for {
		key, job, ok := q.next()
		if !ok {
			return
		}
		local := true
		if o, ok := job.(offloaded); ok && o.Offloaded() {
			local = false
		}
		if local {
			q.mu.Lock()
			q.local++
			q.mu.Unlock()
		}
		q.wg.Go(func() { q.run(key, job, local) })
	}
}

// run runs key's job and marks key free, and a worker too when the job
// ran here.
func (q *Queue) run(key string, job Job, local bool) {
	job.Run(q.runCtx)
	q.mu.Lock()
	delete(q.running, key)
	if local {
		q.local--
	}
	q.cond.Broadcast()
	q.mu.Unlock()
}

// Stop stops starting jobs, supersedes the pending ones, and waits for the
// running ones: up to the grace period, after which their context is
// cancelled (tofu gets SIGINT, saves its state and releases its lock) and
// Stop waits for them to return.
func (q *Queue) Stop() {
	q.mu.Lock()
	if q.stopped {
		q.mu.Unlock()
		q.wg.Wait()
		return
	}
	q.stopped = true
	q.stop()
	pending := q.pending
	q.pending, q.order = map[string]*entry{}, nil
	q.cond.Broadcast()
	q.mu.Unlock()
	for _, e := range pending {
		e.job.Superseded(nil)
	}
	done := make(chan struct{})
	go func() { q.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(q.opts.Grace):
		q.cancelRun()
		<-done
	}
	q.cancelRun()
}

// busy reports whether a job of key waits or runs.
func (q *Queue) busy(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pending[key] != nil || q.running[key] != nil
}
