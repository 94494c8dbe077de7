package schema

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/internal/manifestfleet"
)

// mustLoad loads fsys with cache and fails the test on any problem.
func mustLoad(t testing.TB, fsys fs.FS, cache *Cache) *Desired {
	t.Helper()
	d, err := Load(fsys, ".", &Options{Cache: cache})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return d
}

// cachedProblems loads fsys and returns its problems; it fails the test when
// the tree loads.
func cachedProblems(t *testing.T, fsys fs.FS, cache *Cache) []Problem {
	t.Helper()
	d, err := Load(fsys, ".", &Options{Cache: cache})
	var list *ProblemList
	if !errors.As(err, &list) || d != nil {
		t.Fatalf("load: desired %v, err %v: want problems and no desired state", d != nil, err)
	}
	return list.Problems
}

func TestCacheRevalidatesChangedFile(t *testing.T) {
	fsys := genTree(334) // 1,002 files
	cache := NewCache(0)
	mustLoad(t, fsys, cache)
	if s := cache.Stats(); s.Misses != 1002 || s.Hits != 0 {
		t.Fatalf("first load: %+v, want 1002 misses", s)
	}
	// An error in one file: line 10 of t117/nodegroups.yaml.
	f := fsys["t117/nodegroups.yaml"]
	bad := strings.Replace(string(f.Data), "  count: 1\n", "  count: three\n", 1)
	if bad == string(f.Data) {
		t.Fatal("the tree changed: no count to break")
	}
	fsys["t117/nodegroups.yaml"] = &fstest.MapFile{Mode: 0o644, Data: []byte(bad)}
	probs := cachedProblems(t, fsys, cache)
	if len(probs) != 1 || probs[0].File != "t117/nodegroups.yaml" || probs[0].Line != 10 || probs[0].Path != "/spec/count" {
		t.Fatalf("problems %+v: want one at t117/nodegroups.yaml:10 /spec/count", probs)
	}
	if s := cache.Stats(); s.Misses != 1003 || s.Hits != 1001 {
		t.Errorf("second load: %+v, want 1 more miss and 1001 hits", s)
	}
	// The same error again comes from the cache, with the same position.
	if again := cachedProblems(t, fsys, cache); !reflect.DeepEqual(again, probs) {
		t.Errorf("from the cache: %+v, want %+v", again, probs)
	}
	fsys["t117/nodegroups.yaml"] = f
	if d := mustLoad(t, fsys, cache); len(d.Tenant("t117").NodeGroups) != 2 {
		t.Errorf("fixed: t117 has %d node groups, want 2", len(d.Tenant("t117").NodeGroups))
	}
}

func TestCacheHitSamePositions(t *testing.T) {
	fsys := genTree(20)
	cold := mustLoad(t, fsys, nil)
	cache := NewCache(0)
	mustLoad(t, fsys, cache)
	warm := mustLoad(t, fsys, cache)
	if s := cache.Stats(); s.Hits != 60 {
		t.Fatalf("%+v: want 60 hits", s)
	}
	if !reflect.DeepEqual(cold, warm) {
		t.Fatal("the desired state from the cache differs from the one loaded without it")
	}
	ng := warm.Tenant("t007").NodeGroups[1]
	if ng.Source.File != "t007/nodegroups.yaml" || ng.Source.Line != 15 || ng.Source.Lines()["/spec/count"] != 23 {
		t.Errorf("workers of t007 from the cache: %s:%d, count at line %d: want t007/nodegroups.yaml:15, line 23",
			ng.Source.File, ng.Source.Line, ng.Source.Lines()["/spec/count"])
	}
	// The same content under another path is not the same file.
	fsys["copy/t007.yaml"] = fsys["t007/tenant.yaml"]
	probs := cachedProblems(t, fsys, cache)
	if len(probs) != 1 || probs[0].File != "t007/tenant.yaml" || !strings.Contains(probs[0].Message, "first at copy/t007.yaml:5") {
		t.Errorf("a copied tenant: %+v, want it declared twice, first at copy/t007.yaml:5", probs)
	}
}

