package test

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/schema"
)

// replicaTTL is the replicas' lease in these tests: short, so that a
// takeover comes within seconds, and long enough that a replica on a
// loaded machine (etcd runs in the test process, under -race in make
// test) renews it in time; a replica fences itself after 2/3 of it.
const replicaTTL = 5 * time.Second

// replicaSet is three `rezuscloud serve` processes on one etcd and one
// simulated world, each with a data dir of its own.
type replicaSet struct {
	t       *testing.T
	e       *e2e
	world   string
	servers map[string]*e2eServer
}

// startReplicas starts etcd (three members in the test's process), the
// simulated world, a repository with tenant staging, and three replicas
// named r0, r1 and r2 (see startRig).
func startReplicas(t *testing.T) *replicaSet { return startRig(t, rigOptions{}).replicaSet }

// balancer is a TCP load balancer on loopback, as a Kubernetes Service
// stands before the replicas: it checks each replica's /readyz every
// 100 ms, and each connection goes to the next ready one in turn.
type balancer struct {
	l        net.Listener
	mu       sync.Mutex
	backends []string
	ready    map[string]bool
	next     int
}

func newBalancer(t *testing.T) *balancer {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &balancer{l: l, ready: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); l.Close() })
	go b.serve()
	go b.check(ctx)
	return b
}

func (b *balancer) url() string { return "http://" + b.l.Addr().String() }

func (b *balancer) add(addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backends = append(b.backends, addr)
}

