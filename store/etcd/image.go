package etcd

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/btree"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// An image is the store as of one etcd revision, in memory: what every
// replica mirrors of the keys under d/, kept current by a watch. A
// published image is never changed: a transaction reads one, and a
// writer clones it (the trees copy on write) and changes the clone.
// TF states' bytes stay in etcd, read when asked for.
type image struct {
	// etcdRev is the etcd revision the image reflects; headMod the
	// revision of the head's last write, 0 before the first.
	etcdRev, headMod int64
	head             head

	res     *btree.BTreeG[item[resource]]     // by kind \x00 key
	tenants *btree.BTreeG[item[struct{}]]     // by tenant \x00 kind \x00 key
	series  *btree.BTreeG[item[tagged]]       // by key
	states  *btree.BTreeG[item[*stateRecord]] // by name
	locks   *btree.BTreeG[item[heldLock]]     // by name
	events  *btree.BTreeG[item[commitLog]]    // by eventKey
}

// item is a tree's entry: a key and its value.
type item[V any] struct {
	key string
	v   V
}

func less[V any](a, b item[V]) bool { return a.key < b.key }

func newTree[V any]() *btree.BTreeG[item[V]] { return btree.NewG(32, less[V]) }

// resource is a stored resource: its stored value, the tenant the index
// has it under ("" for none), and the blob that holds the value in etcd
// ("" when inline).
type resource struct {
	value  []byte
	tenant string
	blob   string
}

// tagged is a value that may be a blob's: its bytes, and the blob ("" when
// inline).
type tagged struct {
	data []byte
	blob string
}

// heldLock is a lock's stored JSON and the etcd revision of its write,
// which a transaction that read it compares.
type heldLock struct {
	raw []byte
	mod int64
}

// commitLog is one commit's logged changes.
type commitLog struct {
	changes []store.Change
	blob    string
}

// last returns the revision of the log's last change.
func (c commitLog) last() uint64 {
	return c.changes[len(c.changes)-1].Resource.ResourceVersion
}

func newImage() *image {
	return &image{
		res: newTree[resource](), tenants: newTree[struct{}](), series: newTree[tagged](),
		states: newTree[*stateRecord](), locks: newTree[heldLock](), events: newTree[commitLog](),
	}
}

// clone returns a copy of the image that can be changed; the caller
// holds Store.cloneMu (cloning a tree writes to it).
func (im *image) clone() *image {
	c := *im
	c.res, c.tenants, c.series = im.res.Clone(), im.tenants.Clone(), im.series.Clone()
	c.states, c.locks, c.events = im.states.Clone(), im.locks.Clone(), im.events.Clone()
	return &c
}

func resID(kind, key string) string            { return kind + "\x00" + key }
func tenantID(tenant, kind, key string) string { return tenant + "\x00" + kind + "\x00" + key }

// getRes returns the stored resource kind/key.
func (im *image) getRes(kind, key string) (resource, bool) {
	it, ok := im.res.Get(item[resource]{key: resID(kind, key)})
	return it.v, ok
}

// setRes stores r as kind/key, or removes kind/key when r is nil, and
// keeps the tenant index.
func (im *image) setRes(kind, key string, r *resource) {
	id := resID(kind, key)
	if old, ok := im.res.Get(item[resource]{key: id}); ok && old.v.tenant != "" {
		im.tenants.Delete(item[struct{}]{key: tenantID(old.v.tenant, kind, key)})
	}
	if r == nil {
		im.res.Delete(item[resource]{key: id})
		return
	}
	im.res.ReplaceOrInsert(item[resource]{key: id, v: *r})
	if r.tenant != "" {
		im.tenants.ReplaceOrInsert(item[struct{}]{key: tenantID(r.tenant, kind, key)})
	}
}

// tenantOfValue returns the tenant the index puts the stored value v of
// kind/key under: schema.TenantOf of an API object's metadata, "" for an
// internal record.
func tenantOfValue(kind, key string, v []byte) (string, error) {
	if _, ok := schema.LookupKind(kind); !ok {
		return "", nil
	}
	r, err := store.DecodeValue(kind, key, v)
	if err != nil {
		return "", err
	}
	var m store.MetaHead
	if err := r.DecodeMeta(&m); err != nil {
		return "", err
	}
	meta := m.Meta()
	return schema.TenantOf(kind, &meta), nil
}

