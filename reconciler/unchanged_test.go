package reconciler

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/modeldiff"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// storeWrites counts the resources written to a store, by kind, and the
// keys written of each kind.
type storeWrites struct {
	mu   sync.Mutex
	keys map[string][]string
}

func countWrites(s store.Store) *storeWrites {
	w := &storeWrites{keys: map[string][]string{}}
	s.OnCommit(func(changes []store.Change) {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, c := range changes {
			w.keys[c.Resource.Kind] = append(w.keys[c.Resource.Kind], c.Resource.Name)
		}
	})
	return w
}

// reset forgets what was counted and returns it.
func (w *storeWrites) reset() map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := w.keys
	w.keys = map[string][]string{}
	return keys
}

// tenantKinds are the kinds whose records belong to one tenant.
var tenantKinds = []string{schema.KindTenant, schema.KindNodeGroup, schema.KindConfigPatch, schema.KindMachine, kindApplied}

// tenantWrites returns the writes of records of tenant ("" for any).
func tenantWrites(keys map[string][]string, tenant string, machineTenant func(string) string) []string {
	var out []string
	for _, kind := range tenantKinds {
		for _, key := range keys[kind] {
			owner := key
			switch kind {
			case schema.KindNodeGroup, schema.KindConfigPatch:
				owner, _, _ = strings.Cut(key, "/")
			case schema.KindMachine:
				owner = machineTenant(key)
			}
			if tenant == "" || owner == tenant {
				out = append(out, kind+" "+key)
			}
		}
	}
	return out
}

// withFile returns fsys with one more file.
func withFile(fsys fstest.MapFS, name, content string) fstest.MapFS {
	out := fstest.MapFS{}
	for k, v := range fsys {
		out[k] = v
	}
	out[name] = &fstest.MapFile{Data: []byte(content), Mode: 0o644}
	return out
}

func TestNoChangeCommitWritesNoTenantRecord(t *testing.T) {
	r := newRig(t)
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	machines := r.machines()
	machineTenant := func(id string) string { return machines[id].Spec.Tenant }
	writes := countWrites(r.srv.Store())
	runs := r.rec.Runner().Runs()

	c := r.reconcile("rev2", "reword the readme", withFile(examples(t), "README.md", "# Clusters, reworded\n"))
	mustSucceed(t, c)
	if len(c.Status.Tenants) != 2 {
		t.Fatalf("results %+v: want one per tenant", c.Status.Tenants)
	}
	for _, res := range c.Status.Tenants {
		if res.Phase != schema.CommitSucceeded || res.OutputTail != "" {
			t.Errorf("%s: %s with output %q, want Succeeded without a run", res.Tenant, res.Phase, res.OutputTail)
		}
	}
	if got := r.rec.Runner().Runs(); got != runs {
		t.Errorf("%d tofu runs for a commit that changes no manifest", got-runs)
	}
	keys := writes.reset()
	if w := tenantWrites(keys, "", machineTenant); len(w) > 0 {
		t.Errorf("a commit that changes no manifest wrote tenant records: %v", w)
	}
	if len(keys[schema.KindCommit]) == 0 {
		t.Error("the commit's record was not written")
	}
	// The tenants' records stay those of the commit that last changed them.
	if got := r.tenant("production").Status.ObservedCommit; got != "rev1" {
		t.Errorf("production observedCommit %s, want rev1", got)
	}

	// A commit that changes one tenant writes that tenant's records only.
	mustSucceed(t, r.reconcile("rev3", "scale staging", withStagingWorkers(t, "2")))
	keys = writes.reset()
	if w := tenantWrites(keys, "production", machineTenant); len(w) > 0 {
		t.Errorf("a commit that changes only staging wrote production's records: %v", w)
	}
	if w := tenantWrites(keys, "staging", machineTenant); len(w) == 0 {
		t.Error("a commit that changes staging wrote none of its records")
	}
	if st := r.tenant("staging").Status; st.ObservedCommit != "rev3" {
		t.Errorf("staging observedCommit %s, want rev3", st.ObservedCommit)
	}
}

