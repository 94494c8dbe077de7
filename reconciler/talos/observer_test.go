package talos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

func TestUpgradingCondition(t *testing.T) {
	rec := RolloutRecord{Tenant: "acme",
		Touched:  map[string]string{"cp-0": "cp", "cp-1": "cp", "w-0": "w"},
		Finished: map[string]bool{"cp-0": true},
		Current:  &Operation{Machine: "cp-1", Name: "rezussim_machine.ng_cp[1]", NodeGroup: "cp", Op: OpUpgrade},
	}
	p := ProgressOf(rec)
	p.Stage = "updating"
	c := status.Upgrading(p, "")
	if c.Status != schema.ConditionTrue || c.Reason != schema.ReasonRollingOut ||
		c.Message != "rolling out: machine 2 of 3, rezussim_machine.ng_cp[1] (cp-1) (upgrade): updating" {
		t.Fatalf("tenant, rolling: %+v", c)
	}
	if c := status.Upgrading(p, "cp"); c.Status != schema.ConditionTrue || !strings.Contains(c.Message, "1 of 2 machines of the node group done; now rezussim_machine.ng_cp[1]") {
		t.Fatalf("group cp, rolling: %+v", c)
	}
	if c := status.Upgrading(p, "w"); c.Status != schema.ConditionTrue || strings.Contains(c.Message, "now") {
		t.Fatalf("group w, waiting its turn: %+v", c)
	}
	if c := status.Upgrading(p, "other"); c.Status != schema.ConditionFalse || c.Reason != schema.ReasonUpToDate {
		t.Fatalf("a group the rollout does not touch: %+v", c)
	}
	// status.rollout names the machine by its host name, for
	// rezusctl get tenants.
	ms := []*schema.Machine{{Metadata: schema.ObjectMeta{Name: "cp-1"}, Spec: schema.MachineSpec{Hostname: "prod-cp-1"}}}
	if st := p.Status(ms); st == nil || st.String() != "machine 2 of 3 (prod-cp-1 updating)" || st.Op != OpUpgrade || st.NodeGroup != "cp" {
		t.Fatalf("status.rollout: %+v", st)
	}
	if st := p.Status(nil); st == nil || st.Machine != "cp-1" {
		t.Fatalf("status.rollout of a machine without a host name: %+v", st)
	}

	rec.Current = nil
	rec.Failed = &Failure{Machine: "w-0", Name: "rezussim_machine.ng_w[0]", NodeGroup: "w", Op: OpUpgrade, Reason: "not back; rolled back to v1.12.6"}
	p = ProgressOf(rec)
	for _, group := range []string{"", "w"} {
		c := status.Upgrading(p, group)
		if c.Status != schema.ConditionFalse || c.Reason != schema.ReasonRolloutFailed || !strings.Contains(c.Message, "rezussim_machine.ng_w[0] (w-0)") {
			t.Fatalf("group %q, stopped: %+v", group, c)
		}
	}
	if c := status.Upgrading(p, "cp"); c.Reason != schema.ReasonUpToDate {
		t.Fatalf("group cp of a rollout stopped in w: %+v", c)
	}
	if st := p.Status(nil); st != nil {
		t.Fatalf("status.rollout of a stopped rollout: %+v", st)
	}
	if c := status.Upgrading(ProgressOf(RolloutRecord{Tenant: "acme", Completed: true}), ""); c.Status != schema.ConditionFalse || c.Reason != schema.ReasonUpToDate {
		t.Fatalf("done: %+v", c)
	}
}

func TestMayHaveArrived(t *testing.T) {
	for err, want := range map[error]bool{
		grpcstatus.Error(codes.Unavailable, "error reading from server: EOF"):                                                          true,
		grpcstatus.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp: connection refused"`): false,
		grpcstatus.Error(codes.PermissionDenied, "not allowed"):                                                                        false,
		errors.New("plain"): false,
	} {
		if got := mayHaveArrived(err); got != want {
			t.Errorf("%v: %v, want %v", err, got, want)
		}
	}
}

