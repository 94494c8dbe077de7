package backend

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"

	"github.com/rezuscloud/rezuscloud/schema"
)

// EventType says how a resource changed.
type EventType string

// The change types, as the watch API names them.
const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
)

// Change is one resource change of a committed transaction.
type Change struct {
	Type EventType
	// Resource is the resource as stored after the change; for Deleted,
	// the object as it was before, with the ResourceVersion of the delete
	// (in its metadata too, for an API kind).
	Resource Resource
}

// Resource is one stored object: its kind, its key (Name), the
// resourceVersion of its last change and its JSON. The JSON of an API
// object carries the same resourceVersion in metadata.resourceVersion, as
// PutObject wrote it, and is served as it is.
type Resource struct {
	Kind            string
	Name            string
	ResourceVersion uint64
	Object          []byte

	// head is what the stored value's header says of Object.
	head objectHead
}

// ErrNotFound is returned for a resource that does not exist.
var ErrNotFound = errors.New("not found")

func (tx *Tx) bucket(kind string) *bolt.Bucket {
	return tx.tx.Bucket(bucketResources).Bucket([]byte(kind))
}

// stored returns the stored value of kind/key as a Resource pointing into
// the transaction's memory, or an error wrapping ErrNotFound.
func (tx *Tx) stored(kind, key string) (Resource, error) {
	var v []byte
	if b := tx.bucket(kind); b != nil {
		v = b.Get([]byte(key))
	}
	if v == nil {
		return Resource{}, fmt.Errorf("%s %q: %w", kind, key, ErrNotFound)
	}
	return decodeResource(kind, key, v)
}

// Get returns the resource kind/key, copied out of the transaction, or an
// error wrapping ErrNotFound.
func (tx *Tx) Get(kind, key string) (Resource, error) {
	r, err := tx.stored(kind, key)
	r.Object = bytes.Clone(r.Object)
	return r, err
}

// GetObject decodes the object kind/key into into, or returns an error
// wrapping ErrNotFound.
func (tx *Tx) GetObject(kind, key string, into any) error {
	r, err := tx.stored(kind, key)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(r.Object, into); err != nil {
		return fmt.Errorf("decode %s %q: %w", kind, key, err)
	}
	return nil
}

// List returns every resource of kind, ordered by key, copied out of the
// transaction.
func (tx *Tx) List(kind string) ([]Resource, error) {
	var out []Resource
	err := tx.Scan(kind, "", func(r Resource) error {
		r.Object = bytes.Clone(r.Object)
		out = append(out, r)
		return nil
	})
	return out, err
}

