package store

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// ObjectWrite is what an engine's PutObject writes, as StampObject
// decides it.
type ObjectWrite struct {
	// Value is the stored value to write under kind/key; nil when
	// nothing but bookkeeping differs from what is stored, and nothing
	// is written.
	Value []byte
	// Type is the change: Added or Modified.
	Type EventType
	// FromTenant and ToTenant are where the tenant index had and must
	// have the object ("" for none).
	FromTenant, ToTenant string
}

// StampObject applies the rules of Tx.PutObject to obj, an object of the
// API kind kind to be stored as key over old, the stored resource (nil
// when there is none). It stamps obj's metadata, in the one place the
// store does:
//
//   - uid and createdAt: kept from the stored object; for a new one, kept
//     as obj has them, or minted (a random UUID, and now) when empty;
//   - updatedAt: now, when anything else differs from what is stored;
//   - resourceVersion: next(), the next of the store's one sequence, as
//     a decimal string, when anything else differs from what is stored.
//
// When nothing but this bookkeeping differs, it returns a nil Value and
// obj's metadata holds the stored values; next is not called. An object
// of a kind that lives in tenants must carry the schema.LabelTenant label;
// the tenant index follows the label.
func StampObject(kind, key string, obj schema.Object, old *Resource, now time.Time, next func() (uint64, error)) (ObjectWrite, error) {
	var w ObjectWrite
	k, ok := schema.LookupKind(kind)
	if !ok || key == "" {
		return w, fmt.Errorf("put object %s %q: not an API kind, or no key", kind, key)
	}
	m := obj.Meta()
	w.Type, w.ToTenant = Added, schema.TenantOf(kind, m)
	if k.InTenant && w.ToTenant == "" {
		return w, fmt.Errorf("put %s %q: no %s label names its tenant", kind, key, schema.LabelTenant)
	}
	if old != nil {
		var prev schema.ObjectMeta
		if err := old.DecodeMeta(&prev); err != nil {
			return w, fmt.Errorf("put: stored object: %w", err)
		}
		w.Type, w.FromTenant = Modified, schema.TenantOf(kind, &prev)
		m.UID, m.CreatedAt, m.UpdatedAt, m.ResourceVersion = prev.UID, prev.CreatedAt, prev.UpdatedAt, prev.ResourceVersion
		data, err := json.Marshal(obj)
		if err != nil {
			return w, fmt.Errorf("put %s %q: %w", kind, key, err)
		}
		if bytes.Equal(data, old.Object) {
			return ObjectWrite{}, nil
		}
	}
	now = now.UTC()
	if m.UID == "" {
		m.UID = NewUID()
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = now
	}
	rv, err := next()
	if err != nil {
		return w, fmt.Errorf("put %s %q: %w", kind, key, err)
	}
	m.UpdatedAt, m.ResourceVersion = now, strconv.FormatUint(rv, 10)
	if w.Value, err = ObjectValue(rv, obj); err != nil {
		return w, fmt.Errorf("put %s %q: %w", kind, key, err)
	}
	return w, nil
}

// DeletedObject returns the change's resource of a delete of old at
// revision rv, and the tenant the index had it under ("" for none). An API
// object carries the delete's revision in its metadata too; one that does
// not decode is carried as it was.
func DeletedObject(old Resource, rv uint64) (Resource, string, error) {
	gone := Resource{Kind: old.Kind, Name: old.Name, ResourceVersion: rv, Object: bytes.Clone(old.Object)}
	if _, ok := schema.LookupKind(old.Kind); !ok {
		return gone, "", nil
	}
	var m schema.ObjectMeta
	if err := old.DecodeMeta(&m); err != nil {
		return gone, "", fmt.Errorf("delete: stored object: %w", err)
	}
	if v, err := RestampValue(old.Kind, gone.Object, rv); err == nil {
		if r, err := DecodeValue(old.Kind, old.Name, v); err == nil {
			gone.Object, gone.head = r.Object, r.head
		}
	}
	return gone, schema.TenantOf(old.Kind, &m), nil
}

// NewUID returns a random (version 4) UUID, the form of every
// metadata.uid and of the reconciler's upload keys.
func NewUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