// scan calls fn with each entry of t whose key starts with prefix, in
// key order, until fn returns an error, which scan returns.
func scan[V any](t *btree.BTreeG[item[V]], prefix string, fn func(item[V]) error) error {
	var err error
	t.AscendGreaterOrEqual(item[V]{key: prefix}, func(it item[V]) bool {
		if !strings.HasPrefix(it.key, prefix) {
			return false
		}
		err = fn(it)
		return err == nil
	})
	return err
}

// loader reads the bytes of blobs an image refers to.
type loader interface {
	// loadBlob returns the bytes of the blob ref as of etcd revision rev.
	loadBlob(ref blobRef, rev int64) ([]byte, error)
}

// kvChange is one change of a key under d/ (relative to the prefix), as
// a range or a watch gives it: a put of value at mod, or a delete.
type kvChange struct {
	key    string
	value  []byte
	mod    int64
	delete bool
}

// apply changes the image (a clone) by one key's change, reading the
// blobs that values refer to through l. It returns the commit log the
// change adds, if it adds one.
func (im *image) apply(l loader, c kvChange) (*commitLog, error) {
	loadTagged := func() (tagged, error) {
		data, ref, err := decodeTagged(c.value)
		if err != nil || ref == nil {
			return tagged{data: data}, err
		}
		data, err = l.loadBlob(*ref, c.mod)
		return tagged{data: data, blob: ref.ID}, err
	}
	switch k := c.key; {
	case k == headKey:
		if c.delete {
			return nil, fmt.Errorf("the store's head %s was deleted", k)
		}
		im.headMod = c.mod
		return nil, json.Unmarshal(c.value, &im.head)
	case strings.HasPrefix(k, resDir):
		kind, key, ok := strings.Cut(strings.TrimPrefix(k, resDir), "/")
		if !ok {
			return nil, fmt.Errorf("resource key %q names no kind", k)
		}
		if c.delete {
			im.setRes(kind, key, nil)
			return nil, nil
		}
		v, err := loadTagged()
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", kind, key, err)
		}
		tenant, err := tenantOfValue(kind, key, v.data)
		if err != nil {
			return nil, err
		}
		im.setRes(kind, key, &resource{value: v.data, tenant: tenant, blob: v.blob})
	case strings.HasPrefix(k, seriesDir):
		key := strings.TrimPrefix(k, seriesDir)
		if c.delete {
			im.series.Delete(item[tagged]{key: key})
			return nil, nil
		}
		v, err := loadTagged()
		if err != nil {
			return nil, fmt.Errorf("series %q: %w", key, err)
		}
		im.series.ReplaceOrInsert(item[tagged]{key: key, v: v})
	case strings.HasPrefix(k, stateDir):
		name := strings.TrimPrefix(k, stateDir)
		if c.delete {
			im.states.Delete(item[*stateRecord]{key: name})
			return nil, nil
		}
		rec := new(stateRecord)
		if err := json.Unmarshal(c.value, rec); err != nil {
			return nil, fmt.Errorf("state %q: %w", name, err)
		}
		im.states.ReplaceOrInsert(item[*stateRecord]{key: name, v: rec})
	case strings.HasPrefix(k, lockDir):
		name := strings.TrimPrefix(k, lockDir)
		if c.delete {
			im.locks.Delete(item[heldLock]{key: name})
			return nil, nil
		}
		im.locks.ReplaceOrInsert(item[heldLock]{key: name, v: heldLock{raw: c.value, mod: c.mod}})
	case strings.HasPrefix(k, eventDir):
		return im.applyEvents(loadTagged, c)
	case k == pendingKey && !c.delete:
		return nil, im.applyPending(l, c.value, c.mod)
	}
	return nil, nil
}

// applyEvents applies the change of a commit log's key.
func (im *image) applyEvents(loadTagged func() (tagged, error), c kvChange) (*commitLog, error) {
	if c.delete {
		im.events.Delete(item[commitLog]{key: c.key})
		return nil, nil
	}
	v, err := loadTagged()
	if err != nil {
		return nil, fmt.Errorf("event log %s: %w", c.key, err)
	}
	cs, err := decodeChanges(v.data)
	if err != nil || len(cs) == 0 {
		return nil, fmt.Errorf("event log %s: %d changes, %v", c.key, len(cs), err)
	}
	cl := commitLog{changes: cs, blob: v.blob}
	im.events.ReplaceOrInsert(item[commitLog]{key: c.key, v: cl})
	return &cl, nil
}

// logsAfter returns the commit logs with changes above rev, oldest first.
func (im *image) logsAfter(rev uint64) []commitLog {
	var out []commitLog
	im.events.Ascend(func(it item[commitLog]) bool {
		if it.v.last() > rev {
			out = append(out, it.v)
		}
		return true
	})
	return out
}
