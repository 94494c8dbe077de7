package reconciler

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/internal/tfcli"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
)

// shardsOf is a test's replicas in one process: who owns each tenant,
// with a context per holding that ends when the tenant moves, and each
// replica's reconciler. Run hands a run to the owner's RunFor through
// JSON, as it travels between replicas.
type shardsOf struct {
	mu      sync.Mutex
	owner   map[string]string // tenant → replica
	ctx     map[string]context.CancelFunc
	recs    map[string]*Reconciler
	changed chan struct{}
	sent    map[string][]string // replica → tenants handed to it
}

func newShards() *shardsOf {
	return &shardsOf{owner: map[string]string{}, ctx: map[string]context.CancelFunc{}, recs: map[string]*Reconciler{},
		changed: make(chan struct{}), sent: map[string][]string{}}
}

// move gives the tenant to replica name ("" to none); the work of its
// earlier owner on it is told to stop.
func (s *shardsOf) move(tenant, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cancel := s.ctx[tenant]; cancel != nil {
		cancel()
		delete(s.ctx, tenant)
	}
	s.owner[tenant] = name
	close(s.changed)
	s.changed = make(chan struct{})
}

// of returns replica name's view: its Owners.
func (s *shardsOf) of(name string) Owners { return replicaView{s: s, self: name} }

type replicaView struct {
	s    *shardsOf
	self string
}

func (v replicaView) Acquire(tenant string) (context.Context, func(), bool) {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	if v.s.owner[tenant] != v.self {
		return nil, func() {}, false
	}
	ctx, cancel := context.WithCancel(context.Background())
	prev := v.s.ctx[tenant]
	v.s.ctx[tenant] = func() {
		cancel()
		if prev != nil {
			prev()
		}
	}
	return ctx, cancel, true
}

func (v replicaView) Owns(tenant string) bool {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	return v.s.owner[tenant] == v.self
}

func (v replicaView) Changed() <-chan struct{} {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	return v.s.changed
}

func (v replicaView) Run(ctx context.Context, req RemoteRun) (RemoteResult, error) {
	v.s.mu.Lock()
	name := v.s.owner[req.Tenant]
	rec := v.s.recs[name]
	v.s.sent[name] = append(v.s.sent[name], req.Tenant)
	v.s.mu.Unlock()
	if rec == nil || name == v.self {
		return RemoteResult{}, errors.New("no other replica owns the tenant")
	}
	b, err := json.Marshal(req)
	if err != nil {
		return RemoteResult{}, err
	}
	var got RemoteRun
	if err := json.Unmarshal(b, &got); err != nil {
		return RemoteResult{}, err
	}
	res, err := rec.RunFor(ctx, got)
	if err != nil {
		return res, err
	}
	b, _ = json.Marshal(res)
	var out RemoteResult
	return out, json.Unmarshal(b, &out)
}

