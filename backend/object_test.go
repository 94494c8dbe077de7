package backend

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/rezuscloud/rezuscloud/schema"
)

// clock is a settable StoreOptions.Now.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// hooked opens a store in dir with the clock and records the changes of
// every commit.
func hooked(t *testing.T, dir string, c *clock) (*Store, *[][]Change) {
	t.Helper()
	s, err := Open(dir, &StoreOptions{OpenTimeout: 200 * time.Millisecond, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	var got [][]Change
	s.OnCommit(func(cs []Change) { got = append(got, cs) })
	return s, &got
}

// putTx runs PutObject in its own transaction.
func putTx(t *testing.T, s *Store, kind, key string, obj schema.Object) bool {
	t.Helper()
	var changed bool
	if err := s.Update(func(tx *Tx) (err error) { changed, err = tx.PutObject(kind, key, obj); return err }); err != nil {
		t.Fatal(err)
	}
	return changed
}

func storedJSON(t *testing.T, s *Store, kind, key string) string {
	t.Helper()
	var r Resource
	if err := s.View(func(tx *Tx) (err error) { r, err = tx.Get(kind, key); return err }); err != nil {
		t.Fatal(err)
	}
	return string(r.Object)
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestPutObjectStamps(t *testing.T) {
	t0 := time.Date(2026, 4, 1, 12, 0, 0, 0, time.UTC)
	c := &clock{t0}
	s, got := hooked(t, t.TempDir(), c)
	defer s.Close()
	fresh := func(version string) *schema.Tenant {
		tn := &schema.Tenant{APIVersion: schema.APIVersion, Kind: schema.KindTenant, Metadata: schema.ObjectMeta{Name: "alpha"}}
		tn.Spec.KubernetesVersion = version
		return tn
	}

	// A new object gets a uid, createdAt = updatedAt = now, and the next
	// resourceVersion, all inside its stored JSON.
	a := fresh("1.34.1")
	if !putTx(t, s, schema.KindTenant, "alpha", a) {
		t.Fatal("first put reports no change")
	}
	m := a.Metadata
	if !uuidV4.MatchString(m.UID) || !m.CreatedAt.Equal(t0) || !m.UpdatedAt.Equal(t0) || m.ResourceVersion != "1" {
		t.Fatalf("new object stamped %+v, want a v4 uid, times %v and resourceVersion 1", m, t0)
	}
	if stored, want := storedJSON(t, s, schema.KindTenant, "alpha"), mustMarshal(t, a); stored != want {
		t.Errorf("stored %s\nwant %s", stored, want)
	}

	// The same object again, built afresh without bookkeeping: nothing is
	// written, no change is recorded, and obj gets the stored values.
	c.t = t0.Add(time.Hour)
	b := fresh("1.34.1")
	if putTx(t, s, schema.KindTenant, "alpha", b) {
		t.Error("unchanged put reports a change")
	}
	if !cmp.Equal(b.Metadata, m) {
		t.Errorf("unchanged put left metadata %+v, want the stored %+v", b.Metadata, m)
	}
	if len(*got) != 1 {
		t.Fatalf("%d commits with changes, want 1: an unchanged put made an event", len(*got))
	}

	// A change keeps uid and createdAt (whatever the caller set) and takes
	// a new resourceVersion and updatedAt.
	c.t = t0.Add(2 * time.Hour)
	d := fresh("1.34.2")
	d.Metadata.UID, d.Metadata.CreatedAt, d.Metadata.ResourceVersion = "forged", t0.Add(-time.Hour), "99"
	if !putTx(t, s, schema.KindTenant, "alpha", d) {
		t.Fatal("changed put reports no change")
	}
	if d.Metadata.UID != m.UID || !d.Metadata.CreatedAt.Equal(t0) || !d.Metadata.UpdatedAt.Equal(c.t) || d.Metadata.ResourceVersion != "2" {
		t.Errorf("changed object stamped %+v, want uid %s, createdAt %v, updatedAt %v, resourceVersion 2", d.Metadata, m.UID, t0, c.t)
	}
	if len(*got) != 2 || (*got)[1][0].Type != Modified || (*got)[1][0].Resource.ResourceVersion != 2 ||
		string((*got)[1][0].Resource.Object) != mustMarshal(t, d) {
		t.Errorf("changes %+v, want one MODIFIED at 2 with the stored object", *got)
	}

	// A new object keeps the uid and createdAt it comes with.
	p := &schema.Provider{Kind: schema.KindProvider, Metadata: schema.ObjectMeta{Name: "sim", UID: "u-sim", CreatedAt: t0.Add(-48 * time.Hour)}}
	putTx(t, s, schema.KindProvider, "sim", p)
	if p.Metadata.UID != "u-sim" || !p.Metadata.CreatedAt.Equal(t0.Add(-48*time.Hour)) || !p.Metadata.UpdatedAt.Equal(c.t) {
		t.Errorf("new object with a uid stamped %+v", p.Metadata)
	}

	// A delete's change carries the object with the delete's version.
	var rv uint64
	if err := s.Update(func(tx *Tx) (err error) { rv, err = tx.Delete(schema.KindTenant, "alpha"); return err }); err != nil {
		t.Fatal(err)
	}
	last := (*got)[len(*got)-1][0]
	var del schema.Tenant
	if err := json.Unmarshal(last.Resource.Object, &del); err != nil || last.Type != Deleted || del.Metadata.ResourceVersion != strconv.FormatUint(rv, 10) || del.Spec.KubernetesVersion != "1.34.2" {
		t.Errorf("delete change %s %s, %v; want the object at resourceVersion %d", last.Type, last.Resource.Object, err, rv)
	}

	// What PutObject and Put refuse.
	err := s.Update(func(tx *Tx) error {
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
	if err != nil {
		t.Fatal(err)
	}
}

// tenantKeys lists what TenantObjects gives for tenant and kind.
func tenantKeys(t *testing.T, s *Store, tenant, kind string) []string {
	t.Helper()
	out := []string{}
	err := s.View(func(tx *Tx) error {
		return tx.TenantObjects(tenant, kind, func(r Resource) error {
			out = append(out, r.Name)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestTenantIndex(t *testing.T) {
	dir := t.TempDir()
	s, _ := hooked(t, dir, &clock{seedTime})
	seedResources(t, s)
	metal := &schema.Provider{Kind: schema.KindProvider, Metadata: schema.ObjectMeta{Name: "metal", Labels: map[string]string{schema.LabelTenant: "alpha"}}}
	putTx(t, s, schema.KindProvider, "metal", metal)
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
		{"alpha", applied}:                {},
		{"gamma", schema.KindMachine}:     {},
		{"alph", schema.KindMachine}:      {},
	})

	// A machine whose tenant label changes moves; a rolled-back move does
	// not; a deleted one goes.
	m := machineObj("sim-a1", "beta", "workers", schema.RoleWorker, "large", 9)
	putTx(t, s, schema.KindMachine, "sim-a1", m)
	s.Update(func(tx *Tx) error {
		tx.PutObject(schema.KindMachine, "sim-a0", machineObj("sim-a0", "beta", "cp", schema.RoleControlPlane, "small", 8))
		return errors.New("roll back")
	})
	if err := s.Update(func(tx *Tx) error { _, err := tx.Delete(schema.KindMachine, "sim-b0"); return err }); err != nil {
		t.Fatal(err)
	}
	moved := map[[2]string][]string{
		{"alpha", schema.KindMachine}: {"sim-a0", "sim-a2"},
		{"beta", schema.KindMachine}:  {"sim-a1"},
	}
	check("after the move and the delete", moved)
	s.Close()

	// The index is on disk.
	s, _ = hooked(t, dir, &clock{seedTime})
	defer s.Close()
	check("after a reopen", moved)
}

func TestResourceVersionMonotonicAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	var rvs []uint64
	record := func(s *Store) {
		s.OnCommit(func(cs []Change) {
			for _, c := range cs {
				rvs = append(rvs, c.Resource.ResourceVersion)
			}
		})
	}
	for round := range 3 {
		s, err := Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		record(s)
		for i := range 3 {
			id := "sim-" + strconv.Itoa(i)
			putTx(t, s, schema.KindMachine, id, machineObj(id, "alpha", "w", schema.RoleWorker, strconv.Itoa(round), i))
		}
		if err := s.Update(func(tx *Tx) error {
			if _, err := tx.Delete(schema.KindMachine, "sim-0"); err != nil {
				return err
			}
			_, err := tx.Put(applied, "alpha", []byte(strconv.Itoa(round)))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		// A rolled-back transaction gives out nothing anyone sees.
		s.Update(func(tx *Tx) error {
			tx.Put(applied, "beta", []byte("x"))
			return errors.New("roll back")
		})
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if len(rvs) != 15 {
		t.Fatalf("%d changes, want 15: %v", len(rvs), rvs)
	}
	for i := 1; i < len(rvs); i++ {
		if rvs[i] <= rvs[i-1] {
			t.Fatalf("resourceVersions %v are not strictly increasing at %d", rvs, i)
		}
	}
}

// format1Step is one change as a store of format 1 recorded it.
type format1Step struct {
	kind, key string
	obj       any // nil deletes
}

// writeFormat1 writes a store file as a build of format 1 did: objects
// stored as 8 bytes of resourceVersion and their JSON without it, every
// change in the event log, no tenant index.
func writeFormat1(t *testing.T, dir string, steps []format1Step) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(dir, DBFile), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		buckets := map[string]*bolt.Bucket{}
		for _, name := range [][]byte{bucketMeta, bucketResources, bucketStates, bucketLocks, bucketEvents} {
			b, err := tx.CreateBucket(name)
			if err != nil {
				return err
			}
			buckets[string(name)] = b
		}
		meta, events := buckets[string(bucketMeta)], buckets[string(bucketEvents)]
		meta.Put(keyFormat, []byte("1"))
		meta.Put(keyEventsFrom, make([]byte, 8))
		for _, st := range steps {
			rv, _ := meta.NextSequence()
			kb, err := buckets[string(bucketResources)].CreateBucketIfNotExists([]byte(st.kind))
			if err != nil {
				return err
			}
			c := Change{Type: Added, Resource: Resource{Kind: st.kind, Name: st.key, ResourceVersion: rv}}
			old := kb.Get([]byte(st.key))
			switch {
			case st.obj == nil:
				c.Type, c.Resource.Object = Deleted, old[8:]
				err = kb.Delete([]byte(st.key))
			default:
				if old != nil {
					c.Type = Modified
				}
				c.Resource.Object, _ = json.Marshal(st.obj)
				err = kb.Put([]byte(st.key), append(binary.BigEndian.AppendUint64(nil, rv), c.Resource.Object...))
			}
			if err != nil {
				return err
			}
			if err := events.Put(eventKey(rv), encodeChange(c)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMigrateFormat1 opens a file written the old way: the server serves
// the objects and resumes the watches byte for byte as the build of
// format 1 did (testdata/format1.golden.json holds what that build
// served), answers from the tenant index, and continues the sequence.
func TestMigrateFormat1(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	m := machineObj("sim-a0", "alpha", "cp", schema.RoleControlPlane, "small", 4)
	configuring := *m
	configuring.Status.Stage = schema.StageConfiguring
	writeFormat1(t, dir, []format1Step{
		{schema.KindTenant, "alpha", tenantObj("alpha", "prod", 1)},
		{schema.KindNodeGroup, "alpha/cp", nodeGroupObj("alpha", "cp", schema.RoleControlPlane, 1, 2)},
		{schema.KindConfigPatch, "alpha/ntp", patchObj("alpha", "ntp", 3)},
		{schema.KindMachine, "sim-a0", m},
		{schema.KindCommit, keyDir, commitObj(revDir, seedTime.Add(time.Hour), schema.CommitSucceeded)},
		{schema.KindProvider, "sim", &schema.Provider{APIVersion: schema.APIVersion, Kind: schema.KindProvider, Metadata: meta("sim", 6, nil),
			Spec: schema.ProviderSpec{Class: "sim", Source: "registry.opentofu.org/rezuscloud/rezussim", Builtin: true}}},
		{applied, "alpha", map[string]any{"tenant": "alpha"}},
		{schema.KindMachine, "sim-a0", &configuring},
		{schema.KindMachine, "sim-a1", machineObj("sim-a1", "alpha", "cp", schema.RoleControlPlane, "small", 9)},
		{schema.KindMachine, "sim-a1", nil},
	})
	var golden struct {
		Get   map[string]string
		Watch map[string][]string
	}
	b, err := os.ReadFile("testdata/format1.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}

	machines := []string{"sim-a0"}
	for round := range 2 { // the second open finds the current format
		ts := startServer(t, Config{DataDir: dir}, false)
		for path, want := range golden.Get {
			if code, body := ts.do(t, req{method: "GET", path: path}); code != 200 || string(body) != want {
				t.Errorf("open %d: GET %s: %d\n got %s\nwant %s", round, path, code, body, want)
			}
		}
		for path, want := range golden.Watch {
			resp := ts.doResp(t, req{method: "GET", path: path})
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			var got []string
			for len(got) < len(want) && sc.Scan() {
				got = append(got, sc.Text())
			}
			resp.Body.Close()
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("open %d: watch %s (-want +got):\n%s", round, path, diff)
			}
		}
		if diff := cmp.Diff(machines, tenantKeys(t, ts.Store(), "alpha", schema.KindMachine)); diff != "" {
			t.Errorf("open %d: tenant index of machines (-want +got):\n%s", round, diff)
		}
		if got := storedJSON(t, ts.Store(), applied, "alpha"); got != `{"tenant":"alpha"}` {
			t.Errorf("open %d: internal record %s, want it as it was", round, got)
		}
		var format []byte
		ts.Store().db.View(func(tx *bolt.Tx) error { format = tx.Bucket(bucketMeta).Get(keyFormat); return nil })
		if string(format) != storeFormat {
			t.Errorf("open %d: format %q, want %q", round, format, storeFormat)
		}
		id := "sim-n" + strconv.Itoa(round)
		machines = append(machines, id)
		if rv := putObj(t, ts.Store(), schema.KindMachine, id, machineObj(id, "alpha", "cp", schema.RoleControlPlane, "small", 20)); rv != uint64(11+round) {
			t.Errorf("open %d: next resourceVersion %d, want %d", round, rv, 11+round)
		}
		if err := ts.stop(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStoredHeader checks what the header of every stored API object says
// against its JSON: the metadata range decodes to the object's metadata,
// and createdAt is the metadata's.
func TestStoredHeader(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	sd := seedResources(t, s)
	var changes []Change
	s.OnCommit(func(cs []Change) { changes = append(changes, cs...) })
	deleteObj(t, s, schema.KindMachine, "sim-a1")
	n := 0
	check := func(r Resource) {
		t.Helper()
		n++
		var whole schema.ObjectMeta
		if err := objectMeta(r.Object, &whole); err != nil {
			t.Fatal(err)
		}
		var ranged schema.ObjectMeta
		if r.head.metaEnd == 0 || json.Unmarshal(r.Object[r.head.metaStart:r.head.metaEnd], &ranged) != nil || !cmp.Equal(whole, ranged) {
			t.Errorf("%s %s: header range %d..%d gives %+v, want %+v", r.Kind, r.Name, r.head.metaStart, r.head.metaEnd, ranged, whole)
		}
		if r.head.created != whole.CreatedAt.UnixNano() {
			t.Errorf("%s %s: header createdAt %d, want %d", r.Kind, r.Name, r.head.created, whole.CreatedAt.UnixNano())
		}
	}
	err := s.View(func(tx *Tx) error {
		for _, k := range schema.Kinds() {
			if err := tx.Scan(k.Kind, "", func(r Resource) error { check(r); return nil }); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range changes {
		check(c.Resource)
	}
	if want := len(sd.objects) - 2; n != want { // all but the two internal records, sim-a1 as its delete
		t.Errorf("checked %d objects, want %d", n, want)
	}
}

// FuzzStoredValue reads arbitrary bytes as a stored value, as a damaged
// file may hold them: reading it and its metadata must not panic.
func FuzzStoredValue(f *testing.F) {
	obj := machineObj("sim-1", "alpha", "w", schema.RoleWorker, "small", 1)
	data, head, err := encodeObject(obj)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(encodeValue(7, head, data))
	f.Add(encodeValue(7, objectHead{}, []byte(`{"metadata":{"labels":{"a":"b"}}}`)))
	f.Add([]byte("short"))
	f.Add(append(make([]byte, 16), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02, '{', '}'))
	f.Fuzz(func(t *testing.T, v []byte) {
		r, err := decodeResource(schema.KindMachine, "sim-1", v)
		if err != nil {
			return
		}
		var m metaHead
		r.decodeMeta(&m)
		r.createdAt()
	})
}