func TestCacheDeletedFile(t *testing.T) {
	fsys := genTree(5)
	cache := NewCache(0)
	mustLoad(t, fsys, cache)

	patches := fsys["t003/patches.yaml"]
	delete(fsys, "t003/patches.yaml")
	if d := mustLoad(t, fsys, cache); len(d.Tenant("t003").Patches) != 0 {
		t.Errorf("after deleting t003/patches.yaml: %d patches, want none", len(d.Tenant("t003").Patches))
	}
	fsys["t003/patches.yaml"] = patches

	// A tenant deleted while its node groups stay is a problem of theirs,
	// found by the checks across files even though they come from the cache.
	tenant := fsys["t002/tenant.yaml"]
	delete(fsys, "t002/tenant.yaml")
	probs := cachedProblems(t, fsys, cache)
	if len(probs) == 0 || probs[0].File != "t002/nodegroups.yaml" || !strings.Contains(probs[0].Message, `tenant "t002" is not declared`) {
		t.Errorf("problems %+v: want t002's node groups to miss their tenant", probs)
	}

	// A file that no longer parses is a problem, never a deletion.
	fsys["t002/tenant.yaml"] = &fstest.MapFile{Mode: 0o644, Data: []byte("apiVersion: rezuscloud.io/v1\nkind: Tenant\nmetadata: [\n")}
	probs = cachedProblems(t, fsys, cache)
	if p := probs[len(probs)-1]; p.File != "t002/tenant.yaml" || p.Line != 3 || !strings.Contains(p.Message, "YAML syntax error") {
		t.Errorf("problems %+v: want a syntax error at t002/tenant.yaml:3", probs)
	}
	fsys["t002/tenant.yaml"] = tenant
	if d := mustLoad(t, fsys, cache); len(d.Tenants) != 5 {
		t.Errorf("restored: %d tenants, want 5", len(d.Tenants))
	}
}

// hashedFS is a file system that knows each file's hash, as a git tree
// does, and counts the files opened.
type hashedFS struct {
	fstest.MapFS
	hashes map[string]string
	opens  atomic.Int64
}

func (h *hashedFS) Open(name string) (fs.File, error) {
	if strings.HasSuffix(name, ".yaml") {
		h.opens.Add(1)
	}
	return h.MapFS.Open(name)
}

func (h *hashedFS) ContentHash(name string) (string, bool) {
	v, ok := h.hashes[name]
	return v, ok
}

func TestCacheByContentHashReadsOnlyChangedFiles(t *testing.T) {
	h := &hashedFS{MapFS: genTree(10), hashes: map[string]string{}}
	for name := range h.MapFS {
		h.hashes[name] = "test:" + name + ":1"
	}
	cache := NewCache(0)
	mustLoad(t, h, cache)
	if n := h.opens.Swap(0); n != 30 {
		t.Fatalf("first load opened %d files, want 30", n)
	}
	h.MapFS["t004/tenant.yaml"] = &fstest.MapFile{Mode: 0o644, Data: []byte(strings.Replace(string(h.MapFS["t004/tenant.yaml"].Data), "1.34.1", "1.34.2", 1))}
	h.hashes["t004/tenant.yaml"] = "test:t004/tenant.yaml:2"
	d := mustLoad(t, h, cache)
	if n := h.opens.Load(); n != 1 {
		t.Errorf("second load opened %d files, want only the changed one", n)
	}
	if v := d.Tenant("t004").Tenant.Spec.KubernetesVersion; v != "1.34.2" {
		t.Errorf("t004 runs Kubernetes %s, want 1.34.2", v)
	}
}

