package schema

import (
	"io/fs"
	"maps"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
)

// memStore is a CacheStore in memory, as a restarted process finds the
// one of the process before.
type memStore struct {
	mu     sync.Mutex
	values map[string][]byte
}

func (m *memStore) Get(key string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.values[key]
}

func (m *memStore) Put(values map[string][]byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, v := range values {
		path, _, _ := strings.Cut(key, "\x00")
		for old := range m.values {
			if strings.HasPrefix(old, path+"\x00") {
				delete(m.values, old)
			}
		}
		m.values[key] = v
	}
	return nil
}

func (m *memStore) Retain(keep map[string]bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	maps.DeleteFunc(m.values, func(key string, _ []byte) bool { return !keep[key] })
	return nil
}

// blobFS names each file's content as a git tree does (not "sha256:",
// which a directory's loader makes).
type blobFS struct{ fs.FS }

func (b blobFS) ContentHash(name string) (string, bool) {
	data, err := fs.ReadFile(b.FS, name)
	if err != nil {
		return "", false
	}
	return "test-blob:" + sha256Hash(data), true
}

// restarted loads fsys with a new cache on store, as a new process does.
func restarted(t *testing.T, fsys fs.FS, store CacheStore) (*Desired, CacheStats, error) {
	t.Helper()
	c := NewCache(0)
	c.UseStore(store)
	d, err := Load(fsys, ".", &Options{Cache: c})
	return d, c.Stats(), err
}

// TestCacheStoreAcrossProcesses: a new process on the store of the one
// before parses no file it had parsed, and gets the same desired state as
// a load without any cache; a changed file is parsed again.
func TestCacheStoreAcrossProcesses(t *testing.T) {
	for name, fsys := range map[string]fs.FS{"generated": genTree(30), "staging": os.DirFS("../examples/staging"), "production": os.DirFS("../examples/production")} {
		t.Run(name, func(t *testing.T) {
			fsys := blobFS{fsys}
			cold, err := Load(fsys, ".", nil)
			if err != nil {
				t.Fatal(err)
			}
			store := &memStore{values: map[string][]byte{}}
			if _, s, err := restarted(t, fsys, store); err != nil || s.Stored != 0 || s.Misses != cold.Files {
				t.Fatalf("first process: %v, %+v: want %d files parsed", err, s, cold.Files)
			}
			warm, s, err := restarted(t, fsys, store)
			if err != nil || s.Stored != cold.Files || s.Misses != 0 {
				t.Fatalf("second process: %v, %+v: want all %d files from the store, none parsed", err, s, cold.Files)
			}
			if !reflect.DeepEqual(warm, cold) {
				t.Fatal("the desired state from the store differs from the one loaded without a cache")
			}
		})
	}
	tree := genTree(10)
	store := &memStore{values: map[string][]byte{}}
	restarted(t, blobFS{tree}, store)
	f := tree["t004/tenant.yaml"]
	tree["t004/tenant.yaml"] = &fstest.MapFile{Mode: 0o644, Data: []byte(strings.Replace(string(f.Data), "1.34.1", "1.34.2", 1))}
	d, s, err := restarted(t, blobFS{tree}, store)
	if err != nil || s.Misses != 1 || s.Stored != 29 || d.Tenant("t004").Tenant.Spec.KubernetesVersion != "1.34.2" {
		t.Fatalf("a changed file: %v, %+v: want it parsed (1 miss, 29 stored) and Kubernetes 1.34.2", err, s)
	}
	if len(store.values) != 30 {
		t.Errorf("the store holds %d values, want 30: the old t004/tenant.yaml replaced", len(store.values))
	}
}