// Scan calls fn with each resource of kind whose key starts with prefix,
// in key order, until fn returns an error, which Scan returns. The
// Resource's Object points into the transaction and is valid only until fn
// returns: copy what you keep. fn must not change the store.
func (tx *Tx) Scan(kind, prefix string, fn func(Resource) error) error {
	b := tx.bucket(kind)
	if b == nil {
		return nil
	}
	c := b.Cursor()
	p := []byte(prefix)
	for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
		if v == nil {
			continue
		}
		r, err := decodeResource(kind, string(k), v)
		if err != nil {
			return err
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// Count returns how many resources of kind the store holds, without
// reading them.
func (tx *Tx) Count(kind string) int {
	b := tx.bucket(kind)
	if b == nil {
		return 0
	}
	n := 0
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v != nil {
			n++
		}
	}
	return n
}

// ResourceVersion returns the store's latest resourceVersion: the one the
// last resource change received, or 0 before the first.
func (tx *Tx) ResourceVersion() uint64 {
	return tx.tx.Bucket(bucketMeta).Sequence()
}

// Put stores data as kind/key and returns its new resourceVersion, taken
// from the store's one global, monotonic sequence. It is for the store's
// internal records, which the API never serves; it refuses the kinds of
// schema.Kinds, which go through PutObject. Storing the same bytes again
// changes nothing: Put returns the existing resourceVersion and records no
// change.
func (tx *Tx) Put(kind, key string, data []byte) (uint64, error) {
	if kind == "" || key == "" {
		return 0, fmt.Errorf("put resource: kind %q and key %q must both be set", kind, key)
	}
	if _, ok := schema.LookupKind(kind); ok {
		return 0, fmt.Errorf("put %s %q: an API kind is stored with PutObject", kind, key)
	}
	old, err := tx.stored(kind, key)
	switch {
	case err == nil && bytes.Equal(old.Object, data):
		return old.ResourceVersion, nil
	case err != nil && !errors.Is(err, ErrNotFound):
		return 0, err
	}
	typ := Added
	if err == nil {
		typ = Modified
	}
	rv, err := tx.tx.Bucket(bucketMeta).NextSequence()
	if err != nil {
		return 0, fmt.Errorf("put %s %q: %w", kind, key, err)
	}
	return rv, tx.write(typ, kind, key, encodeValue(rv, objectHead{}, data))
}

// PutObject stores obj, an object of an API kind, as kind/key, and stamps
// its metadata in the one place the store does:
//
//   - uid and createdAt: kept from the stored object; for a new one, kept
//     as obj has them, or minted (a random UUID, and now) when empty;
//   - updatedAt: now, when anything else differs from what is stored;
//   - resourceVersion: the next of the store's one global sequence, as a
//     decimal string, when anything else differs from what is stored.
//
// When nothing but this bookkeeping differs, PutObject writes nothing,
// records no change and reports changed false; obj's metadata then holds
// the stored values. An object of a kind that lives in tenants must carry
// the schema.LabelTenant label; the tenant index follows the label.
func (tx *Tx) PutObject(kind, key string, obj schema.Object) (changed bool, err error) {
	k, ok := schema.LookupKind(kind)
	if !ok || key == "" {
		return false, fmt.Errorf("put object %s %q: not an API kind, or no key", kind, key)
	}
	m := obj.Meta()
	tenant := schema.TenantOf(kind, m)
	if k.InTenant && tenant == "" {
		return false, fmt.Errorf("put %s %q: no %s label names its tenant", kind, key, schema.LabelTenant)
	}
	old, err := tx.stored(kind, key)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return false, err
	}
	typ, oldTenant := Added, ""
	if err == nil {
		var prev schema.ObjectMeta
		if err := old.decodeMeta(&prev); err != nil {
			return false, fmt.Errorf("put: stored object: %w", err)
		}
		typ, oldTenant = Modified, schema.TenantOf(kind, &prev)
		m.UID, m.CreatedAt, m.UpdatedAt, m.ResourceVersion = prev.UID, prev.CreatedAt, prev.UpdatedAt, prev.ResourceVersion
		data, err := json.Marshal(obj)
		if err != nil {
			return false, fmt.Errorf("put %s %q: %w", kind, key, err)
		}
		if bytes.Equal(data, old.Object) {
			return false, nil
		}
	}
	now := tx.now().UTC()
	if m.UID == "" {
		m.UID = newUID()
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = now
	}
	rv, err := tx.tx.Bucket(bucketMeta).NextSequence()
	if err != nil {
		return false, fmt.Errorf("put %s %q: %w", kind, key, err)
	}
	m.UpdatedAt, m.ResourceVersion = now, strconv.FormatUint(rv, 10)
	data, head, err := encodeObject(obj)
	if err != nil {
		return false, fmt.Errorf("put %s %q: %w", kind, key, err)
	}
	if err := tx.write(typ, kind, key, encodeValue(rv, head, data)); err != nil {
		return false, err
	}
	return true, tx.reindex(kind, key, oldTenant, tenant)
}

// write stores the value v as kind/key and records the change.
func (tx *Tx) write(typ EventType, kind, key string, v []byte) error {
	b, err := tx.tx.Bucket(bucketResources).CreateBucketIfNotExists([]byte(kind))
	if err != nil {
		return fmt.Errorf("put %s %q: %w", kind, key, err)
	}
	if err := b.Put([]byte(key), v); err != nil {
		return fmt.Errorf("put %s %q: %w", kind, key, err)
	}
	// bbolt keeps v until the commit.
	r, err := decodeResource(kind, key, v)
	if err != nil {
		return err
	}
	tx.changes = append(tx.changes, Change{Type: typ, Resource: r})
	return nil
}

// Delete removes kind/key and returns the resourceVersion of the delete,
// or an error wrapping ErrNotFound. The change carries the object as it
// was, an API object with the delete's resourceVersion in its metadata.
func (tx *Tx) Delete(kind, key string) (uint64, error) {
	old, err := tx.stored(kind, key)
	if err != nil {
		return 0, err
	}
	rv, err := tx.tx.Bucket(bucketMeta).NextSequence()
	if err != nil {
		return 0, fmt.Errorf("delete %s %q: %w", kind, key, err)
	}
	gone := Resource{Kind: kind, Name: key, ResourceVersion: rv, Object: bytes.Clone(old.Object)}
	if k, ok := schema.LookupKind(kind); ok {
		var m schema.ObjectMeta
		if err := old.decodeMeta(&m); err != nil {
			return 0, fmt.Errorf("delete: stored object: %w", err)
		}
		if err := tx.reindex(kind, key, schema.TenantOf(kind, &m), ""); err != nil {
			return 0, err
		}
		if data, head, err := restamp(k, gone.Object, rv); err == nil {
			gone.Object, gone.head = data, head
		}
	}
	if err := tx.bucket(kind).Delete([]byte(key)); err != nil {
		return 0, fmt.Errorf("delete %s %q: %w", kind, key, err)
	}
	tx.changes = append(tx.changes, Change{Type: Deleted, Resource: gone})
	return rv, nil
}

// newUID returns a random (version 4) UUID.
func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