func TestCacheBounded(t *testing.T) {
	cache := NewCache(35)
	mustLoad(t, genTree(10), cache) // 30 files
	other := genTree(10)
	for name, f := range other {
		f.Data = []byte(strings.ReplaceAll(string(f.Data), "somaxconn", "netdev_max_backlog"))
		other[name] = f
	}
	mustLoad(t, other, cache) // 10 changed patch files: 40 in all
	if s := cache.Stats(); s.Files != 30 {
		t.Errorf("%d files cached, want the 30 of the last load", s.Files)
	}
	mustLoad(t, genTree(20), cache) // 60 files, more than the cache holds
	if s := cache.Stats(); s.Files != 35 {
		t.Errorf("%d files cached, want 35", s.Files)
	}
	// Other limits make other results: nothing is reused.
	before := cache.Stats()
	if _, err := Load(genTree(20), ".", &Options{Cache: cache, MaxDepth: 50}); err != nil {
		t.Fatal(err)
	}
	if s := cache.Stats(); s.Hits != before.Hits {
		t.Errorf("%d hits under other options", s.Hits-before.Hits)
	}
}

// genFiles generates the tree of genTree with one document per file.
func genFiles(tenants int) fstest.MapFS { return genFleet(tenants, manifestfleet.FilePerDocument) }

