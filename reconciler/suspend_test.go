package reconciler

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
	"github.com/rezuscloud/rezuscloud/store"
)

// annotate returns repo with annotation key: value added to the Tenant of
// tenant/tenant.yaml.
func annotate(t *testing.T, repo fstest.MapFS, tenant, key, value string) fstest.MapFS {
	t.Helper()
	f := tenant + "/tenant.yaml"
	head := "metadata:\n  name: " + tenant + "\n"
	s := string(repo[f].Data)
	if !strings.Contains(s, head) {
		t.Fatalf("%s has no %q", f, head)
	}
	repo[f].Data = []byte(strings.Replace(s, head, head+"  annotations:\n    "+key+": \""+value+"\"\n", 1))
	if strings.Count(string(repo[f].Data), "annotations:") > 1 {
		t.Fatalf("%s has annotations already; the test must merge them", f)
	}
	return repo
}

// withoutTenant returns repo without the files of tenant.
func withoutTenant(repo fstest.MapFS, tenant string) fstest.MapFS {
	for k := range repo {
		if strings.HasPrefix(k, tenant+"/") {
			delete(repo, k)
		}
	}
	return repo
}

// simMachines counts the machines of a tenant that the sim cloud holds.
func (r *rig) simMachines(tenant string) int {
	r.t.Helper()
	st, err := sim.Open(r.simDir)
	if err != nil {
		r.t.Fatal(err)
	}
	list, err := st.List()
	if err != nil {
		r.t.Fatal(err)
	}
	n := 0
	for _, m := range list {
		if m.Tenant == tenant {
			n++
		}
	}
	return n
}

// runOlder runs tenant's applySteps for an earlier revision rev of repo,
// as a retry of it does (attempt 1), and waits for it.
func (r *rig) runOlder(t *testing.T, rev string, repo fstest.MapFS, tenant string) {
	t.Helper()
	snap := sources.Snapshot{Revision: rev, Ref: "refs/heads/main", FS: repo, Root: "."}
	applied, err := r.rec.appliedRecords()
	if err != nil {
		t.Fatal(err)
	}
	desired, _, probs := r.rec.load(snap, applied)
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	run := &CommitRun{r: r.rec, snap: snap, commit: &schema.Commit{}, results: map[string]*schema.TenantResult{}, done: make(chan struct{})}
	for _, td := range desired.Tenants {
		if td.Tenant.Metadata.Name == tenant {
			(&tenantJob{run: run, tenant: tenant, desired: td, attempt: 1}).Run(context.Background())
			if res := run.results[tenant]; res == nil || res.Reason != schema.ReasonSuspended {
				t.Fatalf("the older revision's run: %+v, want it suspended", res)
			}
			return
		}
	}
	t.Fatalf("no tenant %s in %s", tenant, rev)
}

