package bolt

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bbolt "go.etcd.io/bbolt"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/storetest"
)

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
	db, err := bbolt.Open(filepath.Join(dir, DBFile), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bbolt.Tx) error {
		buckets := map[string]*bbolt.Bucket{}
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
			c := store.Change{Type: store.Added, Resource: store.Resource{Kind: st.kind, Name: st.key, ResourceVersion: rv}}
			old := kb.Get([]byte(st.key))
			switch {
			case st.obj == nil:
				c.Type, c.Resource.Object = store.Deleted, old[8:]
				err = kb.Delete([]byte(st.key))
			default:
				if old != nil {
					c.Type = store.Modified
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

// format1Served says which stored object each path of the golden file's
// "get" names, and which changes each of its watches follows.
var (
	format1Gets = map[string][2]string{
		"/api/v1/commits/" + keyDir:            {schema.KindCommit, keyDir},
		"/api/v1/machines/sim-a0":              {schema.KindMachine, "sim-a0"},
		"/api/v1/providers/sim":                {schema.KindProvider, "sim"},
		"/api/v1/tenants/alpha":                {schema.KindTenant, "alpha"},
		"/api/v1/tenants/alpha/node-groups/cp": {schema.KindNodeGroup, "alpha/cp"},
		"/api/v1/tenants/alpha/patches/ntp":    {schema.KindConfigPatch, "alpha/ntp"},
	}
	format1Watches = map[string]func(store.Change) bool{
		"/api/v1/machines/events?resourceVersion=0": func(c store.Change) bool { return c.Resource.Kind == schema.KindMachine },
		"/api/v1/tenants/alpha/events?resourceVersion=0": func(c store.Change) bool {
			var h store.MetaHead
			if _, ok := schema.LookupKind(c.Resource.Kind); !ok || c.Resource.DecodeMeta(&h) != nil {
				return false
			}
			m := h.Meta()
			return schema.TenantOf(c.Resource.Kind, &m) == "alpha"
		},
	}
)

const (
	revDir  = "sha256:feedbeef00112233445566778899aabbccddeeff00112233445566778899aa"
	keyDir  = "sha256-feedbeef00112233445566778899aabbccddeeff00112233445566778899aa"
	applied = "AppliedTenant"
)

// TestMigrateFormat1 opens a file written the old way: it holds the
// objects and the event log byte for byte as the build of format 1
// served them (testdata/format1.golden.json holds what that build's API
// answered: each object with a newline, each watch line as
// {"type":…,"object":…}), answers from the tenant index, and continues
// the sequence.
func TestMigrateFormat1(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	m := storetest.Machine("sim-a0", "alpha", "cp", schema.RoleControlPlane, "small", 4)
	configuring := *m
	configuring.Status.Stage = schema.StageConfiguring
	writeFormat1(t, dir, []format1Step{
		{schema.KindTenant, "alpha", storetest.Tenant("alpha", "prod", 1)},
		{schema.KindNodeGroup, "alpha/cp", storetest.NodeGroup("alpha", "cp", schema.RoleControlPlane, 1, 2)},
		{schema.KindConfigPatch, "alpha/ntp", storetest.Patch("alpha", "ntp", 3)},
		{schema.KindMachine, "sim-a0", m},
		{schema.KindCommit, keyDir, storetest.Commit(revDir, storetest.SeedTime.Add(time.Hour), schema.CommitSucceeded)},
		{schema.KindProvider, "sim", storetest.Provider(6)},
		{applied, "alpha", map[string]any{"tenant": "alpha"}},
		{schema.KindMachine, "sim-a0", &configuring},
		{schema.KindMachine, "sim-a1", storetest.Machine("sim-a1", "alpha", "cp", schema.RoleControlPlane, "small", 9)},
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
	if len(golden.Get) != len(format1Gets) || len(golden.Watch) != len(format1Watches) {
		t.Fatalf("the golden file has %d objects and %d watches, the test reads %d and %d", len(golden.Get), len(golden.Watch), len(format1Gets), len(format1Watches))
	}

	machines := []string{"sim-a0"}
	for round := range 2 { // the second open finds the current format
		s := openStore(t, dir)
		err := s.View(func(tx store.Tx) error {
			checkFormat1(t, round, tx, golden.Get, golden.Watch)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(machines, tenantKeys(t, s, "alpha", schema.KindMachine)); diff != "" {
			t.Errorf("open %d: tenant index of machines (-want +got):\n%s", round, diff)
		}
		var format []byte
		s.db.View(func(tx *bbolt.Tx) error { format = tx.Bucket(bucketMeta).Get(keyFormat); return nil })
		if string(format) != storeFormat {
			t.Errorf("open %d: format %q, want %q", round, format, storeFormat)
		}
		id := "sim-n" + strconv.Itoa(round)
		machines = append(machines, id)
		err = s.Update(func(tx store.Tx) error {
			_, err := tx.PutObject(schema.KindMachine, id, storetest.Machine(id, "alpha", "cp", schema.RoleControlPlane, "small", 20))
			if rv := tx.ResourceVersion(); rv != uint64(11+round) {
				t.Errorf("open %d: next resourceVersion %d, want %d", round, rv, 11+round)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// checkFormat1 compares the migrated objects and event log with what the
// build of format 1 served.
func checkFormat1(t *testing.T, round int, tx store.Tx, gets map[string]string, watches map[string][]string) {
	t.Helper()
	for path, want := range gets {
		key := format1Gets[path]
		r, err := tx.Get(key[0], key[1])
		if got := string(r.Object) + "\n"; err != nil || got != want {
			t.Errorf("open %d: %s (%s %s): %v\n got %s\nwant %s", round, path, key[0], key[1], err, got, want)
		}
	}
	for path, want := range watches {
		// The first lines of the watch; what the test adds follows them.
		got := []string{}
		err := tx.Events(0, func(c store.Change) error {
			if len(got) < len(want) && format1Watches[path](c) {
				got = append(got, `{"type":"`+string(c.Type)+`","object":`+string(c.Resource.Object)+`}`)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("open %d: watch %s (-want +got):\n%s", round, path, diff)
		}
	}
	if r, err := tx.Get(applied, "alpha"); err != nil || string(r.Object) != `{"tenant":"alpha"}` {
		t.Errorf("open %d: internal record %s, %v; want it as it was", round, r.Object, err)
	}
}

// tenantKeys lists what TenantObjects gives for tenant and kind.
func tenantKeys(t *testing.T, s *Store, tenant, kind string) []string {
	t.Helper()
	out := []string{}
	err := s.View(func(tx store.Tx) error {
		return tx.TenantObjects(tenant, kind, func(r store.Resource) error {
			out = append(out, r.Name)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
