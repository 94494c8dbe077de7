package replica

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rezuscloud/rezuscloud/internal/etcdtest"
)

// testTTL is the replicas' lease TTL in these tests.
const testTTL = 3 * time.Second

// stopTime is how long the tests' work takes to stop once its context
// ends.
const stopTime = 200 * time.Millisecond

// checker follows what every replica acts on, through the contexts it
// gives, and fails the test when two act on one shard, or lead, at once.
type checker struct {
	t       *testing.T
	mu      sync.Mutex
	shards  map[int]string // shard → the replica whose context is live
	leader  string
	changed chan struct{}
}

func newChecker(t *testing.T) *checker {
	return &checker{t: t, shards: map[int]string{}, changed: make(chan struct{})}
}

// set records that name acts on slot (a shard, or -1 for leadership),
// or stops to when on is false.
func (c *checker) set(slot int, name string, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.shards[slot]
	if slot < 0 {
		cur = c.leader
	}
	switch {
	case on && cur != "" && cur != name:
		what := fmt.Sprintf("shard %d", slot)
		if slot < 0 {
			what = "the leadership"
		}
		c.t.Errorf("%s and %s act at once on %s", cur, name, what)
	case !on && cur != name:
		return
	}
	if !on {
		name = ""
	}
	if slot < 0 {
		c.leader = name
	} else if name == "" {
		delete(c.shards, slot)
	} else {
		c.shards[slot] = name
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// wait waits until cond holds on the checker's state and returns how
// long that took; the test fails after limit.
func (c *checker) wait(limit time.Duration, what string, cond func(shards map[int]string, leader string) bool) time.Duration {
	c.t.Helper()
	start := time.Now()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ok, ch := cond(c.shards, c.leader), c.changed
		c.mu.Unlock()
		if ok {
			return time.Since(start)
		}
		select {
		case <-ch:
		case <-deadline.C:
			c.mu.Lock()
			defer c.mu.Unlock()
			c.t.Fatalf("%s: not within %s; shards %v, leader %q", what, limit, c.shards, c.leader)
		}
	}
}

// assigned is a condition: every shard is acted on by the member the
// assignment over names gives it.
func assigned(n int, names ...string) func(map[int]string, string) bool {
	return assignedBy(Unweighted(n), names...)
}

// assignedBy is assigned with the shards weighted by weights.
func assignedBy(weights []int, names ...string) func(map[int]string, string) bool {
	want := Assign(names, weights)
	return func(shards map[int]string, _ string) bool {
		for s := range weights {
			if shards[s] != want[s] {
				return false
			}
		}
		return true
	}
}

// tenantsOfShards returns a tenant of each shard, by shard.
func tenantsOfShards(n int) []string {
	out := make([]string, n)
	found := 0
	for i := 0; found < n; i++ {
		name := fmt.Sprintf("tenant-%d", i)
		if s := ShardOf(name, n); out[s] == "" {
			out[s] = name
			found++
		}
	}
	return out
}

// member is a replica that the test runs, with a worker that acts on
// everything it may.
type member struct {
	r      *Replica
	stop   context.CancelFunc
	done   chan struct{}
	proxy  *proxy
	client *clientv3.Client
}

// start joins a replica named name through endpoints and runs it and its
// worker until the test ends or stop.
func start(t *testing.T, chk *checker, name string, endpoints ...string) *member {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	r, err := Join(t.Context(), Config{Client: cli, Prefix: "/test/replicas", Name: name, Address: "http://" + name, TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{r: r, stop: cancel, done: make(chan struct{}), client: cli}
	var wg sync.WaitGroup
	wg.Go(func() { work(ctx, r, chk, name) })
	go func() {
		if err := r.Run(ctx); err != nil {
			t.Error(err)
		}
		wg.Wait()
		close(m.done)
	}()
	t.Cleanup(func() { cancel(); <-m.done })
	return m
}

// renewed returns when the member's lease was last renewed, while it is
// a member.
func (m *member) renewed() (time.Time, bool) {
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	if m.r.ep == nil {
		return time.Time{}, false
	}
	return m.r.ep.renewed, true
}

// leave stops the member's replica, which leaves, and waits for it.
func (m *member) leave() { m.stop(); <-m.done }

// work acquires every tenant's shard and the leadership whenever they
// are this replica's, and holds them in the checker until their
// contexts end.
func work(ctx context.Context, r *Replica, chk *checker, name string) {
	tenants := tenantsOfShards(r.cfg.Shards)
	var mu sync.Mutex
	active := map[int]bool{}
	hold := func(slot int, wctx context.Context, done func()) {
		active[slot] = true
		chk.set(slot, name, true)
		go func() {
			<-wctx.Done()
			// Work takes a while to stop, as tofu does at SIGTERM.
			stopping := time.NewTimer(stopTime)
			<-stopping.C
			chk.set(slot, name, false)
			mu.Lock()
			delete(active, slot)
			mu.Unlock()
			done()
		}()
	}
	for {
		ch := r.Changed()
		mu.Lock()
		for s, tenant := range tenants {
			if !active[s] {
				if wctx, done, ok := r.Acquire(tenant); ok {
					hold(s, wctx, done)
				}
			}
		}
		if !active[-1] {
			if lctx, ok := r.Leader(); ok {
				hold(-1, lctx, func() {})
			}
		}
		mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

// hostOf returns the host:port of an etcd client URL.
func hostOf(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return p.Host
}

// TestReplicas: three replicas hold every shard, each by the one the
// assignment gives it; a fourth joins and leaves, and the shards follow
// within the TTL; the leader is cut from etcd and fences itself before
// its lease expires, another leads and takes its shards; healed, it
// joins with a new fence. Never do two replicas act on one shard or lead
// at once.
func TestReplicas(t *testing.T) {
	c := etcdtest.Start(t, 1)
	target := hostOf(t, c.Endpoints()[0])
	chk := newChecker(t)
	n := DefaultShards
	ms := map[string]*member{}
	for _, name := range []string{"a", "b", "c"} {
		p := newProxy(t, target)
		ms[name] = start(t, chk, name, p.URL())
		ms[name].proxy = p
	}
	chk.wait(10*time.Second, "three replicas hold every shard", assigned(n, "a", "b", "c"))
	chk.wait(testTTL, "a leader", func(_ map[int]string, l string) bool { return l != "" })

	// The status is a's view of etcd, which follows it by a watch.
	var st Status
	waitUntil(t, testTTL, "a's status has every shard owned", func() bool {
		st = ms["a"].r.Status(tenantsOfShards(n))
		return st.Unowned == 0
	})
	if len(st.Members) != 3 || st.Unowned != 0 || st.Leader == "" || st.Shards != n {
		t.Fatalf("status %+v: want 3 members, a leader, every shard owned", st)
	}
	for _, m := range st.Members {
		if m.Shards == 0 || m.Shards != m.Tenants || m.Address != "http://"+m.Name {
			t.Errorf("status of %+v: want shards, one tenant each, its address", m)
		}
	}

	// Every replica names each tenant's holder as the assignment gives
	// it, with the holder's address, once its view has every shard.
	for name, m := range ms {
		waitUntil(t, testTTL, name+" names every tenant's holder", func() bool {
			for s, tenant := range tenantsOfShards(n) {
				h, addr, ok := m.r.Holder(tenant)
				if !ok || h != Assign([]string{"a", "b", "c"}, Unweighted(n))[s] || addr != "http://"+h {
					return false
				}
			}
			return true
		})
	}

	d := start(t, chk, "d", c.Endpoints()...)
	took := chk.wait(testTTL, "d joins", assigned(n, "a", "b", "c", "d"))
	t.Logf("rebalance after a join: %s", took)
	left := time.Now()
	d.leave()
	chk.wait(testTTL, "d leaves", assigned(n, "a", "b", "c"))
	t.Logf("rebalance after a leave (its work stops in %s): %s", stopTime, time.Since(left))

	victim := ms[chk.leaderName()]
	key, rev := victim.r.Fence()
	others := []string{}
	for name := range ms {
		if ms[name] != victim {
			others = append(others, name)
		}
	}
	expired := expiry(t, c.Client(t), key)
	cut := time.Now()
	victim.proxy.Cut()
	fenced := waitUntil(t, testTTL, "the cut replica fences itself", func() bool { return !victim.r.Ready() })
	t.Logf("from the cut to the fence: %s", fenced)
	chk.wait(testTTL+2*time.Second, "the others take the cut replica's shards", assigned(n, others...))
	t.Logf("from the cut to its shards held by the others: %s", time.Since(cut))
	chk.wait(testTTL, "another leader", func(_ map[int]string, l string) bool { return l != "" && ms[l] != victim })
	t.Logf("from the cut to a new leader: %s", time.Since(cut))
	// Fenced at 2/3 of the TTL after its last renewal, the replica
	// stopped at least TTL/3 before etcd expired its lease; half of that
	// is left for the test's own delays.
	margin := (<-expired).Sub(cut) - fenced
	t.Logf("from the fence to the lease's expiry: %s", margin)
	if margin < testTTL/6 {
		t.Errorf("the replica fenced itself %s before its lease expired, want at least %s", margin, testTTL/6)
	}

	victim.proxy.Heal()
	healed := time.Now()
	chk.wait(3*testTTL, "the healed replica holds its shards again", assigned(n, "a", "b", "c"))
	t.Logf("from the heal to the rebalance: %s", time.Since(healed))
	if k, r := victim.r.Fence(); k != key || r == rev || r == 0 {
		t.Errorf("fence after the rejoin %s@%d, before %s@%d: want the same key, a new revision", k, r, key, rev)
	}
}

// expiry watches key and sends when it is deleted: when the lease it is
// bound to expires.
func expiry(t *testing.T, cli *clientv3.Client, key string) <-chan time.Time {
	t.Helper()
	get, err := cli.Get(t.Context(), key)
	if err != nil || len(get.Kvs) != 1 {
		t.Fatalf("get %s: %v %v", key, get, err)
	}
	out := make(chan time.Time, 1)
	wch := cli.Watch(t.Context(), key, clientv3.WithRev(get.Header.Revision+1))
	go func() {
		for wr := range wch {
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					out <- time.Now()
					return
				}
			}
		}
	}()
	return out
}

// leaderName returns the current leader in the checker.
func (c *checker) leaderName() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

// waitUntil polls cond every 10 ms until it holds, and returns how long
// that took; the test fails after limit.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %s", what, limit)
		}
		<-tick.C
	}
	return time.Since(start)
}

