package reconciler

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/schema"
)

// testClock is a clock that a test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// windowRepo is a tenant "shop" whose one maintenance window opens daily
// at 02:00 UTC for two hours, with a control plane and two worker groups;
// batch's machines boot image (empty: the default) replaces them when it
// changes.
func windowRepo(workers, batch int, batchImage string) fstest.MapFS {
	tenant := `apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: shop
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.12.6"
  controlPlaneEndpoint: https://shop.example.internal:6443
  maintenanceWindows:
    - schedule: "0 2 * * *"
      duration: 2h
      timeZone: UTC
`
	group := func(name, role string, count int, image string) string {
		s := fmt.Sprintf("---\napiVersion: rezuscloud.io/v1\nkind: NodeGroup\nmetadata:\n  name: %s\n  labels:\n    rezuscloud.io/tenant: shop\n    rezuscloud.io/role: %s\nspec:\n  count: %d\n  providerClass: sim\n", name, role, count)
		if image != "" {
			s += "  providerConfig:\n    image: " + image + "\n"
		}
		return s
	}
	groups := group("controlplane", "controlplane", 1, "") + group("workers", "worker", workers, "")
	if batch > 0 {
		groups += group("batch", "worker", batch, batchImage)
	}
	return fstest.MapFS{
		"shop/tenant.yaml":     {Data: []byte(tenant)},
		"shop/nodegroups.yaml": {Data: []byte(groups)},
	}
}

