package test

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/internal/etcdtest"
	"github.com/rezuscloud/rezuscloud/internal/manifestfleet"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/schema"
)

// TestReplicasWatchMoves follows tenant staging's events as Server-Sent
// Events through a switch that sends the follower to one replica at a
// time. It follows replica A through a commit, is held away while A
// stops and a second commit is applied, and resumes on replica B from its
// Last-Event-ID; then it is held away again while B stops and a third
// commit is applied, and resumes on A, started again. The follower must
// see every change exactly once: ids strictly increasing, the same events
// that a fresh watch replays from the store's history on the third
// replica, and each machine the commits added and removed exactly once.
func TestReplicasWatchMoves(t *testing.T) {
	r := startRig(t, rigOptions{})
	e := r.e
	leader := r.waitLeader(r.names...)
	followers := others(r.names, leader)
	a, b, c := r.servers[followers[0]], r.servers[followers[1]], r.servers[leader]
	t.Logf("replica %s leads; the follower moves from %s to %s and back", leader, followers[0], followers[1])
	e.srv = c
	waitSucceeded(c, e.first)

	sw := newBalancer(t)
	sw.only(a.Addr())
	f := followSSE(t, sw.url()+"/api/v1/tenants/staging/events")
	c.WaitFor("the watch's current state", func() bool {
		_, initial, _, _ := f.snapshot()
		return initial != 0
	})
	_, initial := f.currentState()

	var added, removed []string
	apply := func(workers int, msg string) {
		t.Helper()
		before := e2eMachineIDs(c.tenantMachines("staging"))
		e.setCount("staging", "workers", workers)
		waitSucceeded(c, e.push(msg))
		after := e2eMachineIDs(c.tenantMachines("staging"))
		added = append(added, e2eKeys(sseDiffIDs(after, before))...)
		removed = append(removed, e2eKeys(sseDiffIDs(before, after))...)
	}
	apply(2, "staging: two workers")
	watchCatchUp(t, c, f)

	// A stops; the follower comes back only after the next commit, on B.
	f.hold(true)
	a.Stop()
	apply(1, "staging: one worker, while replica A is stopped")
	sw.only(b.Addr())
	f.hold(false)
	watchCatchUp(t, c, f)

	// B stops; A starts again and the follower resumes there.
	a.Start()
	r.waitLeader(r.names...)
	f.hold(true)
	b.Stop()
	apply(2, "staging: two workers, while replica B is stopped")
	sw.only(a.Addr())
	f.hold(false)
	last := watchCatchUp(t, c, f)
	f.stop()

	evs, _, connects, problems := f.snapshot()
	for _, p := range problems {
		t.Errorf("follower: %s", p)
	}
	f.mu.Lock()
	resumes := len(f.resumes)
	f.mu.Unlock()
	if connects < 3 || resumes != connects-1 {
		t.Errorf("the follower connected %d times and resumed with Last-Event-ID %d times: want at least 3 connections, each after the first resuming", connects, resumes)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].RV <= evs[i-1].RV {
			t.Errorf("event %d (%s) follows %s: repeated or out of order", i, evs[i], evs[i-1])
		}
	}
	var live []sseEvent
	for _, ev := range evs {
		if ev.RV > initial {
			live = append(live, ev)
		}
	}
	history := c.watchJSONUntil(fmt.Sprintf("/api/v1/tenants/staging/events?resourceVersion=%d", initial), last)
	if got, want := sseLines(live), sseLines(history); got != want {
		t.Errorf("the follower's events differ from the history replica %s replays from %d:\nfollower:\n%s\nhistory:\n%s", leader, initial, got, want)
	}
	if len(added) != 2 || len(removed) != 1 {
		t.Fatalf("the commits added %v and removed %v, want two and one", added, removed)
	}
	count := func(typ, name string) int {
		n := 0
		for _, ev := range evs {
			if ev.Type == typ && ev.Name == name {
				n++
			}
		}
		return n
	}
	for _, name := range added {
		if n := count("ADDED", name); n != 1 {
			t.Errorf("machine %s: %d ADDED events, want 1", name, n)
		}
	}
	for _, name := range removed {
		if n := count("DELETED", name); n != 1 {
			t.Errorf("machine %s: %d DELETED events, want 1", name, n)
		}
	}
	t.Logf("%d events after the current state, over %d connections", len(live), connects)
}

