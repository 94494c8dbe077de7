package backend

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
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
}

// ErrNotFound is returned for a resource that does not exist.
var ErrNotFound = errors.New("not found")

// A stored value is the resourceVersion (8 bytes, big endian) followed by
// the JSON.

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
	return rv, tx.write(typ, kind, key, rv, data)
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
		prev, err := objectMeta(old.Object)
		if err != nil {
			return false, fmt.Errorf("put %s %q: stored object: %w", kind, key, err)
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
	data, err := json.Marshal(obj)
	if err != nil {
		return false, fmt.Errorf("put %s %q: %w", kind, key, err)
	}
	if err := tx.write(typ, kind, key, rv, data); err != nil {
		return false, err
	}
	return true, tx.reindex(kind, key, oldTenant, tenant)
}

// write stores data as kind/key at rv and records the change.
func (tx *Tx) write(typ EventType, kind, key string, rv uint64, data []byte) error {
	b, err := tx.tx.Bucket(bucketResources).CreateBucketIfNotExists([]byte(kind))
	if err != nil {
		return fmt.Errorf("put %s %q: %w", kind, key, err)
	}
	v := make([]byte, 8+len(data))
	binary.BigEndian.PutUint64(v, rv)
	copy(v[8:], data)
	if err := b.Put([]byte(key), v); err != nil {
		return fmt.Errorf("put %s %q: %w", kind, key, err)
	}
	tx.changes = append(tx.changes, Change{Type: typ, Resource: Resource{
		Kind: kind, Name: key, ResourceVersion: rv, Object: v[8:],
	}})
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
	obj := bytes.Clone(old.Object)
	if k, ok := schema.LookupKind(kind); ok {
		m, err := objectMeta(obj)
		if err != nil {
			return 0, fmt.Errorf("delete %s %q: stored object: %w", kind, key, err)
		}
		if err := tx.reindex(kind, key, schema.TenantOf(kind, &m), ""); err != nil {
			return 0, err
		}
		if restamped, err := restamp(k, obj, rv); err == nil {
			obj = restamped
		}
	}
	if err := tx.bucket(kind).Delete([]byte(key)); err != nil {
		return 0, fmt.Errorf("delete %s %q: %w", kind, key, err)
	}
	tx.changes = append(tx.changes, Change{Type: Deleted, Resource: Resource{
		Kind: kind, Name: key, ResourceVersion: rv, Object: obj,
	}})
	return rv, nil
}

// restamp returns the API object data, of kind k, with its
// metadata.resourceVersion set to rv: decoded into its Go type and encoded
// again, which gives back the bytes PutObject writes.
func restamp(k schema.KindInfo, data []byte, rv uint64) ([]byte, error) {
	obj := k.New()
	if err := json.Unmarshal(data, obj); err != nil {
		return nil, err
	}
	obj.Meta().ResourceVersion = strconv.FormatUint(rv, 10)
	return json.Marshal(obj)
}

// objectMeta decodes the metadata of a stored object and reads nothing
// after it: the Go types of every kind put apiVersion and kind first, so
// that a list filtering by labels decodes only the head of each object.
func objectMeta(data []byte) (schema.ObjectMeta, error) {
	var m schema.ObjectMeta
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return m, errors.New("decode object: not a JSON object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return m, fmt.Errorf("decode object: %w", err)
		}
		if t == "metadata" {
			if err := dec.Decode(&m); err != nil {
				return m, fmt.Errorf("decode object: metadata: %w", err)
			}
			return m, nil
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return m, fmt.Errorf("decode object: %w", err)
		}
	}
	return m, nil
}

// decodeResource splits a stored value; Object points into v.
func decodeResource(kind, key string, v []byte) (Resource, error) {
	if len(v) < 8 {
		return Resource{}, fmt.Errorf("%s %q: stored value of %d bytes is too short", kind, key, len(v))
	}
	return Resource{
		Kind:            kind,
		Name:            key,
		ResourceVersion: binary.BigEndian.Uint64(v),
		Object:          v[8:],
	}, nil
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
