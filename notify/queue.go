package notify

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// key is what makes two events the same for coalescing: the reason, the
// tenant and the machine (or replica).
type key struct {
	reason          Reason
	tenant, subject string
}

// family groups the events that tell the state of one thing: a tenant's
// reconcile (ReconcileFailed, Stalled, Recovered), its drift, its rollout,
// its backups, one machine's readiness, one replica. A message about a
// family is never overtaken by a later one about it.
type family struct {
	name, tenant, subject string
}

// families names the family of each reason, and resolves the reasons a
// recovery ends (PagerDuty's resolve, Opsgenie's close, Alertmanager's
// endsAt).
var families = map[Reason]struct {
	name     string
	resolves []Reason
}{
	ReconcileFailed:  {name: "reconcile"},
	Stalled:          {name: "reconcile"},
	Recovered:        {name: "reconcile", resolves: []Reason{ReconcileFailed, Stalled}},
	Drifted:          {name: "drift"},
	DriftResolved:    {name: "drift", resolves: []Reason{Drifted}},
	RolloutStarted:   {name: "rollout"},
	RolloutFailed:    {name: "rollout"},
	RolloutSucceeded: {name: "rollout", resolves: []Reason{RolloutStarted, RolloutFailed}},
	BackupFailed:     {name: "backup"},
	BackupRecovered:  {name: "backup", resolves: []Reason{BackupFailed}},
	BootstrapDone:    {name: "bootstrap"},
	CommitRefused:    {name: "commit"},
	MachineNotReady:  {name: "machine"},
	ReplicaLost:      {name: "replica"},
	Test:             {name: "test"},
}

// resolves returns the reasons whose problem r ends; none for a reason
// that is not a recovery.
func resolves(r Reason) []Reason { return families[r].resolves }

func keysOf(ev Event) (key, family) {
	subject := ev.Machine
	if subject == "" {
		subject = ev.Replica
	}
	k := key{reason: ev.Reason, tenant: ev.Tenant, subject: subject}
	f := family{name: families[ev.Reason].name, tenant: ev.Tenant}
	switch ev.Reason {
	case MachineNotReady, ReplicaLost:
		f.subject = subject
	}
	if f.name == "" {
		f.name = string(ev.Reason)
	}
	return k, f
}

// entry is one message waiting in a queue.
type entry struct {
	key   key
	fam   family
	n     Notification
	id    uint64
	due   time.Time // a held entry's window end
	tries int       // failed attempts so far
}

// queue is one provider's bounded queue. Ready messages leave in order;
// an event whose key was sent within the window is held until the window
// ends, gathering its repeats; a full queue drops its oldest message.
type queue struct {
	mu     sync.Mutex
	size   int
	window time.Duration
	ready  []*entry
	tail   map[family]*entry // the last ready entry of each family
	held   map[key]*entry
	heldBy map[family]int    // held entries of each family
	sent   map[key]time.Time // when each key last left to be sent
	pruned time.Time
	nextID uint64
	// failures counts failed attempts in a row; pause is when the next
	// may start, after the backoff of the last failure.
	failures int
	pause    time.Time
	wake     chan struct{}
	// coalesced and dropped count events merged into another message and
	// messages dropped from a full queue.
	coalesced, dropped prometheus.Counter
}

func newQueue(size int, window time.Duration, coalesced, dropped prometheus.Counter) *queue {
	return &queue{size: size, window: window, tail: map[family]*entry{}, held: map[key]*entry{},
		heldBy: map[family]int{}, sent: map[key]time.Time{}, wake: make(chan struct{}, 1),
		coalesced: coalesced, dropped: dropped}
}

// push queues ev, coalescing it with a queued or held message of the same
// key. It never blocks.
func (q *queue) push(ev Event, provider string, now time.Time) {
	k, f := keysOf(ev)
	q.mu.Lock()
	defer q.mu.Unlock()
	if t := q.tail[f]; t != nil && t.key == k {
		q.merge(t, ev)
		return
	}
	if h := q.held[k]; h != nil {
		q.merge(h, ev)
		return
	}
	// A change in the family: what is held of it goes out first.
	if q.heldBy[f] > 0 {
		q.releaseFamily(f, ev.Reason)
	}
	q.nextID++
	e := &entry{key: k, fam: f, n: Notification{Event: ev, Count: 1, Provider: provider}, id: q.nextID}
	if s, ok := q.sent[k]; ok && now.Before(s.Add(q.window)) {
		e.due = s.Add(q.window)
		q.held[k] = e
		q.heldBy[f]++
	} else {
		q.append(e)
	}
	for len(q.ready)+len(q.held) > q.size {
		q.dropOldest()
	}
	q.signal()
}

