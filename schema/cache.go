package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"sync"
)

// ContentHasher is implemented by a file system that knows, without
// reading a file, a hash that changes whenever the file's bytes do: a git
// tree names each file's blob. Load looks for it on the fs.FS it reads;
// without it, Load hashes the bytes it reads (SHA-256).
//
// ContentHash returns the hash of the regular file name and true, or false
// when it has none for name. Hashes of different schemes must not collide:
// prefix them with the scheme ("git-blob:…").
type ContentHasher interface {
	ContentHash(name string) (hash string, ok bool)
}

// TreeHasher is implemented by a file system that knows, without listing
// a directory, a hash that changes whenever anything under it does (the
// names, modes and contents of its entries, at any depth): a git tree
// names each directory's tree. With a Cache, Load looks for it on the
// fs.FS it reads, and takes the files under a directory it walked before
// from the Cache instead of walking it again.
//
// TreeHash returns the hash of the directory dir ("." the root) and true,
// or false when it has none for dir. Hashes of different schemes must not
// collide: prefix them with the scheme ("git-tree:…").
type TreeHasher interface {
	TreeHash(dir string) (hash string, ok bool)
}

// DefaultCacheFiles is how many files a Cache keeps by default.
const DefaultCacheFiles = 50000

// Cache keeps what Load found in each manifest file, its documents (with
// their file, line and column positions) and its problems, keyed by the
// file's path and content hash, so that a later Load parses and validates
// only the files whose content changed. The checks across files run on
// every Load, on the assembled documents.
//
// A Cache holds at most its size in files: when a Load leaves it fuller,
// the files that Load did not read go first. It is safe for concurrent
// use; the objects it hands out are shared by every Load that hits them,
// so their users must not modify them.
type Cache struct {
	mu      sync.Mutex
	max     int
	opts    Options // the options the entries were made with
	load    uint64  // counts the Loads, for eviction
	entries map[cacheKey]*cacheEntry
	// dirs are the listings of directories by path and tree hash; only
	// those of the last Load are kept.
	dirs  map[cacheKey]*dirListing
	stats CacheStats
	// store, when set, keeps results across processes; retained is set
	// once a Load has told it which values are still of use.
	store    CacheStore
	retained bool
	// assembly is what the checks across documents of the last Load
	// without a problem found; a Load takes it while it runs.
	assembly *assembly
}

type cacheKey struct{ path, hash string }

// dirListing is what Load found in one directory whose tree hash the file
// system knows, and in which it found no problem: the manifest files right
// in it and its subdirectories, whose own listings the cache holds too.
type dirListing struct {
	files []listedFile
	dirs  []cacheKey
	used  uint64 // the Load that last read or made it
}

// listedFile is a manifest file that find found: its path, its content
// hash ("" when the file system knows none), its size, and what the cache
// holds of it (nil: nothing yet). An entry is what its path and hash
// yield under the cache's options, so a listing may keep it.
type listedFile struct {
	name, hash string
	size       int64
	cached     *cacheEntry
	stored     []byte // what the cache's store holds of it, when the cache does not; never in a listing
}

type cacheEntry struct {
	size   int64
	result *fileResult
	used   uint64 // the Load that last read it
}

// CacheStats counts what a Cache did.
type CacheStats struct {
	Hits   int // files served from the cache
	Misses int // files parsed and validated
	Files  int // files held now
	// DirHits counts the directories whose files were taken from the
	// cache without listing them, subdirectories included.
	DirHits int
	// Stored counts the files decoded from the cache's store instead of
	// parsed; StoreErrors the writes to the store that failed.
	Stored, StoreErrors int
	// Rechecked counts the Loads whose checks across documents looked
	// only at the documents of the files that changed.
	Rechecked int
}

// NewCache returns a cache of at most maxFiles files; 0 or less means
// DefaultCacheFiles.
func NewCache(maxFiles int) *Cache {
	if maxFiles <= 0 {
		maxFiles = DefaultCacheFiles
	}
	return &Cache{max: maxFiles, entries: map[cacheKey]*cacheEntry{}, dirs: map[cacheKey]*dirListing{}}
}

// Stats returns the counts so far.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Files = len(c.entries)
	return s
}

// lastFiles returns how many files the cache holds, a guess of how many
// the next Load finds; 0 without a cache.
func (c *Cache) lastFiles() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// UseStore makes the cache keep what it parses in s too, and look there
// for what it does not hold (see CacheStore). Call it before the first
// Load.
func (c *Cache) UseStore(s CacheStore) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.store, c.retained = s, false
}

// storeFor returns what a Load under options o does with the store: nil
// when there is none, or o are not the defaults.
func (c *Cache) storeFor(o Options) *storeUse {
	// What a plain file yields does not depend on Decrypt, and an
	// encrypted file's result is never stored.
	o.Cache, o.Decrypt = nil, nil
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.store == nil || !sameOptions(o, (*Options)(nil).withDefaults()) {
		return nil
	}
	return &storeUse{store: c.store, used: map[string]bool{}, put: map[string][]byte{}, retain: !c.retained}
}