// TestSuspendHoldsScale: a suspended tenant ignores a scale commit (no
// tofu runs, the sim cloud keeps its machines) and records it as pending
// under the Suspended condition; the commit that removes the annotation
// applies the scale. A bad annotation value is an error at its line.
func TestSuspendHoldsScale(t *testing.T) {
	r := newRig(t)
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	if n := r.simMachines("staging"); n != 2 {
		t.Fatalf("staging has %d sim machines, want 2", n)
	}

	scale := func(repo fstest.MapFS) fstest.MapFS {
		f := "staging/nodegroups.yaml"
		s := string(repo[f].Data)
		if !strings.Contains(s, "count: 1") {
			t.Fatalf("%s has no count: 1", f)
		}
		i := strings.LastIndex(s, "count: 1") // the workers' count
		repo[f].Data = []byte(s[:i] + "count: 3" + s[i+len("count: 1"):])
		return repo
	}

	bad := annotate(t, examples(t), "staging", schema.AnnotationSuspend, "yes")
	c := r.reconcile("rev2", "bad suspend", bad)
	if c.Status.Phase != schema.CommitInvalid || len(c.Status.Problems) != 1 ||
		c.Status.Problems[0].File != "staging/tenant.yaml" || c.Status.Problems[0].Line != 10 ||
		!strings.Contains(c.Status.Problems[0].Message, `"yes"`) {
		t.Fatalf("bad suspend value: phase %s problems %+v", c.Status.Phase, c.Status.Problems)
	}

	runs := r.rec.Runner().Runs()
	c = r.reconcile("rev3", "suspend and scale", scale(annotate(t, examples(t), "staging", schema.AnnotationSuspend, "true")))
	mustSucceed(t, c)
	if got := r.rec.Runner().Runs(); got != runs {
		t.Errorf("a suspended tenant ran tofu %d times", got-runs)
	}
	if n := r.simMachines("staging"); n != 2 {
		t.Errorf("suspended staging has %d sim machines, want 2", n)
	}
	if n := countBy(r.machines(), "staging", ""); n != 2 {
		t.Errorf("suspended staging has %d machines in the store, want 2", n)
	}
	st := r.tenant("staging").Status
	cond := st.Conditions.Get(schema.ConditionSuspended)
	if cond == nil || cond.Status != schema.ConditionTrue || cond.Reason != schema.ReasonSuspended ||
		!strings.Contains(cond.Message, "rev3") || !strings.Contains(cond.Message, "node group workers scaled 1 → 3") {
		t.Fatalf("Suspended condition %+v", cond)
	}
	if p := st.Pending; p == nil || p.Revision != "rev3" || p.Deletion || !strings.Contains(p.Summary, "machines +2 -0") {
		t.Fatalf("pending %+v", p)
	}
	for _, res := range c.Status.Tenants {
		if res.Tenant == "staging" && res.Reason != schema.ReasonSuspended {
			t.Errorf("staging's result %+v does not say it is suspended", res)
		}
	}

	// A run of the applied revision (as a retry or a drift correction
	// makes) stops too, and leaves what waits as it is.
	r.runOlder(t, "rev1", examples(t), "staging")
	if n := r.simMachines("staging"); n != 2 {
		t.Errorf("a run of an older revision changed suspended staging: %d sim machines, want 2", n)
	}
	if p := r.tenant("staging").Status.Pending; p == nil || p.Revision != "rev3" {
		t.Errorf("a run of an older revision replaced what waits: %+v", p)
	}

	// The run's result reaches its commit just before the queue sees the
	// run end.
	var got api.ReconcileTenant
	waitUntil(t, "staging's run to end", func() bool {
		got = r.rec.hurry("staging")
		return got.Action != api.ReconcileRunning
	})
	if got.Action != "UpToDate" || !strings.Contains(got.Message, "suspended") {
		t.Errorf("a reconcile request for suspended staging: %+v, want it to say the tenant is suspended", got)
	}

	c = r.reconcile("rev4", "resume", scale(examples(t)))
	mustSucceed(t, c)
	if n := r.simMachines("staging"); n != 4 {
		t.Errorf("after resuming, staging has %d sim machines, want 4", n)
	}
	st = r.tenant("staging").Status
	if st.Pending != nil || st.Conditions.Get(schema.ConditionSuspended) != nil || st.ObservedCommit != "rev4" {
		t.Errorf("after resuming: pending %+v, conditions %+v, observed %s", st.Pending, st.Conditions, st.ObservedCommit)
	}
}

