package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// tickingClock returns a later time at each call, so that every object
// of a store it stamps has an updatedAt of its own.
func tickingClock() func() time.Time {
	var mu sync.Mutex
	t := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(1500 * time.Millisecond)
		return t
	}
}

// copySource is a bbolt store in a data dir of its own that holds
// something of everything a store keeps, for a copy.
func copySource(t *testing.T, tenants int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	st, err := bolt.Open(dir, &bolt.Options{Now: tickingClock()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := range tenants {
		fillTenant(t, st, fmt.Sprintf("t%03d", i), i)
	}
	err = st.Update(func(tx store.Tx) error {
		for i := range 96 {
			if err := tx.PutSeries(fmt.Sprintf("history/%04d", i), []byte(strings.Repeat("s", i))); err != nil {
				return err
			}
		}
		l := store.Lock{ID: "lock-1", Token: "editor", Created: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), Info: json.RawMessage(`{"ID":"lock-1","Operation":"OperationTypeApply","Who":"tofu@host"}`)}
		return tx.PutLock("t001", l)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// fillTenant stores a tenant with node groups, machines, internal records
// and a TF state of several versions, some of them pushed out; every
// third tenant is being removed and has its state deleted; objects are
// changed and deleted between, so that revisions have gaps.
func fillTenant(t *testing.T, st store.Store, name string, i int) {
	t.Helper()
	err := st.Update(func(tx store.Tx) error {
		tenant := &schema.Tenant{}
		tenant.Metadata.Name = name
		tenant.Metadata.Labels = map[string]string{"team": "t" + strconv.Itoa(i%4)}
		if _, err := tx.PutObject(schema.KindTenant, name, tenant); err != nil {
			return err
		}
		for j := range 3 {
			ng := &schema.NodeGroup{}
			ng.Metadata.Name = fmt.Sprintf("%s-ng%d", name, j)
			ng.Metadata.Labels = map[string]string{schema.LabelTenant: name}
			ng.Spec.Count = j + 1
			if _, err := tx.PutObject(schema.KindNodeGroup, ng.Metadata.Name, ng); err != nil {
				return err
			}
			m := &schema.Machine{}
			m.Metadata.Name = fmt.Sprintf("%s-m%d", name, j)
			m.Metadata.Labels = map[string]string{schema.LabelTenant: name}
			if _, err := tx.PutObject(schema.KindMachine, m.Metadata.Name, m); err != nil {
				return err
			}
		}
		if _, err := tx.Put("applied", name, []byte(`{"revision":"`+name+`"}`)); err != nil {
			return err
		}
		if _, err := tx.Put("drift", name, []byte("checked")); err != nil {
			return err
		}
		if _, err := tx.Delete(schema.KindMachine, name+"-m2"); err != nil {
			return err
		}
		if i%3 == 2 {
			tenant.Metadata.DeletionTimestamp = new(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
			tenant.Metadata.Finalizers = []string{"rezuscloud.io/machines"}
			if _, err := tx.PutObject(schema.KindTenant, name, tenant); err != nil {
				return err
			}
		}
		for v := range 5 + i%3 {
			data := fmt.Appendf(nil, `{"version":4,"serial":%d,"lineage":"lin-%s","resources":[]}`, v, name)
			serial := uint64(v)
			meta := store.StateMeta{Serial: &serial, Lineage: "lin-" + name, Size: int64(len(data)), Time: time.Date(2026, 3, 1, 0, v, 0, 0, time.UTC), Token: "rezuscloud"}
			if _, err := tx.PutState(name, data, meta, 2); err != nil {
				return err
			}
		}
		if i%3 == 2 {
			return tx.DeleteState(name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// compareStores fails the test unless to holds what from holds, object by
// object: the same resources of every kind, API objects equal but for
// their resourceVersion, with revisions in the same order and none
// besides; the tenant index; every state version with its meta; locks and
// series.
func compareStores(t *testing.T, from, to store.Store) {
	t.Helper()
	err := from.View(func(src store.Tx) error {
		return to.View(func(dst store.Tx) error {
			inv := src.(store.Inventory)
			kinds, err := inv.Kinds()
			if err != nil {
				return err
			}
			states, err := inv.StateNames()
			if err != nil {
				return err
			}
			compareResources(t, src, dst, kinds)
			compareStates(t, src, dst, states)
			locks, _ := src.Locks()
			got, _ := dst.Locks()
			if !reflect.DeepEqual(got, locks) {
				t.Errorf("locks: got %+v, want %+v", got, locks)
			}
			if got, want := seriesOf(t, dst), seriesOf(t, src); !reflect.DeepEqual(got, want) {
				t.Errorf("series: got %d entries, want %d, or different bytes", len(got), len(want))
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// compareResources compares the resources of kinds and the tenant index.
func compareResources(t *testing.T, src, dst store.Tx, kinds []string) {
	t.Helper()
	type pair struct{ from, to uint64 }
	var revs []pair
	for _, kind := range kinds {
		want, _ := src.List(kind)
		got, _ := dst.List(kind)
		if len(got) != len(want) {
			t.Errorf("%s: %d resources, want %d", kind, len(got), len(want))
			continue
		}
		for i, w := range want {
			g := got[i]
			revs = append(revs, pair{w.ResourceVersion, g.ResourceVersion})
			wantObj := w.Object
			if k, ok := schema.LookupKind(kind); ok {
				obj := k.New()
				if err := json.Unmarshal(w.Object, obj); err != nil {
					t.Fatal(err)
				}
				obj.Meta().ResourceVersion = strconv.FormatUint(g.ResourceVersion, 10)
				wantObj, _ = json.Marshal(obj)
			}
			if g.Name != w.Name || !bytes.Equal(g.Object, wantObj) {
				t.Errorf("%s %s: got %s\nwant %s", kind, w.Name, g.Object, wantObj)
			}
		}
	}
	slices.SortFunc(revs, func(a, b pair) int { return int(a.from) - int(b.from) })
	for i := 1; i < len(revs); i++ {
		if revs[i].to <= revs[i-1].to {
			t.Errorf("revisions out of order: %d→%d after %d→%d", revs[i].from, revs[i].to, revs[i-1].from, revs[i-1].to)
		}
	}
	if rv := dst.ResourceVersion(); rv != uint64(len(revs)) {
		t.Errorf("the copy is at revision %d, want %d: one per resource", rv, len(revs))
	}
	tenants, _ := src.List(schema.KindTenant)
	for _, tn := range tenants {
		for _, kind := range []string{schema.KindNodeGroup, schema.KindMachine} {
			if got, want := tenantKeys(t, dst, tn.Name, kind), tenantKeys(t, src, tn.Name, kind); !slices.Equal(got, want) {
				t.Errorf("%ss of tenant %s: got %v, want %v", kind, tn.Name, got, want)
			}
		}
	}
}

func tenantKeys(t *testing.T, tx store.Tx, tenant, kind string) []string {
	var keys []string
	if err := tx.TenantObjects(tenant, kind, func(r store.Resource) error { keys = append(keys, r.Name); return nil }); err != nil {
		t.Fatal(err)
	}
	return keys
}

// compareStates compares every kept version of the states names.
func compareStates(t *testing.T, src, dst store.Tx, names []string) {
	t.Helper()
	for _, name := range names {
		want, _ := src.StateVersions(name)
		got, err := dst.StateVersions(name)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("state %s versions: got %+v, %v\nwant %+v", name, got, err, want)
			continue
		}
		for _, v := range want {
			wb, _, _, _ := src.StateVersion(name, v.Version)
			gb, _, _, err := dst.StateVersion(name, v.Version)
			if err != nil || !bytes.Equal(gb, wb) {
				t.Errorf("state %s version %d: got %d bytes, %v; want %d bytes", name, v.Version, len(gb), err, len(wb))
			}
		}
	}
}

func seriesOf(t *testing.T, tx store.Tx) map[string]string {
	out := map[string]string{}
	if err := tx.ScanSeries("", func(k string, v []byte) error { out[k] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// openCopied opens the bbolt stores of the data dirs, closed when the
// test ends.
func openCopied(t *testing.T, dirs ...string) []store.Store {
	t.Helper()
	var out []store.Store
	for _, dir := range dirs {
		st, err := bolt.Open(dir, &bolt.Options{OpenTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		out = append(out, st)
	}
	return out
}

// TestStoreCopy: `store copy` copies a bbolt store of many tenants into an
// empty one, object by object: API objects with their uid, createdAt and
// updatedAt, internal records, every kept version of every state under
// its number with its meta (a deleted state too), locks and series.
func TestStoreCopy(t *testing.T) {
	src := copySource(t, 40)
	dst := filepath.Join(t.TempDir(), "copy")
	out, err := runStoreCmd(t, nil, "store", "copy", "--from", "bbolt:"+src, "--to", "bbolt:"+dst)
	if err != nil {
		t.Fatal(err)
	}
	want := "copied bbolt:" + src + " to bbolt:" + dst + ": 240 API objects, 80 internal records, 40 TF states with 120 versions, 1 state lock, 96 series keys\n"
	if out != want {
		t.Errorf("store copy said %q, want %q", out, want)
	}
	stores := openCopied(t, src, dst)
	compareStores(t, stores[0], stores[1])
}

// TestStoreCopyRefuses: a copy into a store that holds anything, from a
// store a server runs on, from a dir without a store, and with a --from or
// --to it cannot read, is refused with an error that says why, and
// changes neither store.
func TestStoreCopyRefuses(t *testing.T) {
	src := copySource(t, 2)
	dst := filepath.Join(t.TempDir(), "copy")
	if _, err := runStoreCmd(t, nil, "store", "copy", "--from", "bbolt:"+src, "--to", "bbolt:"+dst); err != nil {
		t.Fatal(err)
	}
	running := copySource(t, 1)
	held := openCopied(t, running)
	empty := t.TempDir()
	for _, c := range []struct {
		from, to, want string
	}{
		{"bbolt:" + src, "bbolt:" + dst, "the target store is not empty (it holds resources up to revision 16, 1 state lock, series entries, TF state \"t000\")"},
		{"bbolt:" + running, "bbolt:" + filepath.Join(t.TempDir(), "new"), "a server runs on " + running + ": stop it first"},
		{"bbolt:" + empty, "bbolt:" + dst, empty + " holds no store (rezuscloud.db)"},
		{"etcd:http://127.0.0.1:1", "bbolt:" + dst, `--from "etcd:http://127.0.0.1:1": want bbolt:DIR`},
		{"bbolt:" + src, "bbolt:" + src, "is the store --from names"},
		{"bbolt:" + src, src, `--to "` + src + `": want etcd:URLS[?prefix=PREFIX] or bbolt:DIR`},
		{"bbolt:" + src, "etcd:ftp://127.0.0.1:1", `"ftp://127.0.0.1:1" is not an http:// or https:// URL`},
		{"bbolt:" + src, "etcd:http://127.0.0.1:1?prefix=rezus", `etcd prefix "rezus": want a key path that starts and ends with /`},
	} {
		_, err := runStoreCmd(t, nil, "store", "copy", "--from", c.from, "--to", c.to)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("copy %s to %s: %v, want an error with %q", c.from, c.to, err, c.want)
		}
	}
	held[0].Close()
	stores := openCopied(t, src, dst)
	compareStores(t, stores[0], stores[1])
}