// endStore writes the rest of what a Load parsed to the store, and counts
// a failed write.
func (c *Cache) endStore(u *storeUse) {
	if u == nil {
		return
	}
	u.flush()
	c.mu.Lock()
	defer c.mu.Unlock()
	if u.failed {
		c.stats.StoreErrors++
	}
	if u.retain && !u.failed {
		c.retained = true
	}
}

// begin starts a Load with options o and returns its number. Entries made
// under other options are dropped: the limits change what a file yields.
func (c *Cache) begin(o Options) uint64 {
	o.Cache = nil
	c.mu.Lock()
	defer c.mu.Unlock()
	if !sameOptions(c.opts, o) {
		c.opts, c.entries, c.dirs = o, map[cacheKey]*cacheEntry{}, map[cacheKey]*dirListing{}
	}
	c.load++
	return c.load
}

// get returns the entry of path with content hash, marking it used by
// load, or nil.
func (c *Cache) get(load uint64, path, hash string) *cacheEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[cacheKey{path, hash}]
	if e != nil {
		e.used = load
		c.stats.Hits++
	}
	return e
}

// put records what load found in path; parsed says it parsed the file,
// rather than decoding it from the store.
func (c *Cache) put(load uint64, path, hash string, size int64, r *fileResult, parsed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if parsed {
		c.stats.Misses++
	} else {
		c.stats.Stored++
	}
	c.entries[cacheKey{path, hash}] = &cacheEntry{size: size, result: r, used: load}
}

// listing appends to files the manifest files under the directory key,
// from its listing and those of its subdirectories, and marks them used by
// load; ok is false, and nothing appended or marked, when the cache misses
// any of them.
func (c *Cache) listing(load uint64, key cacheKey, files []listedFile) (_ []listedFile, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var found []*dirListing
	n := len(files)
	for todo := []cacheKey{key}; len(todo) > 0; {
		d := c.dirs[todo[len(todo)-1]]
		todo = todo[:len(todo)-1]
		if d == nil {
			return files[:n], false
		}
		found = append(found, d)
		files = append(files, d.files...)
		todo = append(todo, d.dirs...)
	}
	for _, d := range found {
		d.used = load
	}
	for _, f := range files[n:] {
		if f.cached != nil {
			f.cached.used = load
			c.stats.Hits++
		}
	}
	c.stats.DirHits += len(found)
	return files, true
}

// putDir records the listing load made of the directory key, with the
// entries the cache has of its files, so that a Load that takes the
// listing need not look them up.
func (c *Cache) putDir(load uint64, key cacheKey, d *dirListing) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, f := range d.files {
		if f.cached == nil && f.hash != "" {
			d.files[i].cached = c.entries[cacheKey{f.name, f.hash}]
		}
	}
	d.used = load
	c.dirs[key] = d
}

// end writes what load parsed to the store, and trims the cache: the
// listings that load did not use go; when there are more files than the
// cache holds, first the files that load did not read, then, when the tree
// alone is larger, any.
func (c *Cache) end(load uint64, u *storeUse) {
	c.endStore(u)
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, d := range c.dirs {
		if d.used != load {
			delete(c.dirs, k)
		}
	}
	if len(c.entries) <= c.max {
		return
	}
	for k, e := range c.entries {
		if e.used != load {
			delete(c.entries, k)
		}
	}
	for k := range c.entries {
		if len(c.entries) <= c.max {
			break
		}
		delete(c.entries, k)
	}
}

// takeAssembly hands the kept assembly to one Load, or nil.
func (c *Cache) takeAssembly() *assembly {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.assembly
	c.assembly = nil
	return a
}

// keepAssembly keeps what a Load without a problem assembled; rechecked
// says it was updated, not made anew.
func (c *Cache) keepAssembly(a *assembly, rechecked bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.assembly = a
	if rechecked {
		c.stats.Rechecked++
	}
}

// sha256Hash is the hash Load gives a file whose file system has none.
func sha256Hash(data []byte) string {
	s := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(s[:])
}

// sameOptions reports whether a and b are the same options; decrypters
// are the same when they are one comparable value (a pointer, say), so
// that a decrypter of a type that == cannot compare starts the cache over
// rather than panicking.
func sameOptions(a, b Options) bool {
	da, db := a.Decrypt, b.Decrypt
	a.Decrypt, b.Decrypt = nil, nil
	if a != b {
		return false
	}
	if da == nil || db == nil {
		return da == nil && db == nil
	}
	ta := reflect.TypeOf(da)
	return ta == reflect.TypeOf(db) && ta.Comparable() && da == db
}
