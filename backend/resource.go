package backend

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
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
	// the object as it was before, with the ResourceVersion of the delete.
	Resource Resource
}

// Resource is one API object as the store keeps it: kind, name, the
// resourceVersion of its last change and its JSON. The store does not
// rewrite the JSON; whoever serves it sets metadata.resourceVersion from
// ResourceVersion.
type Resource struct {
	Kind            string
	Name            string
	ResourceVersion uint64
	Object          []byte
}

// ErrNotFound is returned for a resource that does not exist.
var ErrNotFound = errors.New("not found")

// Get returns the resource kind/name, or an error wrapping ErrNotFound.
func (tx *Tx) Get(kind, name string) (Resource, error) {
	b := tx.tx.Bucket(bucketResources).Bucket([]byte(kind))
	if b == nil {
		return Resource{}, fmt.Errorf("%s %q: %w", kind, name, ErrNotFound)
	}
	v := b.Get([]byte(name))
	if v == nil {
		return Resource{}, fmt.Errorf("%s %q: %w", kind, name, ErrNotFound)
	}
	return decodeResource(kind, name, v)
}

// List returns every resource of kind, ordered by name.
func (tx *Tx) List(kind string) ([]Resource, error) {
	b := tx.tx.Bucket(bucketResources).Bucket([]byte(kind))
	if b == nil {
		return nil, nil
	}
	var out []Resource
	err := b.ForEach(func(k, v []byte) error {
		r, err := decodeResource(kind, string(k), v)
		if err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// ResourceVersion returns the store's latest resourceVersion: the one the
// last resource change received, or 0 before the first.
func (tx *Tx) ResourceVersion() uint64 {
	return tx.tx.Bucket(bucketMeta).Sequence()
}

// Put stores object (JSON) as kind/name and returns its new
// resourceVersion, taken from the store's one global, monotonic sequence.
// Storing the same bytes again changes nothing: Put returns the existing
// resourceVersion and records no change.
func (tx *Tx) Put(kind, name string, object []byte) (uint64, error) {
	if kind == "" || name == "" {
		return 0, fmt.Errorf("put resource: kind %q and name %q must both be set", kind, name)
	}
	b, err := tx.tx.Bucket(bucketResources).CreateBucketIfNotExists([]byte(kind))
	if err != nil {
		return 0, fmt.Errorf("put %s %q: %w", kind, name, err)
	}
	typ := Added
	if old := b.Get([]byte(name)); old != nil {
		if len(old) >= 8 && bytes.Equal(old[8:], object) {
			return binary.BigEndian.Uint64(old), nil
		}
		typ = Modified
	}
	rv, err := tx.tx.Bucket(bucketMeta).NextSequence()
	if err != nil {
		return 0, fmt.Errorf("put %s %q: %w", kind, name, err)
	}
	v := make([]byte, 8+len(object))
	binary.BigEndian.PutUint64(v, rv)
	copy(v[8:], object)
	if err := b.Put([]byte(name), v); err != nil {
		return 0, fmt.Errorf("put %s %q: %w", kind, name, err)
	}
	tx.changes = append(tx.changes, Change{Type: typ, Resource: Resource{
		Kind: kind, Name: name, ResourceVersion: rv, Object: v[8:],
	}})
	return rv, nil
}

// Delete removes kind/name and returns the resourceVersion of the delete,
// or an error wrapping ErrNotFound.
func (tx *Tx) Delete(kind, name string) (uint64, error) {
	old, err := tx.Get(kind, name)
	if err != nil {
		return 0, err
	}
	rv, err := tx.tx.Bucket(bucketMeta).NextSequence()
	if err != nil {
		return 0, fmt.Errorf("delete %s %q: %w", kind, name, err)
	}
	if err := tx.tx.Bucket(bucketResources).Bucket([]byte(kind)).Delete([]byte(name)); err != nil {
		return 0, fmt.Errorf("delete %s %q: %w", kind, name, err)
	}
	old.ResourceVersion = rv
	tx.changes = append(tx.changes, Change{Type: Deleted, Resource: old})
	return rv, nil
}

// decodeResource copies a stored value out of the transaction's memory.
func decodeResource(kind, name string, v []byte) (Resource, error) {
	if len(v) < 8 {
		return Resource{}, fmt.Errorf("%s %q: stored value of %d bytes is too short", kind, name, len(v))
	}
	return Resource{
		Kind:            kind,
		Name:            name,
		ResourceVersion: binary.BigEndian.Uint64(v),
		Object:          bytes.Clone(v[8:]),
	}, nil
}
