package etcd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// errReadOnly refuses a write in a View.
var errReadOnly = errors.New("write in a read-only transaction")

// Tx is a transaction on the store, valid only inside the View or Update
// function it was passed to. It reads an image of the store as of one
// commit; an Update's Tx changes a copy of it, which its commit writes to
// etcd.
type Tx struct {
	s   *Store
	img *image
	// base is the image an Update started from; nil in a View.
	base *image
	now  func() time.Time

	// What an Update wrote: its changes in order, the keys it changed,
	// the etcd revisions of the locks it read (0: none held), and the
	// bytes of the state versions it stored, by blob.
	changes   []loggedChange
	dirty     map[string]bool // keys under d/ (relative to the prefix)
	readLocks map[string]int64
	blobs     map[string][]byte
}

var _ store.Tx = (*Tx)(nil)

func (tx *Tx) writable() error {
	if tx.base == nil {
		return errReadOnly
	}
	return nil
}

// stored returns the stored value of kind/key as a Resource pointing into
// the image, or an error wrapping store.ErrNotFound.
func (tx *Tx) stored(kind, key string) (store.Resource, error) {
	r, ok := tx.img.getRes(kind, key)
	if !ok {
		return store.Resource{}, fmt.Errorf("%s %q: %w", kind, key, store.ErrNotFound)
	}
	return store.DecodeValue(kind, key, r.value)
}

// Get returns a copy of the resource kind/key, or an error wrapping
// store.ErrNotFound.
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

// List returns copies of every resource of kind, ordered by key.
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
// Resource's Object is valid only until fn returns.
func (tx *Tx) Scan(kind, prefix string, fn func(store.Resource) error) error {
	return scan(tx.img.res, resID(kind, prefix), func(it item[resource]) error {
		r, err := store.DecodeValue(kind, it.key[len(kind)+1:], it.v.value)
		if err != nil {
			return err
		}
		return fn(r)
	})
}

// Count returns how many resources of kind the store holds.
func (tx *Tx) Count(kind string) int {
	n := 0
	_ = scan(tx.img.res, resID(kind, ""), func(item[resource]) error { n++; return nil })
	return n
}

// TenantObjects calls fn with each resource of kind that belongs to
// tenant, in key order, until fn returns an error, which it returns. The
// Resource's Object is valid only until fn returns.
func (tx *Tx) TenantObjects(tenant, kind string, fn func(store.Resource) error) error {
	if tenant == "" {
		return nil
	}
	prefix := tenantID(tenant, kind, "")
	return scan(tx.img.tenants, prefix, func(it item[struct{}]) error {
		r, err := tx.stored(kind, it.key[len(prefix):])
		if err != nil {
			return fmt.Errorf("tenant index of %s: %w", tenant, err)
		}
		return fn(r)
	})
}

// ResourceVersion returns the store's latest revision.
func (tx *Tx) ResourceVersion() uint64 { return tx.img.head.Rev }

// nextVersion takes the next revision of the store's one sequence.
func (tx *Tx) nextVersion() (uint64, error) {
	if err := tx.writable(); err != nil {
		return 0, err
	}
	tx.img.head.Rev++
	return tx.img.head.Rev, nil
}

// checkKind refuses a kind the key layout cannot hold.
func checkKind(kind, key string) error {
	if kind == "" || key == "" {
		return fmt.Errorf("put resource: kind %q and key %q must both be set", kind, key)
	}
	if strings.ContainsAny(kind, "/\x00") {
		return fmt.Errorf("put resource: kind %q holds a slash or a NUL", kind)
	}
	return nil
}

// Put stores data as the internal record kind/key and returns its
// revision. Storing the same bytes again changes nothing.
func (tx *Tx) Put(kind, key string, data []byte) (uint64, error) {
	if err := checkKind(kind, key); err != nil {
		return 0, err
	}
	if _, ok := schema.LookupKind(kind); ok {
		return 0, fmt.Errorf("put %s %q: an API kind is stored with PutObject", kind, key)
	}
	if err := tx.writable(); err != nil {
		return 0, err
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
		return 0, err
	}
	tx.write(typ, kind, key, store.RecordValue(rv, data), "")
	return rv, nil
}

// PutObject stores obj, an object of an API kind, as kind/key, stamped as
// store.StampObject says, and reports whether anything changed.
func (tx *Tx) PutObject(kind, key string, obj schema.Object) (bool, error) {
	if err := tx.writable(); err != nil {
		return false, err
	}
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
	tx.write(w.Type, kind, key, w.Value, w.ToTenant)
	return true, nil
}

// write stores the value v as kind/key under tenant and logs the change.
func (tx *Tx) write(typ store.EventType, kind, key string, v []byte, tenant string) {
	tx.img.setRes(kind, key, &resource{value: v, tenant: tenant})
	tx.dirty[resKey(kind, key)] = true
	tx.changes = append(tx.changes, loggedChange{Type: typ, Kind: kind, Name: key, Value: v})
}

// Delete removes kind/key and returns the revision of the delete, or an
// error wrapping store.ErrNotFound.
func (tx *Tx) Delete(kind, key string) (uint64, error) {
	if err := tx.writable(); err != nil {
		return 0, err
	}
	old, err := tx.stored(kind, key)
	if err != nil {
		return 0, err
	}
	rv, err := tx.nextVersion()
	if err != nil {
		return 0, err
	}
	gone, _, err := store.DeletedObject(old, rv)
	if err != nil {
		return 0, err
	}
	tx.img.setRes(kind, key, nil)
	tx.dirty[resKey(kind, key)] = true
	tx.changes = append(tx.changes, loggedChange{Type: store.Deleted, Kind: kind, Name: key, Value: store.RecordValue(rv, gone.Object)})
	return rv, nil
}

// EventsFrom returns the revision above which the event log holds every
// change.
func (tx *Tx) EventsFrom() uint64 { return tx.img.head.From }

// Events calls fn with each logged change whose revision is above after,
// oldest first, until fn returns an error, which it returns; an error
// wrapping store.ErrGone when after is below the log's horizon.
func (tx *Tx) Events(after uint64, fn func(store.Change) error) error {
	if from := tx.EventsFrom(); after < from {
		return fmt.Errorf("events after %d: the log starts after %d: %w", after, from, store.ErrGone)
	}
	for _, cl := range tx.img.logsAfter(after) {
		for _, c := range cl.changes {
			if c.Resource.ResourceVersion <= after {
				continue
			}
			if err := fn(c); err != nil {
				return err
			}
		}
	}
	return nil
}
