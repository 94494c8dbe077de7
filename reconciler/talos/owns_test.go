package talos

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// TestObserversSplitTheTenantsTheyOwn: two planes on one store, as two
// replicas run them, each observe the tenant they own and no other: only
// its machines are watched, and their changes reach the store through
// its watches. When a tenant moves from one to the other, the first lets
// its machines go and the second takes them up, and a change of the
// moved tenant still reaches the store.
func TestObserversSplitTheTenantsTheyOwn(t *testing.T) {
	r := newRig(t)
	acme, beta := r.formed("acme", 1, 1), r.formed("beta", 1, 1)
	for _, tr := range []*tenantRig{acme, beta} {
		tr.putMachines()
		tr.putTenant()
	}
	bundles := map[string][]byte{"acme": acme.secrets, "beta": beta.secrets}
	var mu sync.Mutex
	owner := map[string]int{"acme": 0, "beta": 1}
	planes := make([]*Plane, 2)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := range planes {
		opts := r.opts
		opts.Pool = NewPool(PoolOptions{})
		t.Cleanup(opts.Pool.Close)
		opts.Prober = NewProber(opts.Pool, ProberOptions{TTL: time.Hour, Timeout: 2 * time.Second})
		planes[i] = r.newPlane(opts)
		owns := func(tenant string) bool {
			mu.Lock()
			defer mu.Unlock()
			return owner[tenant] == i
		}
		wg.Go(func() {
			planes[i].RunObserver(ctx, ObserverOptions{Interval: 200 * time.Millisecond, Watch: true, Owns: owns,
				Bundle: func(tenant string) []byte { return bundles[tenant] }})
		})
	}
	watchedBy := func(tr *tenantRig, i int) bool {
		for _, m := range tr.ms {
			if !planes[i].watchedNow(m.ID) || !tr.storedStatus(m.ID).Connected {
				return false
			}
		}
		return true
	}
	notWatchedBy := func(tr *tenantRig, i int) bool {
		for _, m := range tr.ms {
			if _, seen := planes[i].prober.Last(m.ID); seen && planes[i].watchedNow(m.ID) {
				return false
			}
		}
		return true
	}
	within(t, 10*time.Second, "acme watched by the first, beta by the second", func() bool {
		return watchedBy(acme, 0) && watchedBy(beta, 1)
	})
	for _, c := range []struct {
		tr *tenantRig
		i  int
	}{{acme, 1}, {beta, 0}} {
		for _, m := range c.tr.ms {
			if _, seen := planes[c.i].prober.Last(m.ID); seen {
				t.Fatalf("machine %s of %s was observed by plane %d, which does not own it", m.ID, c.tr.tenant, c.i)
			}
		}
	}
	change := func(what string, w Machine, tr *tenantRig) {
		t.Helper()
		for _, fault := range []talosnode.Fault{{Unhealthy: "kubelet"}, {}} {
			if err := tr.host.SetFault(w.ID, fault); err != nil {
				t.Fatal(err)
			}
			want := fault.Unhealthy == ""
			within(t, 2*time.Second, what, func() bool { return tr.storedStatus(w.ID).Ready == want })
		}
	}
	change("a change of beta's worker through the second plane", beta.ms[1], beta)

	mu.Lock()
	owner["beta"] = 0
	mu.Unlock()
	within(t, 10*time.Second, "beta moved to the first plane", func() bool {
		return watchedBy(beta, 0) && notWatchedBy(beta, 1)
	})
	change("a change of beta's worker through the first plane", beta.ms[1], beta)
	planes[1].verified.mu.Lock()
	for _, m := range beta.ms {
		if _, kept := planes[1].verified.m[m.ID]; kept {
			t.Errorf("the second plane still keeps what it verified of %s, which moved away", m.ID)
		}
	}
	planes[1].verified.mu.Unlock()
	if !notWatchedBy(acme, 1) {
		t.Fatal("the second plane took up acme, which it does not own")
	}
}

// TestRolloutWaitingReachesAnotherObserver: what a rollout waits for is
// kept in its record, so that the observer of another plane (another
// replica's, which owns the tenant's machines) writes it into the
// tenant's status.rollout at once, although its passes are an hour apart;
// the record's other fields are left as they were saved.
func TestRolloutWaitingReachesAnotherObserver(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 0)
	tr.putMachines()
	tr.putTenant()
	opts := r.opts
	opts.Pool = NewPool(PoolOptions{})
	t.Cleanup(opts.Pool.Close)
	opts.Prober = NewProber(opts.Pool, ProberOptions{TTL: time.Hour, Timeout: 2 * time.Second})
	other := r.newPlane(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		other.RunObserver(ctx, ObserverOptions{Interval: time.Hour, Watch: true, Bundle: func(string) []byte { return tr.secrets }})
	}()
	t.Cleanup(func() { cancel(); <-done })
	within(t, 10*time.Second, "the machine watched by the other plane", func() bool { return other.watchedNow(tr.ms[0].ID) })

	rec := &RolloutRecord{Tenant: "acme", Generation: "g1", Touched: map[string]string{tr.ms[0].ID: "cp"},
		Current: &Operation{Machine: tr.ms[0].ID, NodeGroup: "cp", Op: "apply"}}
	if err := r.plane.save(KindRollout, "acme", rec); err != nil {
		t.Fatal(err)
	}
	rec.Finished = map[string]bool{"elsewhere": true} // not saved: the rollout saves it when its steps say so
	waiting := func() string {
		var tn schema.Tenant
		if err := r.store.View(func(tx store.Tx) error { return tx.GetObject(schema.KindTenant, "acme", &tn) }); err != nil {
			t.Fatal(err)
		}
		if tn.Status.Rollout == nil {
			return ""
		}
		return tn.Status.Rollout.Waiting
	}
	r.plane.reportWaiting(rec, nil, "draining node acme-0")
	within(t, 2*time.Second, "what the rollout waits for, in the status the other plane writes", func() bool {
		return waiting() == "draining node acme-0"
	})
	got, _, err := other.Rollout("acme")
	if err != nil || got.Finished != nil {
		t.Fatalf("the write of what the rollout waits for saved the rest of the record too: finished %v (%v)", got.Finished, err)
	}
	r.plane.report(rec, nil)
	within(t, 2*time.Second, "no wait once the rollout reports none", func() bool { return waiting() == "" })
}