func TestBootstrapAgainWhenTheBootstrappedMachineIsGone(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 0)
	ctx := ctxT(t)
	// The control plane is replaced: the old one goes, a new one boots.
	if err := r.host.Remove(tr.ms[0].ID); err != nil {
		t.Fatal(err)
	}
	repl := Machine{ID: "acme-new", Name: "rezussim_machine.ng_cp[0]", Address: r.addr(r.next), NodeGroup: "cp", ControlPlane: true}
	r.next++
	if err := r.host.Boot(repl.ID, repl.Address, tr.cpCfg); err != nil {
		t.Fatal(err)
	}
	rec, err := r.plane.Bootstrap(ctx, "acme", tr.secrets, []Machine{repl})
	if err != nil {
		t.Fatal(err)
	}
	// The new control plane either found members of the cluster (the
	// simulated etcd keeps the old member's) and adopted it, or got a new
	// cluster: the record names it, and it was bootstrapped at most once.
	want := 1
	if rec.Adopted {
		want = 0
	}
	if !rec.Done || rec.Machine != repl.ID {
		t.Fatalf("record %+v, want it done on %s", rec, repl.ID)
	}
	if n := len(r.journal(repl.ID, "Bootstrap")); n != want {
		t.Fatalf("%d bootstraps of the new control plane (adopted %v), want %d", n, rec.Adopted, want)
	}
	// Once done, it stays done.
	if _, err := r.newPlane(r.opts).Bootstrap(ctx, "acme", tr.secrets, []Machine{repl}); err != nil {
		t.Fatal(err)
	}
	if n := len(r.journal(repl.ID, "Bootstrap")); n != want {
		t.Fatalf("%d bootstraps after a rerun, want %d", n, want)
	}
}

// TestRunObserverAfterFirstPass: AfterFirstPass runs once, after the
// first pass has asked for the bundles, however many passes follow.
func TestRunObserverAfterFirstPass(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 1)
	tr.putMachines()
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var mu sync.Mutex
	asked, calls, askedAtCall := 0, 0, -1
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.plane.RunObserver(ctx, ObserverOptions{Interval: 10 * time.Millisecond,
			Bundle: func(string) []byte {
				mu.Lock()
				defer mu.Unlock()
				if asked++; asked == 4 {
					cancel()
				}
				return tr.secrets
			},
			AfterFirstPass: func() {
				mu.Lock()
				defer mu.Unlock()
				calls, askedAtCall = calls+1, asked
			}})
	}()
	<-done
	if calls != 1 || askedAtCall != 1 {
		t.Fatalf("AfterFirstPass called %d times, after %d bundles were asked for; want once, after 1", calls, askedAtCall)
	}
}

