package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Errors of resource and event operations.
var (
	// ErrNotFound says a resource does not exist.
	ErrNotFound = errors.New("not found")
	// ErrGone says a revision is older than the changes the event log
	// keeps: a watch from it must list again.
	ErrGone = errors.New("resourceVersion is older than the kept event history")
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

// Resource is one stored object: its kind, its key (Name), the revision
// of its last change and its JSON. The JSON of an API object carries the
// same revision in metadata.resourceVersion, as PutObject wrote it, and
// is served as it is.
type Resource struct {
	Kind            string
	Name            string
	ResourceVersion uint64
	Object          []byte

	// head is what the stored value's header says of Object (see
	// DecodeValue); the zero head says nothing.
	head objectHead
}

// MetaHead is the part of an object's metadata that events, lists and
// the tenant index read; decoding it alone is cheaper than all of it.
type MetaHead struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
}

// Meta returns h as object metadata, for schema.TenantOf.
func (h MetaHead) Meta() schema.ObjectMeta {
	return schema.ObjectMeta{Name: h.Name, Labels: h.Labels}
}

// DecodeMeta decodes the resource's metadata into into: from the range
// the stored value's header gives, or else from the head of the object,
// reading nothing after the metadata.
func (r Resource) DecodeMeta(into any) error {
	if r.head.metaEnd > 0 {
		if err := json.Unmarshal(r.Object[r.head.metaStart:r.head.metaEnd], into); err != nil {
			return fmt.Errorf("%s %q: metadata: %w", r.Kind, r.Name, err)
		}
		return nil
	}
	if err := objectMeta(r.Object, into); err != nil {
		return fmt.Errorf("%s %q: %w", r.Kind, r.Name, err)
	}
	return nil
}

// CreatedAt returns the object's metadata.createdAt, from the stored
// value's header when it has it, so that ordering objects by age needs
// no decoding; zero when the object has none.
func (r Resource) CreatedAt() (time.Time, error) {
	n, err := r.createdAt()
	if err != nil || n == 0 {
		return time.Time{}, err
	}
	return time.Unix(0, n).UTC(), nil
}

// createdAt returns metadata.createdAt in Unix nanoseconds, from the
// header when it has it.
func (r Resource) createdAt() (int64, error) {
	if r.head.created != 0 || r.head.metaEnd > 0 {
		return r.head.created, nil
	}
	var m struct {
		CreatedAt time.Time `json:"createdAt"`
	}
	if err := r.DecodeMeta(&m); err != nil || m.CreatedAt.IsZero() {
		return 0, err
	}
	return m.CreatedAt.UnixNano(), nil
}

// DecodeTenantObjects decodes every object of kind that belongs to tenant
// (see Tx.TenantObjects) into a new T each, in key order.
func DecodeTenantObjects[T any](tx Tx, tenant, kind string) ([]*T, error) {
	var out []*T
	err := tx.TenantObjects(tenant, kind, func(res Resource) error {
		v := new(T)
		out = append(out, v)
		return json.Unmarshal(res.Object, v)
	})
	return out, err
}