// newReplicaRigs returns reconcilers named names on one store and state
// backend, each with a data dir and a tofu runner of its own, whose
// tenants are spread by shards.
func newReplicaRigs(t *testing.T, shards *shardsOf, names ...string) map[string]*rig {
	t.Helper()
	dir := t.TempDir()
	srv := servertest.StartBackend(t, backend.Config{DataDir: filepath.Join(dir, "store")}, nil)
	simDir := filepath.Join(dir, "sim")
	out := map[string]*rig{}
	for _, name := range names {
		cli := filepath.Join(dir, name+".rc")
		if err := tfcli.WriteCLIConfig(cli, tfcli.CLIConfig{MirrorDir: testenv.ProviderMirror(t)}); err != nil {
			t.Fatal(err)
		}
		runner, err := tofu.NewRunner(tofu.Options{Binary: testenv.Tofu(t), CLIConfigFile: cli, Env: map[string]string{"REZUSSIM_DIR": simDir}})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := New(srv.Store(), runner, render.Builtin(), Options{DataDir: filepath.Join(dir, name), StateURL: srv.URL(), Owners: shards.of(name)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rec.Close)
		shards.recs[name] = rec
		out[name] = &rig{t: t, srv: srv, rec: rec, simDir: simDir}
	}
	return out
}

// TestRunsGoToTheTenantsOwner: the leader's commit runs each tenant on
// the replica that owns it: tofu runs there, in its data dir, and the
// commit's record holds every tenant's result. A tenant that moves runs
// on its new owner, and once the leader owns it, on the leader.
func TestRunsGoToTheTenantsOwner(t *testing.T) {
	shards := newShards()
	shards.move("staging", "leader")
	shards.move("production", "worker")
	rigs := newReplicaRigs(t, shards, "leader", "worker")
	leader, worker := rigs["leader"], rigs["worker"]

	c := leader.reconcile("rev1", "first", examples(t))
	mustSucceed(t, c)
	if got := shards.sent["worker"]; len(got) != 1 || got[0] != "production" {
		t.Fatalf("runs handed to the worker: %v, want production's", got)
	}
	for _, tr := range c.Status.Tenants {
		if tr.Plan.Add == 0 {
			t.Errorf("%s's result in the commit: %+v, want the plan it applied", tr.Tenant, tr)
		}
	}
	if !ran(leader, "staging") || ran(leader, "production") || !ran(worker, "production") || ran(worker, "staging") {
		t.Fatalf("work dirs: leader staging %v production %v, worker staging %v production %v; want each tenant on its owner alone",
			ran(leader, "staging"), ran(leader, "production"), ran(worker, "staging"), ran(worker, "production"))
	}
	ms := leader.machines()
	if countBy(ms, "production", "") == 0 || countBy(ms, "staging", "") == 0 {
		t.Fatalf("machines after the first commit: %d of production, %d of staging", countBy(ms, "production", ""), countBy(ms, "staging", ""))
	}

	// The worker stops: the leader's run of production finds no owner
	// to take it, and waits. production moves to the leader, and its run
	// happens there, from the state the worker left.
	worker.rec.Close()
	fsys := examples(t)
	f := "production/nodegroups.yaml"
	fsys[f].Data = []byte(strings.Replace(string(fsys[f].Data), "count: 2", "count: 3", 1))
	done := make(chan *schema.Commit)
	go func() { done <- leader.reconcile("rev2", "three production workers", fsys) }()
	for {
		shards.mu.Lock()
		tried := len(shards.sent["worker"])
		shards.mu.Unlock()
		if tried > 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case c := <-done:
		t.Fatalf("the commit finished while production's owner was stopped: %s", c.Status.Phase)
	case <-time.After(200 * time.Millisecond):
	}
	shards.move("production", "leader")
	c = <-done
	mustSucceed(t, c)
	if !ran(leader, "production") {
		t.Fatal("production's run after it moved to the leader did not happen there")
	}
	if got := countBy(leader.machines(), "production", "workers"); got != 3 {
		t.Fatalf("production has %d workers, want 3", got)
	}
}

// ran reports whether a run of tenant happened in r's data dir.
func ran(r *rig, tenant string) bool {
	_, err := os.Stat(filepath.Join(r.rec.opts.DataDir, "work", tenant, render.MainFile))
	return err == nil
}

// TestRemoteRunKeepsSources: a run's manifests travel with the file, line,
// key lines and encrypted values of each object, which JSON leaves out of
// the objects themselves.
func TestRemoteRunKeepsSources(t *testing.T) {
	desired, err := schema.Load(examples(t), ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	td := desired.Tenants[0]
	td.Patches[0].Source.Encrypted = []string{"/spec/patch/0"}
	j := &tenantJob{run: &CommitRun{}, tenant: td.Tenant.Metadata.Name, desired: td}
	b, err := json.Marshal(j.remoteRun())
	if err != nil {
		t.Fatal(err)
	}
	var req RemoteRun
	if err := json.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	got, err := req.desired()
	if err != nil {
		t.Fatal(err)
	}
	pairs := [][2]schema.Source{{got.Tenant.Source, td.Tenant.Source}}
	for i := range td.NodeGroups {
		pairs = append(pairs, [2]schema.Source{got.NodeGroups[i].Source, td.NodeGroups[i].Source})
	}
	for i := range td.Patches {
		pairs = append(pairs, [2]schema.Source{got.Patches[i].Source, td.Patches[i].Source})
	}
	for _, p := range pairs {
		if !p[0].Equal(p[1]) || p[1].File == "" || len(p[1].Lines()) == 0 {
			t.Errorf("source %+v arrived as %+v", p[1], p[0])
		}
	}
	if !got.Encrypted() {
		t.Error("the encrypted values of a patch did not travel")
	}
	req.Sources = req.Sources[1:]
	if _, err := req.desired(); err == nil {
		t.Error("a run with a source missing was taken")
	}
}

// TestDriftChecksGoToTheTenantsOwner: the leader keeps the schedule of
// drift checks and hands each check of a tenant another replica owns to
// that one: its tofu runs there, it records the tenant's Drifted
// condition, and the correction it asks for runs on the owner too. A
// check whose tenant has no owner fails and says so.
func TestDriftChecksGoToTheTenantsOwner(t *testing.T) {
	shards := newShards()
	shards.move("staging", "leader")
	shards.move("production", "worker")
	rigs := newReplicaRigs(t, shards, "leader", "worker")
	leader, worker := rigs["leader"], rigs["worker"]
	repo := examples(t)
	f := repo["production/tenant.yaml"]
	f.Data = []byte(strings.Replace(string(f.Data), "  annotations:\n", "  annotations:\n    "+schema.AnnotationDriftPolicy+": "+schema.DriftPolicyCorrect+"\n", 1))
	mustSucceed(t, leader.reconcile("rev1", "first", repo))

	ctx := context.Background()
	check := func(tenant string) (leaderRuns, workerRuns int64) {
		t.Helper()
		l, w := leader.rec.Runner().Runs(), worker.rec.Runner().Runs()
		if err := leader.rec.DriftCheck(ctx, tenant); err != nil {
			t.Fatalf("drift check of %s: %v", tenant, err)
		}
		return leader.rec.Runner().Runs() - l, worker.rec.Runner().Runs() - w
	}
	if l, w := check("production"); l != 0 || w != 1 {
		t.Fatalf("production's check ran %d tofu processes on the leader, %d on the worker; want 0 and 1", l, w)
	}
	if c := leader.tenant("production").Status.Conditions.Get(schema.ConditionDrifted); c == nil || c.Status != schema.ConditionFalse {
		t.Fatalf("production after a clean check: Drifted %+v", c)
	}
	if l, w := check("staging"); l != 1 || w != 0 {
		t.Fatalf("staging's check ran %d tofu processes on the leader, %d on the worker; want 1 and 0", l, w)
	}

	// A worker machine of production goes behind tofu's back: the check
	// on the worker finds it, and the correction runs on the worker.
	st, err := sim.Open(leader.simDir)
	if err != nil {
		t.Fatal(err)
	}
	list, err := st.List()
	if err != nil {
		t.Fatal(err)
	}
	var gone string
	machines := leader.simMachines("production")
	for _, m := range list {
		if m.Tenant == "production" && m.NodeGroup == "workers" {
			gone = m.ID
		}
	}
	if err := st.Delete(gone); err != nil {
		t.Fatal(err)
	}
	sent := len(shards.sent["worker"])
	if _, w := check("production"); w == 0 {
		t.Fatal("production's check ran no tofu on the worker")
	}
	c := leader.tenant("production").Status.Conditions.Get(schema.ConditionDrifted)
	if c == nil || c.Status != schema.ConditionTrue || !strings.Contains(c.Message, "was deleted") || !strings.Contains(c.Message, "correcting") {
		t.Fatalf("production after its machine went: Drifted %+v", c)
	}
	waitUntil(t, "the correction brings production's machine back", func() bool {
		shards.mu.Lock()
		defer shards.mu.Unlock()
		return leader.simMachines("production") == machines && len(shards.sent["worker"]) > sent+1
	})
	if leader.simMachines("staging") == 0 || ran(leader, "production") {
		t.Fatal("the correction ran on the leader")
	}

	// No replica owns production: its check fails, saying why.
	shards.move("production", "")
	if err := leader.rec.DriftCheck(ctx, "production"); err == nil || !strings.Contains(err.Error(), "the replica that owns it") {
		t.Fatalf("a check of a tenant no replica owns: %v", err)
	}
}

// TestPreemptReachesTheOwner: a job of a newer revision queued behind a
// run that the owner of its tenant runs ends that run's waits on the
// owner too (its drains), as it does on one server; a run that reaches
// the owner after the newer revision came carries it; and a preempt that
// reaches the owner before its run preempts that run when it comes.
func TestPreemptReachesTheOwner(t *testing.T) {
	shards := newShards()
	shards.move("staging", "worker")
	shards.move("production", "worker")
	rigs := newReplicaRigs(t, shards, "leader", "worker")
	leader, worker := rigs["leader"], rigs["worker"]
	st, err := sim.Open(leader.simDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetCreateDelay(3 * time.Second); err != nil {
		t.Fatal(err)
	}
	done := make(chan *schema.Commit)
	go func() { done <- leader.reconcile("rev1", "first", examples(t)) }()
	running := func(r *rig) *tenantJob {
		j, _ := r.rec.queue.job("production").(*tenantJob)
		return j
	}
	waitUntil(t, "production's run on the worker", func() bool { return running(worker) != nil && running(leader) != nil })
	onWorker := running(worker).newerRevision()
	handed := running(leader).remoteRun()
	running(leader).Preempt(&tenantJob{run: &CommitRun{snap: sources.Snapshot{Revision: "rev2"}}})
	select {
	case <-onWorker:
	case <-time.After(10 * time.Second):
		t.Fatal("the run on the worker was not told of the newer revision")
	}

	// A preempt that reaches the owner before its run (sent a moment
	// earlier) preempts the run once it arrives; here it waits behind
	// the run of rev1.
	handed.Revision = "rev3"
	if _, err := worker.rec.RunFor(t.Context(), RemoteRun{Kind: RemotePreempt, Tenant: "production", Revision: "rev3"}); err != nil {
		t.Fatalf("a preempt before its run: %v", err)
	}
	ran := make(chan error, 1)
	go func() {
		_, err := worker.rec.RunFor(t.Context(), handed)
		ran <- err
	}()
	var third *tenantJob
	waitUntil(t, "rev3's run queued on the worker", func() bool {
		third = pendingJob(worker.rec.queue, "production")
		return third != nil
	})
	if third.run.snap.Revision != "rev3" || !third.isPreempted() {
		t.Errorf("the run of %s whose preempt came first: preempted %v", third.run.snap.Revision, third.isPreempted())
	}

	if err := st.SetCreateDelay(0); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, <-done)
	if err := <-ran; err != nil {
		t.Fatalf("rev3's run on the worker: %v", err)
	}

	j := &tenantJob{run: &CommitRun{snap: sources.Snapshot{Revision: "rev1"}}, tenant: "production", preempted: true}
	b, err := json.Marshal(j.remoteRun())
	if err != nil {
		t.Fatal(err)
	}
	var req RemoteRun
	if err := json.Unmarshal(b, &req); err != nil || !req.Preempted {
		t.Fatalf("a run sent after a newer revision came: %+v, %v", req, err)
	}
}

// pendingJob returns the tenant job that waits in q for key, or nil.
func pendingJob(q *Queue, key string) *tenantJob {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.pending[key]; e != nil {
		j, _ := e.job.(*tenantJob)
		return j
	}
	return nil
}

// TestStopEndsTheWaitForAnOwner: a run that waits for a replica to own
// its tenant holds nothing on the leader, so the leader's queue stops it
// at once, not after the grace period that a run of its own has for tofu
// to save its state.
func TestStopEndsTheWaitForAnOwner(t *testing.T) {
	shards := newShards()
	shards.move("staging", "")
	shards.move("production", "")
	leader := newReplicaRigs(t, shards, "leader")["leader"]
	go leader.rec.Reconcile(context.Background(), sources.Snapshot{Revision: "rev1", Ref: "refs/heads/main", Message: "first", FS: examples(t), Root: "."})
	waitUntil(t, "a run waiting for an owner", func() bool {
		j, _ := leader.rec.queue.job("staging").(*tenantJob)
		return j != nil && j.isElsewhere()
	})
	start := time.Now()
	leader.rec.queue.Stop()
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the queue stopped %s after it was asked to; want it at once (grace %s)", took.Round(time.Millisecond), leader.rec.queue.opts.Grace)
	}
}