// ids returns the ids of the tenant's machines in node group ng.
func (r *rig) ids(ng string) []string {
	var out []string
	for id, m := range r.machines() {
		if m.Spec.NodeGroup == ng {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// TestMaintenanceWindowHoldsBackDisruptiveWork: outside the tenant's
// window a commit that scales one group down and another up adds the
// machines at once and keeps those it removes; the status says what waits
// and when the window opens; once the clock is in the window the waiting
// scale-down runs by itself. A node group removed, and machines a changed
// image would replace, wait the same way.
func TestMaintenanceWindowHoldsBackDisruptiveWork(t *testing.T) {
	clock := &testClock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	r := newRigWith(t, func(o *Options) { o.Now = clock.Now })
	opening := time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC)

	// A new tenant has nothing to disrupt: it is created outside the window.
	mustSucceed(t, r.reconcile("rev1", "create", windowRepo(3, 1, "")))
	if w, b := len(r.ids("workers")), len(r.ids("batch")); w != 3 || b != 1 {
		t.Fatalf("created %d workers and %d batch machines, want 3 and 1", w, b)
	}
	workers := r.ids("workers")

	// Workers 3 -> 1 and batch 1 -> 2 in one commit, outside the window.
	c := r.reconcile("rev2", "scale", windowRepo(1, 2, ""))
	mustSucceed(t, c)
	if w, b := len(r.ids("workers")), len(r.ids("batch")); w != 3 || b != 2 {
		t.Fatalf("outside the window: %d workers and %d batch machines, want 3 (the scale-down waits) and 2 (the scale-up runs)", w, b)
	}
	res := resultOf(t, c, "shop")
	wantMsg := "scale-down of workers (2 machines) waits for the window opening 2026-12-02T02:00:00Z"
	if res.Waiting != wantMsg || !res.NextAttemptAt.Equal(opening) || res.Plan.Add != 1 || res.Plan.Destroy != 0 {
		t.Errorf("commit result: waiting %q next %s plan %s; want %q at %s, plan +1 -0", res.Waiting, res.NextAttemptAt, res.Plan, wantMsg, opening)
	}
	if rc := condOf(t, c.Status.Conditions, schema.ConditionReconciling); rc.Reason != schema.ReasonWaitingForMaintenanceWindow || !strings.Contains(rc.Message, wantMsg) {
		t.Errorf("commit Reconciling = %+v", rc)
	}
	tn := r.tenant("shop")
	rc := condOf(t, tn.Status.Conditions, schema.ConditionReconciling)
	if rc.Status != schema.ConditionTrue || rc.Reason != schema.ReasonWaitingForMaintenanceWindow || rc.Message != wantMsg {
		t.Errorf("tenant Reconciling = %+v, want True/%s %q", rc, schema.ReasonWaitingForMaintenanceWindow, wantMsg)
	}
	if m := tn.Status.Maintenance; m == nil || m.Waiting != "scale-down of workers (2 machines)" || !m.NextWindow.Equal(opening) {
		t.Errorf("tenant status.maintenance = %+v", m)
	}
	// Ready follows the machines of what was applied, not the waiting work.
	if rd := condOf(t, tn.Status.Conditions, schema.ConditionReady); rd.Reason == schema.ReasonProgressing {
		t.Errorf("tenant Ready = %+v, want it to follow the machines", rd)
	}

	// Asked to run again before the window opens, the run waits again.
	later := clock.Now().Add(30 * time.Minute)
	clock.Set(later)
	if got := r.rec.hurry("shop"); got.Action != api.ReconcileQueued {
		t.Fatalf("hurry: %+v", got)
	}
	waitUntil(t, "the hurried run waited again", func() bool {
		sc := r.storedCommit("rev2")
		res := resultOf(t, &sc, "shop")
		return res.FinishedAt.Equal(later) && res.Waiting == wantMsg && r.rec.queue.Depth() == 1
	})
	if w := len(r.ids("workers")); w != 3 {
		t.Fatalf("a run before the window removed workers: %d left", w)
	}

	// In the window, the waiting scale-down runs by itself (here, moved to
	// now, as the queue's timer would at the opening).
	clock.Set(opening.Add(time.Minute))
	hurryPending(t, r.rec, "shop")
	waitUntil(t, "the scale-down ran in the window", func() bool { return len(r.ids("workers")) == 1 })
	waitUntil(t, "the status no longer waits", func() bool {
		tn := r.tenant("shop")
		return tn.Status.Maintenance == nil && !tn.Status.Conditions.IsTrue(schema.ConditionReconciling)
	})
	kept := r.ids("workers")[0]
	if !strings.Contains(strings.Join(workers, " "), kept) {
		t.Errorf("the kept worker %s is not one of the first ones %v", kept, workers)
	}
	waitUntil(t, "the commit's record was amended", func() bool {
		sc := r.storedCommit("rev2")
		res := resultOf(t, &sc, "shop")
		return res.Waiting == "" && res.Plan.Destroy == 2
	})

	// Outside the next window: a new image for batch would replace its
	// machines, and nothing of that plan applies; removing workers' group
	// entirely waits too.
	clock.Set(opening.Add(3 * time.Hour))
	batch := strings.Join(r.ids("batch"), " ")
	c = r.reconcile("rev3", "new batch image", windowRepo(1, 2, "custom-2"))
	mustSucceed(t, c)
	res = resultOf(t, c, "shop")
	if !strings.Contains(res.Waiting, "replacement of 2 resources (rezussim_machine.ng_batch[0], rezussim_machine.ng_batch[1])") ||
		!res.NextAttemptAt.Equal(opening.Add(24*time.Hour)) {
		t.Errorf("replacement outside the window: waiting %q next %s", res.Waiting, res.NextAttemptAt)
	}
	if got := r.ids("batch"); strings.Join(got, " ") != batch && len(got) == 2 {
		t.Errorf("batch machines replaced outside the window: %v, were %s", got, batch)
	}
	c = r.reconcile("rev4", "drop batch", windowRepo(1, 0, ""))
	mustSucceed(t, c)
	if res := resultOf(t, c, "shop"); !strings.HasPrefix(res.Waiting, "removal of node group batch (2 machines) waits for the window opening 2026-12-03T02:00:00Z") {
		t.Errorf("removal outside the window: waiting %q", res.Waiting)
	}
	if b := len(r.ids("batch")); b != 2 {
		t.Errorf("a node group removed outside the window lost machines: %d left", b)
	}
	clock.Set(opening.Add(24*time.Hour + time.Minute))
	hurryPending(t, r.rec, "shop")
	waitUntil(t, "the removal ran in the window", func() bool { return len(r.ids("batch")) == 0 })

	// The tenant leaves git outside a window: its destruction waits.
	clock.Set(opening.Add(27 * time.Hour))
	other := windowRepo(1, 0, "")
	for _, f := range []string{"shop/tenant.yaml", "shop/nodegroups.yaml"} {
		other["other/"+f[len("shop/"):]] = &fstest.MapFile{Data: []byte(strings.ReplaceAll(string(other[f].Data), "shop", "other"))}
		delete(other, f)
	}
	c = r.reconcile("rev5", "shop leaves", other)
	mustSucceed(t, c)
	if res := resultOf(t, c, "shop"); !strings.HasPrefix(res.Waiting, "destruction of the tenant, which left git (2 machines) waits for the window opening 2026-12-04T02:00:00Z") {
		t.Errorf("destruction outside the window: waiting %q", res.Waiting)
	}
	if n := countBy(r.machines(), "shop", ""); n != 2 {
		t.Fatalf("shop has %d machines after leaving git outside its window, want 2", n)
	}
	clock.Set(opening.Add(48*time.Hour + time.Minute))
	hurryPending(t, r.rec, "shop")
	waitUntil(t, "shop destroyed in the window", func() bool { return countBy(r.machines(), "shop", "") == 0 })
}

// TestMaintenanceWindowRetryHoldsBackAgain: when the run that applies a
// commit's non-disruptive part fails, its retry runs the commit as
// declared: it holds the scale-down back again, rather than applying the
// held-back state as if it were the commit and forgetting what waits.
func TestMaintenanceWindowRetryHoldsBackAgain(t *testing.T) {
	clock := &testClock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	r := newRigWith(t, func(o *Options) {
		o.Now = clock.Now
		fastRetries(200*time.Millisecond, time.Second)(o)
	})
	mustSucceed(t, r.reconcile("rev1", "create", windowRepo(3, 1, "")))
	st, err := sim.Open(r.simDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.FailNext(1); err != nil {
		t.Fatal(err)
	}
	c := r.reconcile("rev2", "scale", windowRepo(1, 2, ""))
	if res := resultOf(t, c, "shop"); res.Phase != schema.CommitFailed {
		t.Fatalf("with a failing cloud: %s %s", res.Phase, res.Error)
	}
	waitUntil(t, "the retry added the batch machine", func() bool { return len(r.ids("batch")) == 2 })
	waitUntil(t, "the retry says the scale-down waits", func() bool {
		m := r.tenant("shop").Status.Maintenance
		return m != nil && m.Waiting == "scale-down of workers (2 machines)"
	})
	if w := len(r.ids("workers")); w != 3 {
		t.Fatalf("%d workers after the retry, want 3", w)
	}
	clock.Set(time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC))
	hurryPending(t, r.rec, "shop")
	waitUntil(t, "the scale-down in the window", func() bool { return len(r.ids("workers")) == 1 })
}

// hurryPending moves the tenant's pending run to now. A run still in
// progress (the one that just wrote the status waited for) has not queued
// its next attempt yet, so it asks again until a pending run moved.
func hurryPending(t *testing.T, rec *Reconciler, tenant string) {
	t.Helper()
	waitUntil(t, "a pending run of "+tenant+" to hurry", func() bool {
		return rec.hurry(tenant).Action == api.ReconcileQueued
	})
}