// putTenant stores the tenant and its node groups as an apply records
// them.
func (tr *tenantRig) putTenant() {
	tr.t.Helper()
	counts := map[string]int{}
	for _, m := range tr.ms {
		counts[m.NodeGroup]++
	}
	err := tr.store.Update(func(tx store.Tx) error {
		t := &schema.Tenant{APIVersion: schema.APIVersion, Kind: schema.KindTenant, Metadata: schema.ObjectMeta{Name: tr.tenant, Generation: 1},
			Status: schema.TenantStatus{ObservedCommit: "0123456789abcdef"}}
		if _, err := tx.PutObject(schema.KindTenant, tr.tenant, t); err != nil {
			return err
		}
		for name, n := range counts {
			role := schema.RoleWorker
			if name == "cp" {
				role = schema.RoleControlPlane
			}
			ng := &schema.NodeGroup{APIVersion: schema.APIVersion, Kind: schema.KindNodeGroup,
				Metadata: schema.ObjectMeta{Name: name, Labels: map[string]string{schema.LabelTenant: tr.tenant, schema.LabelRole: role}},
				Spec:     schema.NodeGroupSpec{Count: n, ProviderClass: "sim"}}
			if _, err := tx.PutObject(schema.KindNodeGroup, tr.tenant+"/"+name, ng); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tr.t.Fatal(err)
	}
}

// TestObserverWritesNothingForASteadyTenant: once the observer has written
// what the machines say, passes that probe every machine again (each
// observation seen at a new time) send a watch of the tenant no event at
// all, whether a rollout record exists or not.
func TestObserverWritesNothingForASteadyTenant(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 2)
	tr.putMachines()
	tr.putTenant()
	ctx := ctxT(t)
	opts := r.opts
	opts.Prober = NewProber(r.pool, ProberOptions{TTL: time.Nanosecond})
	pl := r.newPlane(opts)
	bundles := func(string) []byte { return tr.secrets }
	steady := func(what string) {
		t.Helper()
		for range 2 { // the first pass writes what it finds
			if err := pl.ObserveOnce(ctx, bundles); err != nil {
				t.Fatal(err)
			}
		}
		var rv uint64
		r.store.View(func(tx store.Tx) error { rv = tx.ResourceVersion(); return nil })
		for range 2 {
			if err := pl.ObserveOnce(ctx, bundles); err != nil {
				t.Fatal(err)
			}
		}
		var events []string
		r.store.View(func(tx store.Tx) error {
			return tx.Events(rv, func(c store.Change) error {
				events = append(events, fmt.Sprintf("%s %s %s", c.Type, c.Resource.Kind, c.Resource.Name))
				return nil
			})
		})
		if len(events) != 0 {
			t.Errorf("%s: two passes over a steady tenant sent a watch %d events: %v", what, len(events), events)
		}
		var tn schema.Tenant
		r.store.View(func(tx store.Tx) error { return tx.GetObject(schema.KindTenant, "acme", &tn) })
		if tn.Status.Phase != schema.TenantActive || tn.Status.Rollout != nil || !tn.Status.Conditions.IsTrue(schema.ConditionReady) {
			t.Errorf("%s: the tenant is not steady: %+v", what, tn.Status)
		}
	}
	steady("no rollout yet")
	if _, err := pl.Roll(ctx, tr.desired(tr.cpCfg, tr.wCfg, "1.12.6")); err != nil {
		t.Fatal(err)
	}
	steady("a rollout that found nothing to change")
}

// TestRolloutProgressMovesOnWhenAMachineIsDone: the record the observer
// reads counts a machine finished as soon as its operation is, so that
// the tenant never shows the machine just done as the one that waits for
// its gates, and a rollout whose last machine is done is over.
func TestRolloutProgressMovesOnWhenAMachineIsDone(t *testing.T) {
	r := newRig(t)
	d := Desired{Tenant: "acme"}
	rec := &RolloutRecord{Tenant: "acme", Touched: map[string]string{"cp-0": "cp", "w-0": "w"},
		Current: &Operation{Machine: "cp-0", NodeGroup: "cp", Op: OpApply, Issued: true}}
	stored := func() status.Rollout {
		t.Helper()
		got, found, err := r.plane.Rollout("acme")
		if err != nil || !found {
			t.Fatalf("rollout record: %v %v", found, err)
		}
		return ProgressOf(got)
	}
	if err := r.plane.done(d, rec); err != nil {
		t.Fatal(err)
	}
	if p := stored(); !p.Active || p.N != 2 || p.Machine != "" || p.Groups["cp"].Finished != 1 {
		t.Fatalf("after the first of two machines: %+v, want machine 2 of 2 waiting for its gates", p)
	}
	rec.Current = &Operation{Machine: "w-0", NodeGroup: "w", Op: OpApply, Issued: true}
	if err := r.plane.done(d, rec); err != nil {
		t.Fatal(err)
	}
	if p := stored(); p.Active || p.Groups["w"].Finished != 1 {
		t.Fatalf("after the last machine: %+v, want the rollout over", p)
	}
	// A machine that needs another operation is not finished.
	r.plane.track(rec, []work{{m: Machine{ID: "w-0", NodeGroup: "w"}, op: OpUpgrade}})
	if rec.Finished["w-0"] || !rec.Finished["cp-0"] {
		t.Fatalf("finished after a plan that needs w-0 again: %v", rec.Finished)
	}
}

// TestObserverMachineListFollowsTheStore: the observer's passes read the
// stored Machines again only after a write changed one of them; until
// then they share what the last read found.
func TestObserverMachineListFollowsTheStore(t *testing.T) {
	st, err := bolt.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	pool := NewPool(PoolOptions{})
	t.Cleanup(pool.Close)
	pl, err := New(Options{Store: st, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	write := func(fn func(store.Tx) error) {
		t.Helper()
		if err := st.Update(fn); err != nil {
			t.Fatal(err)
		}
	}
	putMachine := func(name string) func(store.Tx) error {
		return func(tx store.Tx) error {
			_, err := tx.PutObject(schema.KindMachine, name, &schema.Machine{APIVersion: schema.APIVersion, Kind: schema.KindMachine,
				Metadata: schema.ObjectMeta{Name: name, Labels: map[string]string{schema.LabelTenant: "acme"}},
				Spec:     schema.MachineSpec{Tenant: "acme", ManagementAddress: "127.0.0.9", TFAddress: "m." + name}})
			return err
		}
	}
	ids := func(byTenant map[string][]Machine) []string {
		var out []string
		for _, m := range byTenant["acme"] {
			out = append(out, m.ID)
		}
		return out
	}
	read := func() map[string][]Machine {
		t.Helper()
		byTenant, err := pl.storedMachines()
		if err != nil {
			t.Fatal(err)
		}
		return byTenant
	}
	write(putMachine("a"))
	first := read()
	write(func(tx store.Tx) error {
		_, err := tx.Put(KindBootstrap, "acme", []byte(`{"tenant":"acme"}`))
		return err
	})
	if again := read(); fmt.Sprint(ids(again)) != "[a]" || fmt.Sprintf("%p", again) != fmt.Sprintf("%p", first) {
		t.Errorf("after a write of no Machine: %v, read again (%p, first %p)", ids(again), again, first)
	}
	write(putMachine("b"))
	if got := ids(read()); fmt.Sprint(got) != "[a b]" {
		t.Errorf("after a new Machine: %v, want [a b]", got)
	}
	write(func(tx store.Tx) error { _, err := tx.Delete(schema.KindMachine, "a"); return err })
	if got := ids(read()); fmt.Sprint(got) != "[b]" {
		t.Errorf("after a deleted Machine: %v, want [b]", got)
	}
}

// TestTenantsAreRecordedAgainOnlyWhenSomethingOfThemChanged: the
// observer records a tenant's status again when what it saw of the tenant
// changed, or when a commit changed any Tenant, NodeGroup or Machine; a
// commit of anything else changes nothing of a tenant's status.
func TestTenantsAreRecordedAgainOnlyWhenSomethingOfThemChanged(t *testing.T) {
	var w tenantsWritten
	obs := map[string]status.Observation{"acme": {APIAnswers: true}, "beta": {}}
	if due := w.due(w.inputs.Load(), obs); len(due) != 2 {
		t.Fatalf("nothing recorded yet: %d due, want both", len(due))
	}
	w.recorded(w.inputs.Load(), obs)
	if due := w.due(w.inputs.Load(), obs); len(due) != 0 {
		t.Errorf("nothing changed: %v due", due)
	}
	moved := map[string]status.Observation{"acme": {APIAnswers: true}, "beta": {Rollout: status.Rollout{Machine: "m1"}}}
	if due := w.due(w.inputs.Load(), moved); len(due) != 1 || due["beta"].Rollout.Machine != "m1" {
		t.Errorf("beta's rollout moved: %v due, want beta alone", due)
	}
	w.follow([]store.Change{{Resource: store.Resource{Kind: "Commit", Name: "0123"}}})
	if due := w.due(w.inputs.Load(), obs); len(due) != 0 {
		t.Errorf("a commit of a Commit: %v due, want none", due)
	}
	for _, kind := range []string{schema.KindTenant, schema.KindNodeGroup, schema.KindMachine} {
		w.recorded(w.inputs.Load(), obs)
		w.follow([]store.Change{{Resource: store.Resource{Kind: "Commit"}}, {Resource: store.Resource{Kind: kind}}})
		if due := w.due(w.inputs.Load(), obs); len(due) != 2 {
			t.Errorf("a commit that changed a %s: %d due, want both", kind, len(due))
		}
	}
}

// TestAnAPIThatDoesNotAnswerIsLookedAtLessOften: a tenant whose control
// plane runs kube-apiserver, as Talos says, but whose API does not answer
// (nothing listens at its endpoint) is looked at every interval six times
// in a row, then after twice as long at each look, up to kubeRetryMax.
func TestAnAPIThatDoesNotAnswerIsLookedAtLessOften(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 0)
	tr.putMachines()
	tr.putTenant()
	err := r.store.Update(func(tx store.Tx) error {
		var tn schema.Tenant
		if err := tx.GetObject(schema.KindTenant, "acme", &tn); err != nil {
			return err
		}
		tn.Spec.ControlPlaneEndpoint = "https://" + tr.ms[0].Address + ":6443"
		_, err := tx.PutObject(schema.KindTenant, "acme", &tn)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	now := start
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	opts := r.opts
	opts.Now = clock
	pl := r.newPlane(opts)
	ctx := ctxT(t)
	const every = 10 * time.Second
	var looks []time.Duration
	for range 60 {
		o := ObserverOptions{Bundle: func(string) []byte { return tr.secrets }, KubernetesInterval: every}
		if err := pl.observeOnce(ctx, o); err != nil {
			t.Fatal(err)
		}
		pl.kube.mu.Lock()
		last := pl.kube.last["acme"]
		pl.kube.mu.Unlock()
		if at := last.Sub(start); len(looks) == 0 || looks[len(looks)-1] != at {
			looks = append(looks, at)
		}
		mu.Lock()
		now = now.Add(every)
		mu.Unlock()
	}
	want := []time.Duration{0, 10, 20, 30, 40, 50, 60, 80, 120, 200, 320, 440, 560}
	for i := range want {
		want[i] *= time.Second
	}
	if fmt.Sprint(looks) != fmt.Sprint(want) {
		t.Errorf("looks at an API that does not answer, over 10 minutes: %v, want %v", looks, want)
	}
}