// TestSuspendedRemovalWaits: a suspended tenant removed from git is not
// destroyed, also when every tenant goes, and is not counted as a
// deletion the guard must allow; a commit that restores it without the
// annotation resumes it, and a later removal destroys it.
func TestSuspendedRemovalWaits(t *testing.T) {
	r := newRig(t)
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	mustSucceed(t, r.reconcile("rev2", "suspend staging", annotate(t, examples(t), "staging", schema.AnnotationSuspend, "true")))

	c := r.reconcile("rev3", "drop staging", withoutTenant(examples(t), "staging"))
	mustSucceed(t, c)
	if n := r.simMachines("staging"); n != 2 {
		t.Fatalf("a suspended tenant removed from git lost sim machines: %d left, want 2", n)
	}
	tn := r.tenant("staging")
	if tn.Metadata.DeletionTimestamp != nil || tn.Status.Pending == nil || !tn.Status.Pending.Deletion || tn.Status.Pending.Revision != "rev3" {
		t.Fatalf("staging after its removal: deletion %v pending %+v", tn.Metadata.DeletionTimestamp, tn.Status.Pending)
	}
	if cond := tn.Status.Conditions.Get(schema.ConditionSuspended); cond == nil || !strings.Contains(cond.Message, "not destroyed while suspended") {
		t.Fatalf("Suspended condition %+v", cond)
	}

	// Every tenant leaves git: production alone would be destroyed, and
	// the guard's message says that staging is not.
	c = r.reconcile("rev4", "remove all", fstest.MapFS{"README.md": {Data: []byte("nothing here")}})
	if c.Status.Phase != schema.CommitPartiallyFailed || !strings.Contains(c.Status.Message, TrailerAllowDeletions+": 1") ||
		!strings.Contains(c.Status.Message, "suspended, so not destroyed: staging") {
		t.Fatalf("remove all: phase %s message %q", c.Status.Phase, c.Status.Message)
	}
	if r.simMachines("production") != 5 || r.simMachines("staging") != 2 {
		t.Fatal("remove all destroyed machines")
	}

	// Restored without the annotation it is applied as declared; then its
	// removal destroys it.
	mustSucceed(t, r.reconcile("rev5", "restore staging", examples(t)))
	// rev5 declares staging as rev1 did: rev1's manifests stay applied.
	if tn := r.tenant("staging"); tn.Status.Pending != nil || tn.Status.ObservedCommit != "rev1" || tn.Status.Conditions.IsTrue(schema.ConditionSuspended) {
		t.Fatalf("restored staging: pending %+v observed %s", tn.Status.Pending, tn.Status.ObservedCommit)
	}
	mustSucceed(t, r.reconcile("rev6", "drop staging", withoutTenant(examples(t), "staging")))
	if n := r.simMachines("staging"); n != 0 {
		t.Fatalf("staging removed after resuming: %d sim machines left", n)
	}
}

// TestSuspendedNewTenant: a tenant that arrives suspended is created
// nowhere but in the status, and leaves no trace when it goes from git.
func TestSuspendedNewTenant(t *testing.T) {
	r := newRig(t)
	repo := annotate(t, examples(t), "staging", schema.AnnotationSuspend, "true")
	mustSucceed(t, r.reconcile("rev1", "first", repo))
	if n := r.simMachines("staging"); n != 0 {
		t.Fatalf("a new suspended tenant got %d sim machines", n)
	}
	if p := r.tenant("staging").Status.Pending; p == nil || !strings.Contains(p.Summary, "tenant added") {
		t.Fatalf("pending %+v", p)
	}
	mustSucceed(t, r.reconcile("rev2", "drop staging", withoutTenant(examples(t), "staging")))
	err := r.srv.Store().View(func(tx store.Tx) error {
		for _, kind := range []string{schema.KindTenant, kindSuspended} {
			if _, err := tx.Get(kind, "staging"); err == nil {
				t.Errorf("%s staging is still stored", kind)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestResumeWithoutChanges: a tenant suspended and resumed by commits that
// change nothing else has nothing pending, runs no tofu, and is no longer
// shown suspended once the annotation goes.
func TestResumeWithoutChanges(t *testing.T) {
	r := newRig(t)
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	runs := r.rec.Runner().Runs()
	mustSucceed(t, r.reconcile("rev2", "suspend staging", annotate(t, examples(t), "staging", schema.AnnotationSuspend, "true")))
	if p := r.tenant("staging").Status.Pending; p == nil || p.Summary != "no changes to the manifests" {
		t.Fatalf("pending %+v", p)
	}
	mustSucceed(t, r.reconcile("rev3", "resume staging", examples(t)))
	st := r.tenant("staging").Status
	if st.Pending != nil || st.Conditions.Get(schema.ConditionSuspended) != nil {
		t.Fatalf("resumed staging: pending %+v, conditions %+v", st.Pending, st.Conditions)
	}
	if got := r.rec.Runner().Runs(); got != runs {
		t.Errorf("suspending and resuming ran tofu %d times", got-runs)
	}
}