// TestCacheStoreNeverHoldsProblems: a file with a problem is parsed, and
// its problem reported, by every process; a deleted file's value goes; a
// value that does not decode is parsed instead.
func TestCacheStoreNeverHoldsProblems(t *testing.T) {
	tree := genTree(5)
	bad := strings.Replace(string(tree["t001/nodegroups.yaml"].Data), "  count: 2\n", "  count: two\n", 1)
	tree["t001/nodegroups.yaml"] = &fstest.MapFile{Mode: 0o644, Data: []byte(bad)}
	store := &memStore{values: map[string][]byte{}}
	_, _, first := restarted(t, blobFS{tree}, store)
	_, s, again := restarted(t, blobFS{tree}, store)
	if first == nil || !reflect.DeepEqual(first, again) || s.Misses != 1 || s.Stored != 14 {
		t.Fatalf("%v, then %v, %+v: want the same problem twice, the bad file parsed each time", first, again, s)
	}
	for key := range store.values {
		if strings.HasPrefix(key, "t001/nodegroups.yaml\x00") {
			t.Errorf("the store holds the file with a problem")
		}
	}
	delete(tree, "t001/nodegroups.yaml")
	delete(tree, "t003/patches.yaml")
	store.values[storeKey("t002/tenant.yaml", mustHash(t, tree, "t002/tenant.yaml"))] = append(make([]byte, 8), "\x00\x01\x06Tenant"...)
	d, s, err := restarted(t, blobFS{tree}, store)
	if err != nil || len(d.Tenant("t003").Patches) != 0 || len(d.Tenant("t001").NodeGroups) != 0 || d.Tenant("t002") == nil || s.Misses != 1 {
		t.Fatalf("%v, %+v: want t003 without patches, t001 without node groups, t002 parsed again", err, s)
	}
	if len(store.values) != 13 {
		t.Errorf("the store holds %d values, want the 13 files left", len(store.values))
	}
}

func mustHash(t *testing.T, fsys fs.FS, name string) string {
	h, ok := blobFS{fsys}.ContentHash(name)
	if !ok {
		t.Fatalf("no hash of %s", name)
	}
	return h
}

// opStore is a memStore that logs what is asked of it.
type opStore struct {
	memStore
	ops []string
}

func (s *opStore) Put(values map[string][]byte) error {
	n := 0
	for k, v := range values {
		n += len(k) + len(v)
	}
	s.mu.Lock()
	s.ops = append(s.ops, "put "+strconv.Itoa(n))
	s.mu.Unlock()
	return s.memStore.Put(values)
}

func (s *opStore) Retain(keep map[string]bool) error {
	s.mu.Lock()
	s.ops = append(s.ops, "retain")
	s.mu.Unlock()
	return s.memStore.Retain(keep)
}

// A first load writes what it parsed in batches of about storeBatch bytes
// as it goes, after dropping the stale values of earlier processes, so
// that it never holds every value at once; a new process finds them all.
func TestCacheStoreWritesInBatches(t *testing.T) {
	fsys := blobFS{genTree(700)} // 7,000 files, about 4 MB of values
	store := &opStore{memStore: memStore{values: map[string][]byte{"gone.yaml\x00test-blob:x": []byte("stale")}}}
	d, s, err := restarted(t, fsys, store)
	if err != nil || s.Misses != d.Files || s.StoreErrors != 0 {
		t.Fatalf("first load: %v, %+v", err, s)
	}
	if len(store.ops) < 3 || store.ops[0] != "retain" {
		t.Fatalf("the store saw %v: want the drop of stale values, then the values in batches", store.ops)
	}
	for _, op := range store.ops[1:] {
		n, err := strconv.Atoi(strings.TrimPrefix(op, "put "))
		if err != nil || n > storeBatch+4096 {
			t.Errorf("%q: want puts of at most about %d bytes", op, storeBatch)
		}
	}
	if store.Get("gone.yaml\x00test-blob:x") != nil || len(store.values) != d.Files {
		t.Errorf("the store holds %d values for %d files, stale one kept: %v", len(store.values), d.Files, store.Get("gone.yaml\x00test-blob:x") != nil)
	}
	if _, s, err := restarted(t, fsys, store); err != nil || s.Stored != d.Files || s.Misses != 0 {
		t.Fatalf("restart: %v, %+v", err, s)
	}
}