// TestUnsettledTenantRunsAgain: a tenant whose last run failed is not
// quiet when a commit brings back the manifests last applied to it; its
// run clears the failure.
func TestUnsettledTenantRunsAgain(t *testing.T) {
	r := newRigWith(t, fastRetries(time.Hour, time.Hour))
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	r.lockState("staging", "held-elsewhere")
	c := r.reconcile("rev2", "scale staging", withStagingWorkers(t, "2"))
	if tr := resultOf(t, c, "staging"); tr.Phase != schema.CommitFailed {
		t.Fatalf("staging %+v: want the locked state to fail it", tr)
	}
	r.unlockState("staging", "held-elsewhere")
	mustSucceed(t, r.reconcile("rev3", "back to rev1", examples(t)))
	if st := r.tenant("staging").Status; st.Retry != nil || st.ObservedCommit != "rev3" || st.Conditions.IsTrue(schema.ConditionReconciling) {
		t.Errorf("staging after rev3: retry %+v, observed %s, conditions %+v: want the failure cleared by rev3", st.Retry, st.ObservedCommit, st.Conditions)
	}
	if d := r.rec.Queue().Depth(); d != 0 {
		t.Errorf("%d runs still queued: the retry was not superseded", d)
	}
}

// TestRestartRunsNoTofu restarts the reconciler on the data dir of an
// applied fleet: recovery and the current revision run no tofu and write
// no tenant record.
func TestRestartRunsNoTofu(t *testing.T) {
	r := newRig(t)
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	machines := r.machines()
	r.rec.Close()

	writes := countWrites(r.srv.Store())
	runs := r.rec.Runner().Runs()
	again, err := New(r.srv.Store(), r.rec.runner, render.Builtin(), r.rec.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(again.Close)
	again.Recover()
	r.rec = again
	// The source yields the revision it last fetched, then a new one.
	for _, rev := range []string{"rev1", "rev2"} {
		mustSucceed(t, r.reconcile(rev, "after a restart", examples(t)))
	}
	if got := again.Runner().Runs(); got != runs {
		t.Errorf("%d tofu runs after a restart with nothing changed", got-runs)
	}
	if w := tenantWrites(writes.reset(), "", func(id string) string { return machines[id].Spec.Tenant }); len(w) > 0 {
		t.Errorf("the restart wrote tenant records: %v", w)
	}
}

// blobFS names each file's content, as a commit's file system does, so
// that the manifest cache keeps what it parsed across restarts.
type blobFS struct{ fs.FS }

func (b blobFS) ContentHash(name string) (string, bool) {
	data, err := fs.ReadFile(b.FS, name)
	if err != nil {
		return "", false
	}
	sum := sha256.Sum256(data)
	return "test-blob:" + hex.EncodeToString(sum[:]), true
}

// restart closes the rig's reconciler and starts a new one on its data
// dir, as a new process does.
func (r *rig) restart() *Reconciler {
	r.t.Helper()
	r.rec.Close()
	again, err := New(r.srv.Store(), r.rec.runner, render.Builtin(), r.rec.opts)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(again.Close)
	again.Recover()
	r.rec = again
	return again
}

// TestRestartDecodesManifests: a restart on the revision applied parses no
// manifest, because the manifest cache's file in the data dir holds them,
// and still runs no tofu and writes no tenant record; after a restart, a
// revision that changed a file parses that file, and applies its tenant.
func TestRestartDecodesManifests(t *testing.T) {
	r := newRig(t)
	mustSucceed(t, r.reconcile("rev1", "first", blobFS{examples(t)}))
	files := r.rec.manifests.Stats().Misses
	machines := r.machines()
	runs := r.rec.Runner().Runs()
	writes := countWrites(r.srv.Store())
	again := r.restart()
	mustSucceed(t, r.reconcile("rev1", "after a restart", blobFS{examples(t)}))
	if s := again.manifests.Stats(); files == 0 || s.Misses != 0 || s.Stored != files {
		t.Errorf("after a restart: %+v: want all %d files from the manifest cache's file, none parsed", s, files)
	}
	if got := again.Runner().Runs(); got != runs {
		t.Errorf("%d tofu runs after a restart with nothing changed", got-runs)
	}
	if w := tenantWrites(writes.reset(), "", func(id string) string { return machines[id].Spec.Tenant }); len(w) > 0 {
		t.Errorf("the restart wrote tenant records: %v", w)
	}

	again = r.restart()
	mustSucceed(t, r.reconcile("rev2", "scale staging", blobFS{withStagingWorkers(t, "2")}))
	if s := again.manifests.Stats(); s.Misses != 1 || s.Stored != files-1 {
		t.Errorf("a changed file after a restart: %+v: want it parsed and the %d others decoded", s, files-1)
	}
	if got := countBy(r.machines(), "staging", "workers"); got != 2 {
		t.Errorf("staging has %d workers after rev2, want 2", got)
	}
}

// TestAppliedIndexFollowsStore: the index of applied records and settled
// statuses starts from what the store holds and follows every write to
// it, whoever makes it, so that the quiet check reads no record.
func TestAppliedIndexFollowsStore(t *testing.T) {
	st, err := bolt.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	putTenant := func(name string, status schema.TenantStatus) {
		t.Helper()
		err := st.Update(func(tx store.Tx) error {
			_, err := tx.PutObject(schema.KindTenant, name, &schema.Tenant{APIVersion: schema.APIVersion, Kind: schema.KindTenant,
				Metadata: schema.ObjectMeta{Name: name}, Status: status})
			if err == nil {
				_, err = tx.Put(kindApplied, name, mustJSON(&appliedRecord{Tenant: name, Revision: "rev1", InputHash: "h-" + name,
					Annotations: map[string]string{AnnotationDeletionProtection: "true"}, Model: modeldiff.Model{}}))
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	ok := schema.TenantStatus{ObservedCommit: "rev1"}
	putTenant("a", ok)
	idx, err := openIndex(st)
	if err != nil {
		t.Fatal(err)
	}
	putTenant("b", ok)
	stalled := ok
	stalled.Conditions = stalled.Conditions.Set(schema.Condition{Type: schema.ConditionStalled, Status: schema.ConditionTrue, Reason: "InvalidManifests"}, time.Now())
	putTenant("c", stalled)
	if got := idx.isSettled([]string{"a", "b", "c", "d"}); !got["a"] || !got["b"] || got["c"] || got["d"] {
		t.Errorf("settled %v: want a and b, not the stalled c nor the unknown d", got)
	}
	recs, err := idx.records()
	if err != nil || len(recs) != 3 || recs["b"].InputHash != "h-b" || recs["a"].Annotations[AnnotationDeletionProtection] != "true" {
		t.Fatalf("records %v, %v: want a, b and c with their hashes and annotations", recs, err)
	}
	putTenant("c", ok)
	err = st.Update(func(tx store.Tx) error {
		if _, err := tx.Delete(kindApplied, "a"); err != nil {
			return err
		}
		_, err := tx.Delete(schema.KindTenant, "a")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	recs, _ = idx.records()
	if got := idx.isSettled([]string{"a", "c"}); got["a"] || !got["c"] || recs["a"] != nil {
		t.Errorf("settled %v, record of a %v: want a gone and c settled again", got, recs["a"])
	}
	idx.stop()
	putTenant("e", ok)
	if got := idx.isSettled([]string{"e"}); got["e"] {
		t.Error("a stopped index follows the store")
	}
}

// TestAppliedIndexMachines: the index tells, from the Machines it
// followed, whether the Talos plane works on a tenant's machines and
// whether a bare-metal one is not connected, as the stored machines say,
// through puts, status changes and deletes, the ones written before it
// opened included.
func TestAppliedIndexMachines(t *testing.T) {
	st, err := bolt.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	put := func(name, tenant, class, address string, connected bool) {
		t.Helper()
		m := &schema.Machine{APIVersion: schema.APIVersion, Kind: schema.KindMachine,
			Metadata: schema.ObjectMeta{Name: name, Labels: map[string]string{schema.LabelTenant: tenant}},
			Spec:     schema.MachineSpec{Tenant: tenant, ProviderClass: class, ManagementAddress: address},
			Status:   schema.MachineStatus{Connected: connected}}
		if err := st.Update(func(tx store.Tx) error { _, err := tx.PutObject(schema.KindMachine, name, m); return err }); err != nil {
			t.Fatal(err)
		}
	}
	var idx *appliedIndex
	check := func(tenant string, wantTalos, wantMetal bool) {
		t.Helper()
		talos, metal, err := idx.talosFacts(tenant)
		if err != nil || talos != wantTalos || metal != wantMetal {
			t.Errorf("%s: plane's machines %v, a bare-metal one not connected %v (%v); want %v, %v", tenant, talos, metal, err, wantTalos, wantMetal)
		}
	}
	put("a-1", "a", "sim", "127.0.0.2", true)
	if idx, err = openIndex(st); err != nil {
		t.Fatal(err)
	}
	put("b-1", "b", "metal", "127.0.0.3", false)
	put("c-1", "c", "oci", "127.0.0.5", true)
	put("d-1", "d", "sim", "", true)
	check("a", true, false)
	check("b", true, true)
	check("c", true, false)  // every provider class whose machine has an address
	check("d", false, false) // no management address
	check("e", false, false)
	put("b-2", "b", "metal", "127.0.0.4", true)
	put("b-1", "b", "metal", "127.0.0.3", true) // the observer saw it connected
	check("b", true, false)
	put("b-1", "b", "metal", "127.0.0.3", false)
	if err := st.Update(func(tx store.Tx) error { _, err := tx.Delete(schema.KindMachine, "b-1"); return err }); err != nil {
		t.Fatal(err)
	}
	check("b", true, false)
	if err := st.Update(func(tx store.Tx) error { _, err := tx.Delete(schema.KindMachine, "b-2"); return err }); err != nil {
		t.Fatal(err)
	}
	check("b", false, false)
}

// TestObservedWithFirstRecord: a new revision is named the last one
// received in the same store write as the first record of its Commit, not
// in a write of its own; an invalid revision and a rerun of a finished one,
// whose record is left alone, are still named.
func TestObservedWithFirstRecord(t *testing.T) {
	r := newRig(t)
	var mu sync.Mutex
	var writes [][]string
	r.srv.Store().OnCommit(func(changes []store.Change) {
		var kinds []string
		for _, c := range changes {
			kinds = append(kinds, c.Resource.Kind)
		}
		mu.Lock()
		writes = append(writes, kinds)
		mu.Unlock()
	})
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	mu.Lock()
	for _, kinds := range writes {
		if slices.Contains(kinds, kindObserved) && !slices.Contains(kinds, schema.KindCommit) {
			t.Errorf("the observed revision was written on its own: %v (all writes: %v)", kinds, writes)
		}
	}
	mu.Unlock()
	if got := r.rec.LastObserved(); got != "rev1" {
		t.Fatalf("last observed %q, want rev1", got)
	}
	bad := fstest.MapFS{"bad.yaml": {Data: []byte("apiVersion: rezuscloud.io/v1\nkind: Tenant\nmetadata: {name: x}\nspec: {count: three}\n")}}
	if c := r.reconcile("rev2", "bad", bad); c.Status.Phase != schema.CommitInvalid {
		t.Fatalf("rev2: %s, want Invalid", c.Status.Phase)
	}
	if got := r.rec.LastObserved(); got != "rev2" {
		t.Errorf("after an invalid revision: last observed %q, want rev2", got)
	}
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	if got := r.rec.LastObserved(); got != "rev1" {
		t.Errorf("after a rerun of a finished revision: last observed %q, want rev1", got)
	}
}