func (q *queue) merge(e *entry, ev Event) {
	e.n.Event = ev
	e.n.Count++
	q.coalesced.Inc()
}

func (q *queue) append(e *entry) {
	q.ready = append(q.ready, e)
	q.tail[e.fam] = e
}

func (q *queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// releaseFamily makes ready the held entries of family f whose reason is
// not r, in the order of their window ends.
func (q *queue) releaseFamily(f family, r Reason) {
	var out []*entry
	for k, h := range q.held {
		if h.fam == f && k.reason != r {
			out = append(out, h)
		}
	}
	q.release(out)
}

// release moves held entries to the ready queue, in the order of their
// window ends (then of their arrival).
func (q *queue) release(out []*entry) {
	slices.SortFunc(out, func(a, b *entry) int {
		if c := a.due.Compare(b.due); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	for _, h := range out {
		delete(q.held, h.key)
		if q.heldBy[h.fam]--; q.heldBy[h.fam] == 0 {
			delete(q.heldBy, h.fam)
		}
		h.due = time.Time{}
		q.append(h)
	}
}

// dropOldest drops the oldest ready message or, with none, the held one
// whose window ends first.
func (q *queue) dropOldest() {
	q.dropped.Inc()
	if len(q.ready) > 0 {
		e := q.ready[0]
		q.ready[0] = nil
		q.ready = q.ready[1:]
		if q.tail[e.fam] == e {
			delete(q.tail, e.fam)
		}
		return
	}
	var first *entry
	for _, h := range q.held {
		if first == nil || h.due.Before(first.due) || (h.due.Equal(first.due) && h.id < first.id) {
			first = h
		}
	}
	delete(q.held, first.key)
	if q.heldBy[first.fam]--; q.heldBy[first.fam] == 0 {
		delete(q.heldBy, first.fam)
	}
}

// next takes the message to send now, or returns when to look again (zero:
// when woken).
func (q *queue) next(now time.Time) (*entry, time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var due []*entry
	var wait time.Time
	for _, h := range q.held {
		if !h.due.After(now) {
			due = append(due, h)
		} else if wait.IsZero() || h.due.Before(wait) {
			wait = h.due
		}
	}
	q.release(due)
	if now.Sub(q.pruned) >= q.window {
		for k, s := range q.sent {
			if !now.Before(s.Add(q.window)) {
				delete(q.sent, k)
			}
		}
		q.pruned = now
	}
	if len(q.ready) == 0 {
		return nil, wait
	}
	if q.pause.After(now) { // backing off after a failure
		if wait.IsZero() || q.pause.Before(wait) {
			wait = q.pause
		}
		return nil, wait
	}
	e := q.ready[0]
	q.ready[0] = nil
	q.ready = q.ready[1:]
	if q.tail[e.fam] == e {
		delete(q.tail, e.fam)
	}
	q.sent[e.key] = now
	return e, time.Time{}
}

// delivered records a success: the provider works again.
func (q *queue) delivered() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.failures = 0
}

// failed records a failed attempt and returns how many failed in a row.
func (q *queue) failed() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.failures++
	return q.failures
}

// wait sends nothing before until.
func (q *queue) wait(until time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pause = until
}

// retry puts e back first in line and sends nothing before until.
func (q *queue) retry(e *entry, until time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pause = until
	q.ready = slices.Insert(q.ready, 0, e)
	if q.tail[e.fam] == nil {
		q.tail[e.fam] = e
	}
	for len(q.ready)+len(q.held) > q.size {
		q.dropOldest()
	}
}

// length is how many messages wait, held ones included.
func (q *queue) length() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ready) + len(q.held)
}