// sseDiffIDs returns the keys of a that b lacks.
func sseDiffIDs(a, b map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		if _, ok := b[k]; !ok {
			out[k] = true
		}
	}
	return out
}

// watchCatchUp waits until the follower has seen the latest version of
// tenant staging, its node groups and its machines, as s serves them,
// and returns the newest resourceVersion it saw.
func watchCatchUp(t *testing.T, s *e2eServer, f *sseFollower) uint64 {
	t.Helper()
	var seen uint64
	s.WaitFor("the follower to catch up with the API", func() bool {
		want := stagingVersion(t, s)
		evs, _, _, _ := f.snapshot()
		seen = 0
		for _, ev := range evs {
			seen = max(seen, ev.RV)
		}
		return seen >= want
	})
	return seen
}

// stagingVersion is the newest resourceVersion of tenant staging, its
// node groups and its machines.
func stagingVersion(t *testing.T, s *e2eServer) uint64 {
	t.Helper()
	var tn schema.Tenant
	s.mustGet("/api/v1/tenants/staging", &tn)
	var ngs struct {
		Items []schema.NodeGroup `json:"items"`
	}
	s.mustGet("/api/v1/tenants/staging/node-groups", &ngs)
	rvs := []string{tn.Metadata.ResourceVersion}
	for _, ng := range ngs.Items {
		rvs = append(rvs, ng.Metadata.ResourceVersion)
	}
	for _, m := range s.tenantMachines("staging") {
		rvs = append(rvs, m.Metadata.ResourceVersion)
	}
	var newest uint64
	for _, rv := range rvs {
		n, err := strconv.ParseUint(rv, 10, 64)
		if err != nil {
			t.Fatalf("resourceVersion %q: %v", rv, err)
		}
		newest = max(newest, n)
	}
	return newest
}

// quorumWindow is how long the test watches the replicas without an etcd
// quorum for anything they start: two leases, long enough for a leader
// to poll git many times and for any replica to take over.
const quorumWindow = 2 * replicaTTL

