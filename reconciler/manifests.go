package reconciler

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/rezuscloud/rezuscloud/internal/version"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
)

// moduleChecks remembers the node groups in which the provider modules
// found no problem, by the objects they were loaded into: the manifest
// cache hands out the same object for a file whose content did not
// change, nobody modifies it, and a module's check of a node group
// depends on the node group alone. A revision then runs the modules'
// checks on the node groups it changed only.
type moduleChecks struct {
	mu    sync.Mutex
	clean map[*schema.NodeGroup]bool
}

// validate returns what modules.Validate returns for desired: the
// problems of the node groups not found clean before (the others have
// none), in the same order. It remembers the clean node groups of desired.
func (mc *moduleChecks) validate(modules render.Modules, desired *schema.Desired) []schema.Problem {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	todo := &schema.Desired{}
	for _, td := range desired.Tenants {
		var groups []*schema.NodeGroup
		for _, ng := range td.NodeGroups {
			if !mc.clean[ng] {
				groups = append(groups, ng)
			}
		}
		if len(groups) > 0 {
			todo.Tenants = append(todo.Tenants, &schema.TenantDesired{Tenant: td.Tenant, NodeGroups: groups})
		}
	}
	probs := modules.Validate(todo)
	if len(probs) > 0 {
		return probs
	}
	clean := make(map[*schema.NodeGroup]bool, 2*len(desired.Tenants))
	for _, td := range desired.Tenants {
		for _, ng := range td.NodeGroups {
			clean[ng] = true
		}
	}
	mc.clean = clean
	return nil
}

// manifestsFile is the file in the data dir where the manifest cache keeps
// what it parsed across restarts (see manifestStore).
const manifestsFile = "manifests.db"

// manifestStore is the manifest cache's store (schema.CacheStore): a bbolt
// file of its own in the data dir, beside the server's store, so that its
// writes reach neither the event log nor the API. One bucket holds the
// values of this build's cache format; opening drops any other. It is a
// cache: a file that does not open is made anew, and losing it costs only
// the parsing of every manifest once.
type manifestStore struct {
	db     *bolt.DB
	bucket []byte
}

var _ schema.CacheStore = (*manifestStore)(nil)

// openManifestStore opens (creating if needed) the manifest cache's file
// in dataDir.
func openManifestStore(dataDir string) (*manifestStore, error) {
	path := filepath.Join(dataDir, manifestsFile)
	// The mapping is made large enough at once for a cache of tens of
	// thousands of files: each time bbolt grows it during a write, it
	// copies every page that write touched onto the heap.
	opts := &bolt.Options{Timeout: 200 * time.Millisecond, InitialMmapSize: 64 << 20}
	db, err := bolt.Open(path, 0o600, opts)
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open %s: another process holds it open", path)
	}
	if err != nil {
		// Not a file bbolt can read: the cache starts anew.
		if rmErr := os.Remove(path); rmErr != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
		if db, err = bolt.Open(path, 0o600, opts); err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
	}
	s := &manifestStore{db: db, bucket: []byte(schema.CacheFormat() + " " + version.Version)}
	err = db.Update(func(tx *bolt.Tx) error {
		var stale [][]byte
		err := tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			if !bytes.Equal(name, s.bucket) {
				stale = append(stale, bytes.Clone(name))
			}
			return nil
		})
		for _, name := range stale {
			if err == nil {
				err = tx.DeleteBucket(name)
			}
		}
		if err == nil {
			_, err = tx.CreateBucketIfNotExists(s.bucket)
		}
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("prepare %s: %w", path, err)
	}
	return s, nil
}

// Get returns the value of key, or nil.
func (s *manifestStore) Get(key string) []byte {
	var v []byte
	_ = s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(s.bucket); b != nil {
			v = bytes.Clone(b.Get([]byte(key)))
		}
		return nil
	})
	return v
}

// Put stores values, and drops the other values of their paths. The keys
// go in in order, which fills bbolt's pages one after the other.
func (s *manifestStore) Put(values map[string][]byte) error {
	keys := slices.Sorted(maps.Keys(values))
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(s.bucket)
		for _, key := range keys {
			path, _, _ := bytes.Cut([]byte(key), []byte{0})
			prefix := append(path, 0)
			var stale [][]byte
			c := b.Cursor()
			for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
				if string(k) != key {
					stale = append(stale, bytes.Clone(k))
				}
			}
			if err := deleteKeys(b, stale); err != nil {
				return err
			}
			if err := b.Put([]byte(key), values[key]); err != nil {
				return err
			}
		}
		return nil
	})
}

// Retain drops every value whose key keep does not hold.
func (s *manifestStore) Retain(keep map[string]bool) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(s.bucket)
		var stale [][]byte
		c := b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if !keep[string(k)] {
				stale = append(stale, bytes.Clone(k))
			}
		}
		return deleteKeys(b, stale)
	})
}

// deleteKeys deletes keys from b; a cursor that deletes as it goes may
// skip keys.
func deleteKeys(b *bolt.Bucket, keys [][]byte) error {
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// Close closes the file.
func (s *manifestStore) Close() error { return s.db.Close() }