// check keeps ready up to date until ctx ends.
func (b *balancer) check(ctx context.Context) {
	hc := &http.Client{Timeout: 300 * time.Millisecond}
	for ctx.Err() == nil {
		b.mu.Lock()
		backends := slices.Clone(b.backends)
		b.mu.Unlock()
		for _, addr := range backends {
			resp, err := hc.Get("http://" + addr + "/readyz")
			ok := err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				resp.Body.Close()
			}
			b.mu.Lock()
			b.ready[addr] = ok
			b.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (b *balancer) serve() {
	for {
		c, err := b.l.Accept()
		if err != nil {
			return
		}
		go b.relay(c)
	}
}

// relay joins c to a ready replica, or closes it when none is.
func (b *balancer) relay(c net.Conn) {
	defer c.Close()
	b.mu.Lock()
	var ready []string
	for _, addr := range b.backends {
		if b.ready[addr] {
			ready = append(ready, addr)
		}
	}
	b.next++
	start := b.next
	b.mu.Unlock()
	for i := range ready {
		s, err := net.DialTimeout("tcp", ready[(start+i)%len(ready)], time.Second)
		if err != nil {
			continue
		}
		defer s.Close()
		go func() { io.Copy(s, c); s.(*net.TCPConn).CloseWrite() }()
		io.Copy(c, s)
		return
	}
}

// replicasOf reads the replicas' status through s.
func replicasOf(s *e2eServer) *api.ReplicasStatus {
	s.t.Helper()
	var st api.Status
	s.mustGet("/api/v1/status", &st)
	return st.Replicas
}

// waitLeader waits until every replica of want (the live members' names,
// sorted) agrees that those are the members and on one leader among
// them, and returns the leader.
func (rs *replicaSet) waitLeader(want ...string) string {
	rs.t.Helper()
	var leader string
	first := rs.servers[want[0]]
	first.WaitFor("the replicas "+strings.Join(want, ", ")+" to agree on a leader", func() bool {
		leader = ""
		for _, name := range want {
			st := replicasOf(rs.servers[name])
			if st == nil || st.Self != name || st.Leader == "" || (leader != "" && st.Leader != leader) {
				return false
			}
			var names []string
			for _, m := range st.Members {
				names = append(names, m.Name)
			}
			if !cmp.Equal(names, want) {
				return false
			}
			leader = st.Leader
		}
		return true
	})
	return leader
}

// waitSucceeded waits until commit sha, read through s, has succeeded.
func waitSucceeded(s *e2eServer, sha string) {
	s.t.Helper()
	s.WaitFor("commit "+sha[:12]+" to succeed", func() bool {
		c, ok := s.Commit(sha)
		return ok && c.Status.Phase == schema.CommitSucceeded
	})
}

// TestReplicasTakeOver runs three replicas on one etcd. One leads; the
// one that owns the tenant applies it; all serve the same API from the
// same store. SIGKILL of the owner in the middle of an apply hands the
// tenant to another replica within the lease, which completes the commit:
// the world's machines and the store agree, with no orphan and no
// duplicate. The next owner, paused past its lease (SIGSTOP) in the
// middle of a rolling upgrade, is replaced, and the replica that takes
// the tenant over completes the rollout; once the paused one runs again
// it finds its lease gone, without acting (a leader exits, another joins
// again): the machines' journals show each machine upgraded once, one at
// a time, and one etcd bootstrap. Push
// webhooks and reconcile requests reach the leader through a follower.
func TestReplicasTakeOver(t *testing.T) {
	rg := startRig(t, rigOptions{})
	rs := rg.replicaSet
	e := rs.e
	all := []string{"r0", "r1", "r2"}
	leader := rs.waitLeader(all...)
	owner := rg.owner("staging")
	followers := others(all, leader)
	// f reads for the test: a follower that outlives the owner.
	f := rs.servers[others(followers, owner)[0]]
	e.srv = f
	waitSucceeded(f, e.first)
	planeWaitReady(t, e, "staging")
	if diff := cmp.Diff(e2eKeys(e2eMachineIDs(f.tenantMachines("staging"))), worldMachines(t, rs.world)); diff != "" {
		t.Fatalf("the machines in the store against the world's (-store +world):\n%s", diff)
	}
	for _, name := range followers {
		if got := replicasOf(rs.servers[name]); got.Leader != leader {
			t.Fatalf("replica %s says %s leads, want %s", name, got.Leader, leader)
		}
	}
	// What only the leader serves reaches it through a follower.
	if code, body := f.Request("POST", "/api/v1/reconcile", []byte(`{"tenant":"staging"}`), nil); code != http.StatusAccepted || !strings.Contains(string(body), "staging") {
		t.Errorf("POST /api/v1/reconcile through follower %s: %d %s, want 202 from the leader", followers[0], code, body)
	}
	// So do the push webhooks: the leader's handler answers (it has no
	// webhook secret here, and says so).
	if code, body := f.Request("POST", "/hooks/generic", []byte(`{}`), nil); code != http.StatusServiceUnavailable || !strings.Contains(string(body), "webhooks are disabled") {
		t.Errorf("POST /hooks/generic through follower %s: %d %s, want the leader's 503 for a server without a webhook secret", followers[0], code, body)
	}

	// Kill the owner while it applies a second worker.
	e.setCount("staging", "workers", 2)
	second := e.push("staging: two workers")
	f.WaitFor("the second commit to be applying", func() bool {
		c, ok := f.Commit(second)
		return ok && c.Status.Phase == schema.CommitApplying
	})
	rs.servers[owner].Kill()
	killed := time.Now()
	live := others(all, owner)
	rs.waitLeader(live...)
	waitSucceeded(f, second)
	next := rg.owner("staging")
	t.Logf("replica %s took staging over and completed the commit %v after %s (leader: %v) was killed", next, time.Since(killed).Round(time.Millisecond), owner, owner == leader)
	if d := time.Since(killed); d > replicaTTL+30*time.Second {
		t.Errorf("the commit was completed %v after the owner was killed, want within the lease and 30 s", d)
	}
	planeWaitReady(t, e, "staging")
	machines := e2eKeys(e2eMachineIDs(f.tenantMachines("staging")))
	if len(machines) != 3 {
		t.Errorf("staging has %d machines after the takeover, want 3: %v", len(machines), machines)
	}
	if diff := cmp.Diff(machines, worldMachines(t, rs.world)); diff != "" {
		t.Errorf("the machines in the store against the world's after the takeover (-store +world):\n%s", diff)
	}

	// Pause the new owner past its lease in the middle of a rolling
	// upgrade.
	paused := rs.servers[next]
	led := next == rs.waitLeader(live...)
	rest := others(live, next)
	e.edit(e2eManifests+"/staging/tenant.yaml", `talosVersion: "1.12.6"`, `talosVersion: "1.12.7"`)
	fourth := e.push("staging: Talos 1.12.7")
	f.WaitFor("the rolling upgrade to begin", func() bool {
		return len(worldCalls(t, rs.world, f, "staging", "Upgrade")) > 0
	})
	paused.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { // a test that stops early lets it stop
		if paused.Running() {
			paused.Signal(syscall.SIGCONT)
		}
	})
	s := rs.servers[rest[0]] // the paused replica does not answer
	t.Logf("replica %s (leader: %v) paused after %d of the upgrades", next, led, len(worldCalls(t, rs.world, s, "staging", "Upgrade")))
	rs.waitLeader(rest...)
	e.srv = s
	waitSucceeded(s, fourth)
	t.Logf("replica %s took staging over and completed the rollout", rg.owner("staging"))
	paused.Signal(syscall.SIGCONT)
	if led {
		select {
		case <-paused.Done():
		case <-time.After(e2eTimeout):
			t.Fatalf("replica %s led and runs on after its lease ended while it was paused", next)
		}
		if log := paused.Log(); !strings.Contains(log, "lost its lease while it led") {
			t.Errorf("replica %s exited without saying that it lost its lease:\n%s", next, paused.Tail(30))
		}
	} else {
		rs.waitLeader(live...)
		if log := paused.Log(); !strings.Contains(log, "replica: fenced") {
			t.Errorf("replica %s joined again without saying that it was fenced:\n%s", next, paused.Tail(30))
		}
	}
	planeWaitReady(t, e, "staging")
	if diff := cmp.Diff(e2eKeys(e2eMachineIDs(s.tenantMachines("staging"))), worldMachines(t, rs.world)); diff != "" {
		t.Errorf("the machines in the store against the world's after the pause (-store +world):\n%s", diff)
	}
	// The machines' journals: each machine upgraded once, one at a time,
	// control planes first, across the pause and the takeover; etcd
	// bootstrapped once.
	ups := worldCalls(t, rs.world, s, "staging", "Upgrade")
	if got, want := len(ups), len(s.tenantMachines("staging")); got != want {
		t.Errorf("%d upgrades across the pause, want one for each of the %d machines: %+v", got, want, ups)
	}
	planeCheckOneAtATime(t, ups, planeUpgrade+planeReboot)
	if got := worldCalls(t, rs.world, s, "staging", "Bootstrap"); len(got) != 1 {
		t.Errorf("staging was bootstrapped %d times, want once", len(got))
	}
}

// worldCalls returns the calls named calls that the tenant's machines,
// as s serves them, answered without an error, from their journals in
// the simulated world at dir, in time order.
func worldCalls(t *testing.T, dir string, s *e2eServer, tenant string, calls ...string) []planeCall {
	t.Helper()
	var out []planeCall
	for _, m := range s.tenantMachines(tenant) {
		j, err := talosnode.ReadJournal(dir, m.Metadata.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range j {
			if slices.Contains(calls, c.Call) && c.Error == "" && !c.DryRun {
				out = append(out, planeCall{JournalEntry: c, Machine: m.Spec.TFAddress, ID: m.Metadata.Name, CP: m.Spec.Role == schema.RoleControlPlane})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

// others returns names without name.
func others(names []string, name string) []string {
	var out []string
	for _, n := range names {
		if n != name {
			out = append(out, n)
		}
	}
	return out
}