// TestQuorumLoss: with two of three etcd members killed, the replicas
// fence themselves, act on nothing and report not ready; once the
// members are back they join again and hold every shard.
func TestQuorumLoss(t *testing.T) {
	c := etcdtest.Start(t, 3)
	chk := newChecker(t)
	n := DefaultShards
	a := start(t, chk, "a", c.Endpoints()...)
	b := start(t, chk, "b", c.Endpoints()...)
	chk.wait(10*time.Second, "two replicas hold every shard", assigned(n, "a", "b"))

	members := map[string]*member{"a": a, "b": b}
	last := map[string]time.Time{} // its last renewal while seen ready
	for name, m := range members {
		at, ok := m.renewed()
		if !ok {
			t.Fatalf("%s is not a member before the quorum is lost", name)
		}
		last[name] = at
		// A renewal may come between the two reads, never before the first.
		if until := m.r.ActUntil(); until.Before(at.Add(testTTL*2/3)) || until.After(time.Now().Add(testTTL*2/3)) {
			t.Errorf("%s may act until %s, want 2/3 of the TTL after its last renewal %s", name, until, at)
		}
	}
	c.Kill(0)
	c.Kill(1) // the quorum is lost while the member stops, before it returns
	// The member left may go on renewing leases until it sees that the
	// quorum is gone (an election timeout), so the time that counts is
	// from each replica's last renewal: it must be not ready before its
	// lease can expire. The wait's own limit only guards against a hang.
	// Each replica is judged by itself: it may be fenced well before the
	// other, which goes on renewing through the member left.
	fenced := map[string]time.Time{} // when it was first seen not ready
	took := waitUntil(t, 30*time.Second, "not ready without a quorum", func() bool {
		for name, m := range members {
			if _, done := fenced[name]; done {
				continue
			}
			// Ready first: a renewal between the two reads is recorded,
			// so the renewal kept is never older than the one Ready judged.
			if m.r.Ready() {
				if at, ok := m.renewed(); ok {
					last[name] = at
					continue
				}
			}
			fenced[name] = time.Now()
		}
		return len(fenced) == len(members)
	})
	for name, at := range fenced {
		d := at.Sub(last[name])
		t.Logf("%s seen not ready %s after its last renewal", name, d)
		if d >= testTTL {
			t.Errorf("%s was seen not ready %s after its lease's last renewal, when its lease (TTL %s) may have expired", name, d, testTTL)
		}
	}
	t.Logf("from the second member's stop to both fenced: at most %s", took)
	for name, m := range members {
		if until := m.r.ActUntil(); !until.IsZero() {
			t.Errorf("%s, fenced, may act until %s, want the zero time", name, until)
		}
	}
	chk.wait(time.Second, "nothing acted on", func(s map[int]string, l string) bool { return len(s) == 0 && l == "" })

	var wg sync.WaitGroup
	for _, i := range []int{0, 1} {
		wg.Go(func() {
			if err := c.Restart(i); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	back := time.Now()
	chk.wait(4*testTTL, "every shard held again", assigned(n, "a", "b"))
	t.Logf("from the quorum's return to every shard held: %s", time.Since(back))
	if !a.r.Ready() || !b.r.Ready() {
		t.Error("a replica not ready after the quorum returned")
	}
}

// TestStopWhileCutOff: a replica cut off from etcd while it waits in the
// election stops at once when asked, without waiting for etcd to answer
// the election's clean-up.
func TestStopWhileCutOff(t *testing.T) {
	c := etcdtest.Start(t, 1)
	chk := newChecker(t)
	start(t, chk, "a", c.Endpoints()...)
	chk.wait(testTTL, "a leads", func(_ map[int]string, l string) bool { return l == "a" })
	p := newProxy(t, hostOf(t, c.Endpoints()[0]))
	b := start(t, chk, "b", p.URL())
	chk.wait(10*time.Second, "two replicas hold every shard", assigned(DefaultShards, "a", "b"))
	p.Cut()
	waitUntil(t, testTTL, "b fences itself", func() bool { return !b.r.Ready() })
	stopped := make(chan struct{})
	go func() { b.leave(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(testTTL):
		p.Heal() // so that the test's clean-up ends
		t.Fatalf("b, cut off from etcd, did not stop within %s", testTTL)
	}
}

// TestNameInUse: a second replica of a live replica's name is refused.
func TestNameInUse(t *testing.T) {
	c := etcdtest.Start(t, 1)
	start(t, newChecker(t), "a", c.Endpoints()...)
	_, err := Join(t.Context(), Config{Client: c.Client(t), Prefix: "/test/replicas/", Name: "a", TTL: testTTL})
	if !errors.Is(err, ErrNameInUse) {
		t.Fatalf("join as a live replica's name: %v, want ErrNameInUse", err)
	}
}

// TestShardOf: the shard of a tenant never changes, since replicas of
// every version must agree; and tenants spread over every shard.
func TestShardOf(t *testing.T) {
	for tenant, want := range map[string]int{"production": 26, "": 5, "staging": 38} {
		if got := ShardOf(tenant, 64); got != want {
			t.Errorf("ShardOf(%q, 64) = %d, want %d", tenant, got, want)
		}
	}
	if got := len(tenantsOfShards(64)); got != 64 {
		t.Errorf("tenants of %d shards, want 64", got)
	}
}

// TestRendezvous: shards spread over every member with counts that
// differ by one at most, the same whatever the members' order, and a
// member that joins or leaves moves few shards besides its own.
func TestRendezvous(t *testing.T) {
	n := DefaultShards
	three, four := Assign([]string{"a", "b", "c"}, Unweighted(n)), Assign([]string{"c", "d", "b", "a"}, Unweighted(n))
	if !slices.Equal(four, Assign([]string{"a", "b", "c", "d"}, Unweighted(n))) {
		t.Error("the assignment depends on the members' order")
	}
	moved := 0
	for s := range n {
		if three[s] != four[s] && four[s] != "d" {
			moved++
		}
	}
	// A plain rendezvous moves none; the bound on loads moves a few.
	if moved > n/8 {
		t.Errorf("%d shards moved between a, b and c when d joined", moved)
	}
	for members, got := range map[int][]string{3: three, 4: four} {
		load := map[string]int{}
		for s, m := range got {
			if m == "" {
				t.Fatalf("shard %d unassigned among %d", s, members)
			}
			load[m]++
		}
		lo, hi := n, 0
		for _, c := range load {
			lo, hi = min(lo, c), max(hi, c)
		}
		if len(load) != members || hi-lo > 1 {
			t.Errorf("loads among %d members: %v", members, load)
		}
		t.Logf("among %d: %v", members, load)
	}
	t.Logf("%d shards moved between a, b and c when d joined", moved)
}
