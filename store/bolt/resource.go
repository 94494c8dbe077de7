package bolt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	bbolt "go.etcd.io/bbolt"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

func (tx *Tx) bucket(kind string) *bbolt.Bucket {
	return tx.tx.Bucket(bucketResources).Bucket([]byte(kind))
}

// stored returns the stored value of kind/key as a Resource pointing into
// the transaction's memory, or an error wrapping store.ErrNotFound.
func (tx *Tx) stored(kind, key string) (store.Resource, error) {
	var v []byte
	if b := tx.bucket(kind); b != nil {
		v = b.Get([]byte(key))
	}
	if v == nil {
		return store.Resource{}, fmt.Errorf("%s %q: %w", kind, key, store.ErrNotFound)
	}
	return store.DecodeValue(kind, key, v)
}

// Get returns the resource kind/key, copied out of the transaction, or an
// error wrapping store.ErrNotFound.
func (tx *Tx) Get(kind, key string) (store.Resource, error) {
	r, err := tx.stored(kind, key)
	r.Object = bytes.Clone(r.Object)
	return r, err
}

// GetObject decodes the object kind/key into into, or returns an error
// wrapping store.ErrNotFound.
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
func (tx *Tx) List(kind string) ([]store.Resource, error) {
	var out []store.Resource
	err := tx.Scan(kind, "", func(r store.Resource) error {
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
func (tx *Tx) Scan(kind, prefix string, fn func(store.Resource) error) error {
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
		r, err := store.DecodeValue(kind, string(k), v)
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

// nextVersion takes the next resourceVersion of the store's one sequence.
func (tx *Tx) nextVersion() (uint64, error) {
	return tx.tx.Bucket(bucketMeta).NextSequence()
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
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return 0, err
	}
	typ := store.Added
	if err == nil {
		typ = store.Modified
	}
	rv, err := tx.nextVersion()
	if err != nil {
		return 0, fmt.Errorf("put %s %q: %w", kind, key, err)
	}
	return rv, tx.write(typ, kind, key, store.RecordValue(rv, data))
}

// PutObject stores obj, an object of an API kind, as kind/key, stamped as
// store.StampObject says, and keeps the tenant index. When nothing but
// the stamps differs, it writes nothing, records no change and reports
// changed false.
func (tx *Tx) PutObject(kind, key string, obj schema.Object) (changed bool, err error) {
	var old *store.Resource
	if _, ok := schema.LookupKind(kind); ok && key != "" {
		r, err := tx.stored(kind, key)
		switch {
		case err == nil:
			old = &r
		case !errors.Is(err, store.ErrNotFound):
			return false, err
		}
	}
	w, err := store.StampObject(kind, key, obj, old, tx.now(), tx.nextVersion)
	if err != nil || w.Value == nil {
		return false, err
	}
	if err := tx.write(w.Type, kind, key, w.Value); err != nil {
		return false, err
	}
	return true, tx.reindex(kind, key, w.FromTenant, w.ToTenant)
}

// write stores the value v as kind/key and records the change.
func (tx *Tx) write(typ store.EventType, kind, key string, v []byte) error {
	b, err := tx.tx.Bucket(bucketResources).CreateBucketIfNotExists([]byte(kind))
	if err != nil {
		return fmt.Errorf("put %s %q: %w", kind, key, err)
	}
	if err := b.Put([]byte(key), v); err != nil {
		return fmt.Errorf("put %s %q: %w", kind, key, err)
	}
	// bbolt keeps v until the commit.
	r, err := store.DecodeValue(kind, key, v)
	if err != nil {
		return err
	}
	tx.changes = append(tx.changes, store.Change{Type: typ, Resource: r})
	return nil
}

// Delete removes kind/key and returns the resourceVersion of the delete,
// or an error wrapping store.ErrNotFound. The change carries the object as
// it was, an API object with the delete's resourceVersion in its metadata.
func (tx *Tx) Delete(kind, key string) (uint64, error) {
	old, err := tx.stored(kind, key)
	if err != nil {
		return 0, err
	}
	rv, err := tx.nextVersion()
	if err != nil {
		return 0, fmt.Errorf("delete %s %q: %w", kind, key, err)
	}
	gone, tenant, err := store.DeletedObject(old, rv)
	if err != nil {
		return 0, err
	}
	if err := tx.reindex(kind, key, tenant, ""); err != nil {
		return 0, err
	}
	if err := tx.bucket(kind).Delete([]byte(key)); err != nil {
		return 0, fmt.Errorf("delete %s %q: %w", kind, key, err)
	}
	tx.changes = append(tx.changes, store.Change{Type: store.Deleted, Resource: gone})
	return rv, nil
}
