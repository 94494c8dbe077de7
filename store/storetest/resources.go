package storetest

import (
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// testRecords: internal records get revisions from the one sequence, the
// same bytes again change nothing, a rolled-back transaction leaves
// nothing and calls no hook, hooks see each commit's changes in order, and
// everything persists across a reopen, where the sequence continues.
func testRecords(t *testing.T, open Opener) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	rec := record(s)
	update(t, s, func(tx store.Tx) error {
		for i, k := range []string{"a", "b"} {
			if rv, err := tx.Put("Record", k, []byte(`{"n":`+strconv.Itoa(i+1)+`}`)); err != nil || rv != uint64(i+1) {
				t.Fatalf("Put = %d, %v; want %d", rv, err, i+1)
			}
		}
		if rv, err := tx.Put("Note", "m1", []byte(`{}`)); err != nil || rv != 3 {
			t.Fatalf("Put = %d, %v; want 3", rv, err)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		if rv, err := tx.Put("Record", "a", []byte(`{"n":1}`)); err != nil || rv != 1 {
			t.Fatalf("Put of the same bytes = %d, %v; want the stored version 1", rv, err)
		}
		if rv, err := tx.Put("Record", "a", []byte(`{"n":10}`)); err != nil || rv != 4 {
			t.Fatalf("Put = %d, %v; want 4", rv, err)
		}
		if rv, err := tx.Delete("Record", "b"); err != nil || rv != 5 {
			t.Fatalf("Delete = %d, %v; want 5", rv, err)
		}
		if _, err := tx.Delete("Record", "b"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Delete of a missing resource: %v, want ErrNotFound", err)
		}
		return nil
	})
	if err := s.Update(func(tx store.Tx) error {
		tx.Put("Record", "c", []byte(`{}`))
		return errRollBack
	}); !errors.Is(err, errRollBack) {
		t.Fatalf("Update = %v, want the function's error", err)
	}
	type ev struct {
		Type       store.EventType
		Kind, Name string
		RV         uint64
		Object     string
	}
	var got [][]ev
	for _, cs := range rec.commits {
		var e []ev
		for _, c := range cs {
			e = append(e, ev{c.Type, c.Resource.Kind, c.Resource.Name, c.Resource.ResourceVersion, string(c.Resource.Object)})
		}
		got = append(got, e)
	}
	want := [][]ev{
		{{store.Added, "Record", "a", 1, `{"n":1}`}, {store.Added, "Record", "b", 2, `{"n":2}`}, {store.Added, "Note", "m1", 3, `{}`}},
		{{store.Modified, "Record", "a", 4, `{"n":10}`}, {store.Deleted, "Record", "b", 5, `{"n":2}`}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("commit hooks (-want +got):\n%s", diff)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = reopen(t, open, dir, Options{})
	update(t, s, func(tx store.Tx) error {
		if rv := tx.ResourceVersion(); rv != 5 {
			t.Errorf("ResourceVersion after reopen = %d, want 5", rv)
		}
		list, err := tx.List("Record")
		if err != nil {
			return err
		}
		if len(list) != 1 || list[0].Name != "a" || list[0].ResourceVersion != 4 || string(list[0].Object) != `{"n":10}` {
			t.Errorf("List = %+v, want a at 4", list)
		}
		if n := tx.Count("Record"); n != 1 {
			t.Errorf("Count = %d, want 1", n)
		}
		if _, err := tx.Get("Record", "c"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("rolled-back resource: %v, want ErrNotFound", err)
		}
		if rv, err := tx.Put("Record", "c", []byte(`{}`)); err != nil || rv != 6 {
			t.Errorf("Put after reopen = %d, %v; want 6", rv, err)
		}
		if _, err := tx.Put("", "x", nil); err == nil {
			t.Error("Put without a kind succeeded")
		}
		return nil
	})
	if err := s.View(func(tx store.Tx) error {
		_, err := tx.Put("Record", "d", []byte(`{}`))
		return err
	}); err == nil {
		t.Fatal("Put in a View succeeded")
	}
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// clock is a settable Options.Now.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// putObject runs PutObject in a transaction of its own.
func putObject(t testing.TB, s store.Store, kind, key string, obj schema.Object) bool {
	t.Helper()
	var changed bool
	update(t, s, func(tx store.Tx) (err error) { changed, err = tx.PutObject(kind, key, obj); return err })
	return changed
}

func storedJSON(t testing.TB, s store.Store, kind, key string) string {
	t.Helper()
	var r store.Resource
	view(t, s, func(tx store.Tx) (err error) { r, err = tx.Get(kind, key); return err })
	return string(r.Object)
}

// testStamps: PutObject stamps uid, createdAt, updatedAt and
// resourceVersion in one place, writes nothing when nothing else differs,
// and a delete's change carries the object at the delete's revision.
func testStamps(t *testing.T, open Opener) {
	t0 := time.Date(2026, 4, 1, 12, 0, 0, 0, time.UTC)
	c := &clock{t0}
	s := reopen(t, open, t.TempDir(), Options{Now: c.now})
	rec := record(s)
	fresh := func(version string) *schema.Tenant {
		tn := &schema.Tenant{APIVersion: schema.APIVersion, Kind: schema.KindTenant, Metadata: schema.ObjectMeta{Name: "alpha"}}
		tn.Spec.KubernetesVersion = version
		return tn
	}

	// A new object gets a uid, createdAt = updatedAt = now, and the next
	// revision, all inside its stored JSON.
	a := fresh("1.34.1")
	if !putObject(t, s, schema.KindTenant, "alpha", a) {
		t.Fatal("first put reports no change")
	}
	m := a.Metadata
	if !uuidV4.MatchString(m.UID) || !m.CreatedAt.Equal(t0) || !m.UpdatedAt.Equal(t0) || m.ResourceVersion != "1" {
		t.Fatalf("new object stamped %+v, want a v4 uid, times %v and resourceVersion 1", m, t0)
	}
	if stored, want := storedJSON(t, s, schema.KindTenant, "alpha"), mustJSON(t, a); stored != want {
		t.Errorf("stored %s\nwant %s", stored, want)
	}

	// The same object again, built afresh without bookkeeping: nothing is
	// written, no change is recorded, and obj gets the stored values.
	c.t = t0.Add(time.Hour)
	b := fresh("1.34.1")
	if putObject(t, s, schema.KindTenant, "alpha", b) {
		t.Error("unchanged put reports a change")
	}
	if !cmp.Equal(b.Metadata, m) {
		t.Errorf("unchanged put left metadata %+v, want the stored %+v", b.Metadata, m)
	}
	if len(rec.commits) != 1 {
		t.Fatalf("%d commits with changes, want 1: an unchanged put made an event", len(rec.commits))
	}

	// A change keeps uid and createdAt (whatever the caller set) and takes
	// a new revision and updatedAt.
	c.t = t0.Add(2 * time.Hour)
	d := fresh("1.34.2")
	d.Metadata.UID, d.Metadata.CreatedAt, d.Metadata.ResourceVersion = "forged", t0.Add(-time.Hour), "99"
	if !putObject(t, s, schema.KindTenant, "alpha", d) {
		t.Fatal("changed put reports no change")
	}
	if d.Metadata.UID != m.UID || !d.Metadata.CreatedAt.Equal(t0) || !d.Metadata.UpdatedAt.Equal(c.t) || d.Metadata.ResourceVersion != "2" {
		t.Errorf("changed object stamped %+v, want uid %s, createdAt %v, updatedAt %v, resourceVersion 2", d.Metadata, m.UID, t0, c.t)
	}
	if len(rec.commits) != 2 || rec.commits[1][0].Type != store.Modified || rec.commits[1][0].Resource.ResourceVersion != 2 ||
		string(rec.commits[1][0].Resource.Object) != mustJSON(t, d) {
		t.Errorf("changes %+v, want one MODIFIED at 2 with the stored object", rec.commits)
	}

	// A new object keeps the uid and createdAt it comes with.
	p := &schema.Provider{Kind: schema.KindProvider, Metadata: schema.ObjectMeta{Name: "sim", UID: "u-sim", CreatedAt: t0.Add(-48 * time.Hour)}}
	putObject(t, s, schema.KindProvider, "sim", p)
	if p.Metadata.UID != "u-sim" || !p.Metadata.CreatedAt.Equal(t0.Add(-48*time.Hour)) || !p.Metadata.UpdatedAt.Equal(c.t) {
		t.Errorf("new object with a uid stamped %+v", p.Metadata)
	}

	// A delete's change carries the object with the delete's revision.
	var rv uint64
	update(t, s, func(tx store.Tx) (err error) { rv, err = tx.Delete(schema.KindTenant, "alpha"); return err })
	last := rec.commits[len(rec.commits)-1][0]
	var del schema.Tenant
	if err := json.Unmarshal(last.Resource.Object, &del); err != nil || last.Type != store.Deleted ||
		del.Metadata.ResourceVersion != strconv.FormatUint(rv, 10) || del.Spec.KubernetesVersion != "1.34.2" {
		t.Errorf("delete change %s %s, %v; want the object at resourceVersion %d", last.Type, last.Resource.Object, err, rv)
	}

	// What PutObject and Put refuse.
	update(t, s, func(tx store.Tx) error {
		ng := &schema.NodeGroup{Kind: schema.KindNodeGroup, Metadata: schema.ObjectMeta{Name: "cp"}}
		if _, err := tx.PutObject(schema.KindNodeGroup, "alpha/cp", ng); err == nil || !strings.Contains(err.Error(), schema.LabelTenant) {
			t.Errorf("node group without a tenant label: %v, want an error naming the label", err)
		}
		if _, err := tx.PutObject("AppliedTenant", "alpha", fresh("1")); err == nil {
			t.Error("PutObject of an internal kind succeeded")
		}
		if _, err := tx.Put(schema.KindTenant, "alpha", []byte(`{}`)); err == nil {
			t.Error("Put of an API kind succeeded")
		}
		return nil
	})
}

// tenantKeys lists what TenantObjects gives for tenant and kind.
func tenantKeys(t testing.TB, s store.Store, tenant, kind string) []string {
	t.Helper()
	out := []string{}
	view(t, s, func(tx store.Tx) error {
		return tx.TenantObjects(tenant, kind, func(r store.Resource) error {
			out = append(out, r.Name)
			return nil
		})
	})
	return out
}

// testTenantIndex: TenantObjects follows the tenant label through puts,
// moves, rolled-back moves, deletes and a reopen.
func testTenantIndex(t *testing.T, open Opener) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	for _, o := range []struct {
		kind, key string
		obj       schema.Object
	}{
		{schema.KindTenant, "alpha", Tenant("alpha", "prod", 1)},
		{schema.KindTenant, "beta", Tenant("beta", "dev", 2)},
		{schema.KindNodeGroup, "alpha/cp", NodeGroup("alpha", "cp", schema.RoleControlPlane, 1, 3)},
		{schema.KindNodeGroup, "alpha/workers", NodeGroup("alpha", "workers", schema.RoleWorker, 2, 4)},
		{schema.KindConfigPatch, "alpha/ntp", Patch("alpha", "ntp", 6)},
		{schema.KindMachine, "sim-a0", Machine("sim-a0", "alpha", "cp", schema.RoleControlPlane, "small", 8)},
		{schema.KindMachine, "sim-a1", Machine("sim-a1", "alpha", "workers", schema.RoleWorker, "large", 9)},
		{schema.KindMachine, "sim-a2", Machine("sim-a2", "alpha", "workers", schema.RoleWorker, "medium", 10)},
		{schema.KindMachine, "sim-b0", Machine("sim-b0", "beta", "cp", schema.RoleControlPlane, "small", 11)},
		{schema.KindProvider, "metal", &schema.Provider{Kind: schema.KindProvider,
			Metadata: schema.ObjectMeta{Name: "metal", Labels: map[string]string{schema.LabelTenant: "alpha"}}}},
	} {
		putObject(t, s, o.kind, o.key, o.obj)
	}
	update(t, s, func(tx store.Tx) error { _, err := tx.Put("AppliedTenant", "alpha", []byte(`{}`)); return err })
	check := func(when string, want map[[2]string][]string) {
		t.Helper()
		for q, keys := range want {
			if diff := cmp.Diff(keys, tenantKeys(t, s, q[0], q[1])); diff != "" {
				t.Errorf("%s: %s of %s (-want +got):\n%s", when, q[1], q[0], diff)
			}
		}
	}
	check("seeded", map[[2]string][]string{
		{"alpha", schema.KindTenant}:      {"alpha"},
		{"alpha", schema.KindNodeGroup}:   {"alpha/cp", "alpha/workers"},
		{"alpha", schema.KindConfigPatch}: {"alpha/ntp"},
		{"alpha", schema.KindMachine}:     {"sim-a0", "sim-a1", "sim-a2"},
		{"beta", schema.KindMachine}:      {"sim-b0"},
		{"alpha", schema.KindProvider}:    {}, // a provider belongs to no tenant, labels or not
		{"alpha", "AppliedTenant"}:        {},
		{"gamma", schema.KindMachine}:     {},
		{"alph", schema.KindMachine}:      {},
	})

	// A machine whose tenant label changes moves; a rolled-back move does
	// not; a deleted one goes.
	putObject(t, s, schema.KindMachine, "sim-a1", Machine("sim-a1", "beta", "workers", schema.RoleWorker, "large", 9))
	s.Update(func(tx store.Tx) error {
		tx.PutObject(schema.KindMachine, "sim-a0", Machine("sim-a0", "beta", "cp", schema.RoleControlPlane, "small", 8))
		return errRollBack
	})
	update(t, s, func(tx store.Tx) error { _, err := tx.Delete(schema.KindMachine, "sim-b0"); return err })
	moved := map[[2]string][]string{
		{"alpha", schema.KindMachine}: {"sim-a0", "sim-a2"},
		{"beta", schema.KindMachine}:  {"sim-a1"},
	}
	check("after the move and the delete", moved)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, open, dir, Options{})
	check("after a reopen", moved)

	ngs, err := decodeNodeGroups(s, "alpha")
	if err != nil || len(ngs) != 2 || ngs[0].Metadata.Name != "cp" || ngs[1].Spec.Count != 2 {
		t.Errorf("DecodeTenantObjects: %+v, %v; want alpha's two node groups", ngs, err)
	}
}

func decodeNodeGroups(s store.Store, tenant string) (ngs []*schema.NodeGroup, err error) {
	err = s.View(func(tx store.Tx) (err error) {
		ngs, err = store.DecodeTenantObjects[schema.NodeGroup](tx, tenant, schema.KindNodeGroup)
		return err
	})
	return ngs, err
}

// testRevisions: revisions strictly increase over puts, deletes and
// records, across reopens; a rolled-back transaction gives out nothing
// anyone sees.
func testRevisions(t *testing.T, open Opener) {
	dir := t.TempDir()
	var rvs []uint64
	var latest []uint64
	for round := range 3 {
		s := open(t, dir, Options{})
		rec := record(s)
		for i := range 3 {
			id := "sim-" + strconv.Itoa(i)
			putObject(t, s, schema.KindMachine, id, Machine(id, "alpha", "w", schema.RoleWorker, strconv.Itoa(round), i))
		}
		update(t, s, func(tx store.Tx) error {
			if _, err := tx.Delete(schema.KindMachine, "sim-0"); err != nil {
				return err
			}
			_, err := tx.Put("AppliedTenant", "alpha", []byte(strconv.Itoa(round)))
			return err
		})
		s.Update(func(tx store.Tx) error {
			tx.Put("AppliedTenant", "beta", []byte("x"))
			return errRollBack
		})
		view(t, s, func(tx store.Tx) error { latest = append(latest, tx.ResourceVersion()); return nil })
		rvs = append(rvs, rec.revisions()...)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if len(rvs) != 15 {
		t.Fatalf("%d changes, want 15: %v", len(rvs), rvs)
	}
	strictlyIncreasing(t, "changes over three opens", rvs)
	if want := []uint64{rvs[4], rvs[9], rvs[14]}; !cmp.Equal(latest, want) {
		t.Errorf("ResourceVersion at the end of each open %v, want the last change's %v", latest, want)
	}
}