// writeTree writes fsys into a new directory and returns it.
func writeTree(b *testing.B, fsys fstest.MapFS) string {
	dir := b.TempDir()
	for name, f := range fsys {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

// BenchmarkLoad20kFiles loads and validates 20,000 small manifests from a
// directory, one document per file (2,000 tenants of ten files), with an
// empty cache: a first load.
func BenchmarkLoad20kFiles(b *testing.B) {
	fsys := genFiles(2000)
	if len(fsys) != 20000 {
		b.Fatalf("%d files", len(fsys))
	}
	dir := os.DirFS(writeTree(b, fsys))
	var mem runtimeMem
	mem.read()
	before := mem.totalAlloc
	for b.Loop() {
		if d := mustLoad(b, dir, NewCache(0)); len(d.Tenants) != 2000 {
			b.Fatalf("%d tenants", len(d.Tenants))
		}
	}
	mem.read()
	b.ReportMetric(float64(mem.totalAlloc-before)/float64(b.N)/(1<<20), "alloc-MiB/op")
}

// BenchmarkLoad20kOneChanged loads the same 20,000 manifests after one of
// them changed, with the cache of the load before.
func BenchmarkLoad20kOneChanged(b *testing.B) {
	fsys := genFiles(2000)
	root := writeTree(b, fsys)
	dir := os.DirFS(root)
	cache := NewCache(0)
	mustLoad(b, dir, cache)
	name := "t1234/ng-workers.yaml"
	orig := string(fsys[name].Data)
	i := 0
	for b.Loop() {
		i++
		data := strings.Replace(orig, "shape: small", fmt.Sprintf("shape: small-%d", i), 1)
		if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o644); err != nil {
			b.Fatal(err)
		}
		if d := mustLoad(b, dir, cache); len(d.Tenants) != 2000 {
			b.Fatalf("%d tenants", len(d.Tenants))
		}
	}
	if s := cache.Stats(); s.Misses != 20000+b.N {
		b.Fatalf("cache %+v: want one miss per op", s)
	}
}

// treeFS is a file system that knows each file's and each directory's
// hash, as a git tree does, and counts the directories listed.
type treeFS struct {
	fstest.MapFS
	lists atomic.Int64
}

func (t *treeFS) ReadDir(name string) ([]fs.DirEntry, error) {
	t.lists.Add(1)
	return t.MapFS.ReadDir(name)
}

func (t *treeFS) ContentHash(name string) (string, bool) {
	f, ok := t.MapFS[name]
	if !ok || !f.Mode.IsRegular() {
		return "", false
	}
	return sha256Hash(f.Data), true
}

// TreeHash hashes the names, modes and contents of everything under dir.
func (t *treeFS) TreeHash(dir string) (string, bool) {
	if st, err := fs.Stat(t.MapFS, dir); err != nil || !st.IsDir() {
		return "", false
	}
	prefix := dir + "/"
	if dir == "." {
		prefix = ""
	}
	var names []string
	for name := range t.MapFS {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var all strings.Builder
	for _, name := range names {
		fmt.Fprintf(&all, "%s %v %s\x00", name, t.MapFS[name].Mode, t.MapFS[name].Data)
	}
	return "test-tree:" + sha256Hash([]byte(all.String())), true
}

// TestCacheReusesUnchangedDirs: a directory whose tree hash is the one of
// the load before is not listed again, and what a changed, added or
// deleted file under a reused directory's siblings does is the same as a
// load without the cache gives.
func TestCacheReusesUnchangedDirs(t *testing.T) {
	tree := &treeFS{MapFS: genTree(50)}
	cache := NewCache(0)
	mustLoad(t, tree, cache)
	if s := cache.Stats(); s.DirHits != 0 {
		t.Fatalf("first load: %+v, want no directory from the cache", s)
	}
	tree.lists.Store(0)
	mustLoad(t, tree, cache)
	if n, s := tree.lists.Load(), cache.Stats(); n != 0 || s.DirHits != 51 {
		t.Fatalf("the same tree again: %d directories listed, %d from the cache; want 0 and 51", n, s.DirHits)
	}
	same := func(what string) {
		t.Helper()
		warm, werr := Load(tree, ".", &Options{Cache: cache})
		cold, cerr := Load(tree.MapFS, ".", nil)
		if !reflect.DeepEqual(warm, cold) || !reflect.DeepEqual(werr, cerr) {
			t.Fatalf("%s: the load with the cache differs from the one without: %v / %v", what, werr, cerr)
		}
	}
	before := cache.Stats().DirHits
	tree.lists.Store(0)
	f := tree.MapFS["t017/nodegroups.yaml"]
	changed := strings.Replace(string(f.Data), "count: 3\n", "count: 4\n", 1)
	if changed == string(f.Data) {
		t.Fatal("the tree changed: no count to change")
	}
	tree.MapFS["t017/nodegroups.yaml"] = &fstest.MapFile{Mode: 0o644, Data: []byte(changed)}
	same("a changed file")
	d := mustLoad(t, tree, cache)
	if got := d.Tenant("t017").NodeGroups[0].Spec.Count; got != 4 {
		t.Errorf("t017's control planes: %d, want 4", got)
	}
	// The first load after the change lists the root and t017 again and
	// takes the other 49 tenants' directories from the cache; the second
	// takes the whole tree from it.
	if n, hits := tree.lists.Load(), cache.Stats().DirHits-before; n != 2 || hits != 49+51 {
		t.Errorf("one changed file, two loads: %d directories listed, %d from the cache; want 2 and 100", n, hits)
	}
	tree.MapFS["t003/more.yaml"] = tree.MapFS["t017/nodegroups.yaml"]
	same("an added file") // t017's node groups are declared twice
	delete(tree.MapFS, "t003/more.yaml")
	delete(tree.MapFS, "t004/patches.yaml")
	same("a deleted file")
	if d := mustLoad(t, tree, cache); len(d.Tenant("t004").Patches) != 0 {
		t.Errorf("t004 has %d patches after its patches.yaml was deleted", len(d.Tenant("t004").Patches))
	}
}

// TestCacheListsDirWithProblemAgain: a problem that find reports keeps the
// directory, and every one above it, out of the cache, so that the next
// load reports it again.
func TestCacheListsDirWithProblemAgain(t *testing.T) {
	tree := &treeFS{MapFS: genTree(5)}
	tree.MapFS["t002/sub/bad\x01.yaml"] = tree.MapFS["t002/tenant.yaml"]
	cache := NewCache(0)
	first := cachedProblems(t, tree, cache)
	again := cachedProblems(t, tree, cache)
	if len(first) != 1 || !strings.Contains(first[0].Message, "control character") || !reflect.DeepEqual(first, again) {
		t.Fatalf("problems %+v, then %+v: want the bad name twice", first, again)
	}
	// The other tenants' directories come from the cache.
	if s := cache.Stats(); s.DirHits != 4 {
		t.Errorf("%d directories from the cache, want the 4 other tenants'", s.DirHits)
	}
}