// TestReplicasLoseEtcdMembers runs three replicas on a three-member etcd.
// With one member killed, a commit still applies. With two killed, the
// replicas fence themselves: each reports not ready (the leader exits,
// saying it lost its lease, for its supervisor to start it again), and a
// commit pushed meanwhile starts nothing: no tofu process, no machine
// created or touched. Once the members are back, the replicas that stayed
// up elect a leader and apply that commit by themselves; the leader that
// exited, started again as its supervisor would, joins them. Nothing was
// lost: every commit succeeded, and the store's machines are the world's.
func TestReplicasLoseEtcdMembers(t *testing.T) {
	tofu, runs := countingTofu(t)
	r := startRig(t, rigOptions{tofu: tofu})
	e := r.e
	leader := r.waitLeader(r.names...)
	followers := others(r.names, leader)
	s := r.servers[followers[0]]
	e.srv = s
	waitSucceeded(s, e.first)
	planeWaitReady(t, e, "staging")

	r.etcd.Kill(0)
	e.setCount("staging", "workers", 2)
	second := e.push("staging: two workers, with one etcd member down")
	waitSucceeded(s, second)
	planeWaitReady(t, e, "staging")
	machines := e2eMachineIDs(s.tenantMachines("staging"))
	if diff := cmp.Diff(e2eKeys(machines), worldMachines(t, r.world)); diff != "" {
		t.Fatalf("with one etcd member down, the store's machines against the world's (-store +world):\n%s", diff)
	}

	r.etcd.Kill(1)
	t.Cleanup(func() { restartMembers(t, r.etcd, 0, 1) }) // a test that ends early stops its replicas on a whole etcd
	lead := r.servers[leader]
	select {
	case <-lead.Done():
	case <-time.After(e2eTimeout):
		t.Fatalf("leader %s runs on %v after etcd lost its quorum", leader, e2eTimeout)
	}
	if !strings.Contains(lead.Log(), "lost its lease while it led") {
		t.Errorf("leader %s exited without saying that it lost its lease:\n%s", leader, lead.Tail(30))
	}
	for _, name := range followers {
		f := r.servers[name]
		f.WaitFor("replica "+name+" to report not ready", func() bool { return !ready(f) })
	}
	before := tofuLog(t, runs)
	calls := storeJournal(t, r.world, machines)
	e.setCount("staging", "workers", 1)
	third := e.push("staging: one worker, while etcd has no quorum")
	deadline := time.Now().Add(quorumWindow)
	for time.Now().Before(deadline) {
		for _, name := range followers {
			if ready(r.servers[name]) {
				t.Fatalf("replica %s reports ready while etcd has no quorum", name)
			}
		}
		if got := tofuLog(t, runs); len(got) != len(before) {
			t.Fatalf("tofu ran while etcd had no quorum: %v", got[len(before):])
		}
		time.Sleep(100 * time.Millisecond) // an observation window: nothing is to happen in it
	}
	if diff := cmp.Diff(e2eKeys(machines), worldMachines(t, r.world)); diff != "" {
		t.Errorf("the world's machines changed while etcd had no quorum (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(calls, storeJournal(t, r.world, machines)); diff != "" {
		t.Errorf("the machines were called while etcd had no quorum (-before +after):\n%s", diff)
	}

	restartMembers(t, r.etcd, 0, 1)
	if t.Failed() {
		t.FailNow()
	}
	next := r.waitLeader(followers...)
	t.Logf("replica %s leads once etcd has its quorum again", next)
	waitSucceeded(s, third)
	if got := tofuLog(t, runs); len(got) == len(before) {
		t.Errorf("commit %s succeeded without a tofu run after etcd came back", third[:12])
	}
	lead.Start()
	r.waitLeader(r.names...)
	planeWaitReady(t, e, "staging")
	for _, sha := range []string{e.first, second, third} {
		if c, ok := s.Commit(sha); !ok || c.Status.Phase != schema.CommitSucceeded {
			t.Errorf("commit %s after etcd came back: %s", sha[:12], e2eBrief(c.Status))
		}
	}
	after := e2eKeys(e2eMachineIDs(s.tenantMachines("staging")))
	if len(after) != 2 {
		t.Errorf("staging has %d machines after etcd came back, want 2: %v", len(after), after)
	}
	if diff := cmp.Diff(after, worldMachines(t, r.world)); diff != "" {
		t.Errorf("after etcd came back, the store's machines against the world's (-store +world):\n%s", diff)
	}
}

// migrateTenants is how many tenants, of one machine each, the single
// server applies before its store moves into etcd: a fleet that a 2-core
// machine applies in about 80 s (the test takes about 100 s under -race).
const migrateTenants = 100

// restartMembers starts the killed members of c again, at once, so that
// they find their quorum; a member that runs is left alone.
func restartMembers(t *testing.T, c *etcdtest.Cluster, members ...int) {
	var wg sync.WaitGroup
	for _, i := range members {
		wg.Go(func() {
			if err := c.Restart(i); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

// TestReplicasMigrateFromBbolt: a single server on bbolt, on a simulated
// world of its own process, applies a fleet of tenants and stops; `store
// copy` moves its store into etcd, and three replicas start on it. They
// have nothing to do: the leader records the commit as applied without a
// tofu run, no machine gets a write call, and every replica serves the
// tenants, node groups, machines, commits and TF states that the single
// server served.
func TestReplicasMigrateFromBbolt(t *testing.T) {
	world := filepath.Join(t.TempDir(), "world")
	startSimWorld(t, world, "--sim-timings", planeTimings)
	e := newRepo(t)
	// ECDSA service-account keys: each tenant's secrets take a millisecond
	// instead of an RSA key's second of CPU (several under the race
	// detector), which the migration has nothing to do with.
	fleet := manifestfleet.Options{Tenants: migrateTenants, ControlPlanes: 1, Dir: e2eManifests, ServiceAccountKey: schema.ServiceAccountKeyECDSA}
	if err := fleet.WriteDir(e.work.Dir()); err != nil {
		t.Fatal(err)
	}
	e.first = e.push(fmt.Sprintf("%d tenants of one machine each", migrateTenants))
	e.data = filepath.Join(t.TempDir(), "single")
	single := newE2EServer(t, servertest.Options{Data: e.data, Repo: e.repo, Path: e2eManifests, Args: []string{
		"--sim-world", world, "--poll-interval", "300ms", "--debounce", "0s",
		"--probe-ttl", "300ms", "--talos-timeout", "5s", "--talos-wait", "30s", "--drift-interval", "0", "--workers", "4"}})
	start := time.Now()
	single.Start()
	single.waitFleetApplied(e.first)
	waitMachinesReady(single, migrateTenants)
	t.Logf("the single server applied %d tenants in %v", migrateTenants, time.Since(start).Round(time.Millisecond))
	before := servedView(t, single)
	machines := e2eMachineIDs(single.machines(""))
	calls := storeJournal(t, world, machines)
	single.Stop()

	etcd := etcdtest.Start(t, 3)
	storeCmd(t, nil, "store", "copy", "--from", "bbolt:"+e.data, "--to", "etcd:"+strings.Join(etcd.Endpoints(), ","))
	r := startRig(t, rigOptions{etcd: etcd, e: e, world: world})
	leader := r.waitLeader(r.names...)
	s := r.servers[leader]
	s.waitApplied(e.first)
	waitMachinesReady(s, migrateTenants)
	if got := s.tofuRuns(); got != 0 {
		t.Errorf("leader %s ran tofu %d times for the commit the single server applied, want 0", leader, got)
	}
	for _, name := range r.names {
		if diff := cmp.Diff(before, servedView(t, r.servers[name])); diff != "" {
			t.Errorf("replica %s against the single server (-single +replica):\n%s", name, diff)
		}
	}
	if diff := cmp.Diff(calls, storeJournal(t, world, machines)); diff != "" {
		t.Errorf("the replicas called the machines (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(e2eKeys(machines), worldMachines(t, world)); diff != "" {
		t.Errorf("the world's machines after the move (-before +after):\n%s", diff)
	}
	observationSpreads(t, r, leader, world)
}

// observationSpreads checks that the replicas share the observation of
// the migrated fleet: each watches the machines of the tenants it owns,
// together every machine once, and the status says how many tenants each
// owns. When a replica other than the leader is killed, the others take
// its tenants' machines up within the lease's TTL and a pass, and a
// change of every machine, its former ones too, reaches the API.
func observationSpreads(t *testing.T, r *rig, leader, world string) {
	t.Helper()
	s := r.servers[leader]
	spread := func(names []string) (watched map[string]int, ok bool) {
		watched, total := map[string]int{}, 0
		for _, name := range names {
			watched[name] = replicaWatched(t, r.servers[name])
			total += watched[name]
			if watched[name] == 0 {
				return watched, false
			}
		}
		return watched, total == migrateTenants
	}
	var watched map[string]int
	s.WaitFor("every replica watches some machines, and together every machine once", func() (ok bool) {
		watched, ok = spread(r.names)
		return ok
	})
	owned := 0
	for _, m := range replicasOf(s).Members {
		if m.Tenants == 0 || m.Shards == 0 {
			t.Errorf("the status says replica %s holds %d shards with %d tenants, want some", m.Name, m.Shards, m.Tenants)
		}
		owned += m.Tenants
	}
	if owned != migrateTenants {
		t.Errorf("the status counts %d tenants in the replicas' shards, want %d", owned, migrateTenants)
	}
	t.Logf("machines watched by replica: %v", watched)

	victim := others(r.names, leader)[0]
	r.servers[victim].Kill()
	start := time.Now()
	s.WaitFor("the survivors watch every machine", func() (ok bool) {
		watched, ok = spread(others(r.names, victim))
		return ok
	})
	t.Logf("%s's machines were taken up in %v: %v", victim, time.Since(start).Round(time.Millisecond), watched)
	if st := replicasOf(s); st.Unowned != 0 || len(st.Members) != 2 {
		t.Errorf("after %s was killed the status says %d members and %d shards unowned, want 2 and none", victim, len(st.Members), st.Unowned)
	}
	if limit := replicaTTL + 10*time.Second; time.Since(start) > limit {
		t.Errorf("the survivors took %s's machines up after %v, want within %v", victim, time.Since(start), limit)
	}
	for _, fault := range []talosnode.Fault{{Unhealthy: "kubelet"}, {}} {
		faults := talosnode.Faults{}
		if fault.Unhealthy != "" {
			for _, m := range s.machines("") {
				faults[m.Metadata.Name] = fault
			}
		}
		if err := talosnode.WriteFaults(world, faults); err != nil {
			t.Fatal(err)
		}
		want := fault.Unhealthy == ""
		s.WaitFor(fmt.Sprintf("every machine's ready %v in the API", want), func() bool {
			for _, m := range s.machines("") {
				if m.Status.Ready != want {
					return false
				}
			}
			return true
		})
	}
}

// replicaWatched is what a replica's metrics say of the machines its
// plane watches.
func replicaWatched(t *testing.T, s *e2eServer) int {
	t.Helper()
	code, b := s.Request(http.MethodGet, "/metrics", nil, nil)
	m := regexp.MustCompile(`(?m)^rezuscloud_talos_watched_machines(?:\{[^}]*\})? (\d+)$`).FindSubmatch(b)
	if code != http.StatusOK || m == nil {
		t.Fatalf("%s's /metrics (%d) has no rezuscloud_talos_watched_machines", s.URL(), code)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// waitMachinesReady waits until s serves n machines, each ready,
// connected and up to date as the plane observed it.
func waitMachinesReady(s *e2eServer, n int) {
	s.t.Helper()
	s.WaitFor(fmt.Sprintf("%d machines to be ready", n), func() bool {
		ms := s.machines("")
		for _, m := range ms {
			if !m.Status.Ready || !m.Status.Connected || !m.Status.ConfigUpToDate {
				return false
			}
		}
		return len(ms) == n
	})
}

// servedView is what s serves of its tenants, node groups, machines,
// commits and TF states, one line each, without what a move or the
// plane's observation changes (resourceVersions, observed status).
func servedView(t *testing.T, s *e2eServer) []string {
	t.Helper()
	var out []string
	var tenants struct {
		Items []schema.Tenant `json:"items"`
	}
	s.mustGet("/api/v1/tenants?limit=1000", &tenants)
	for _, tn := range tenants.Items {
		m := tn.Metadata
		out = append(out, fmt.Sprintf("tenant %s uid=%s created=%s generation=%d observed=%s",
			m.Name, m.UID, m.CreatedAt.Format(time.RFC3339Nano), m.Generation, tn.Status.ObservedCommit))
		var ngs struct {
			Items []schema.NodeGroup `json:"items"`
		}
		s.mustGet("/api/v1/tenants/"+m.Name+"/node-groups", &ngs)
		for _, ng := range ngs.Items {
			out = append(out, fmt.Sprintf("node group %s/%s uid=%s created=%s", m.Name, ng.Metadata.Name, ng.Metadata.UID, ng.Metadata.CreatedAt.Format(time.RFC3339Nano)))
		}
		code, state := s.Request(http.MethodGet, "/tfstate/"+m.Name, nil, nil)
		if code != http.StatusOK {
			t.Fatalf("GET /tfstate/%s: %d", m.Name, code)
		}
		out = append(out, fmt.Sprintf("state %s sha256=%x", m.Name, sha256.Sum256(state)))
	}
	for _, m := range s.machines("") {
		out = append(out, fmt.Sprintf("machine %s uid=%s tenant=%s address=%s", m.Metadata.Name, m.Metadata.UID, m.Metadata.Labels[schema.LabelTenant], m.Spec.ManagementAddress))
	}
	var commits struct {
		Items []schema.Commit `json:"items"`
	}
	s.mustGet("/api/v1/commits?limit=1000", &commits)
	for _, c := range commits.Items {
		out = append(out, fmt.Sprintf("commit %s uid=%s phase=%s tenants=%d", c.Spec.SHA, c.Metadata.UID, c.Status.Phase, len(c.Status.Tenants)))
	}
	sort.Strings(out)
	return out
}
