package store

import (
	"errors"

	"github.com/rezuscloud/rezuscloud/schema"
)

// DefaultEventHistory is how many of the latest changes an engine's event
// log keeps unless it is told otherwise.
const DefaultEventHistory = 10000

// ErrFenced says an engine refused an Update because its writer no longer
// holds the lease its writes are conditional on (a replica's fence, see
// the etcd engine's SetFence): the writer must stop, and nothing of the
// Update was written.
var ErrFenced = errors.New("the writer's lease is gone: its writes are fenced off")

// Store is an open store. It is safe for concurrent use.
type Store interface {
	// View runs fn in a read-only transaction. Many can run at once,
	// and each sees the store as of one commit.
	View(fn func(Tx) error) error
	// Update runs fn in a read-write transaction: one at a time,
	// committed durably when fn returns nil, rolled back when it returns
	// an error. After a commit that changed resources, the commit hooks
	// get the changes before Update returns.
	Update(fn func(Tx) error) error
	// OnCommit registers fn to be called after every committed Update
	// that changed resources, with the changes in the order they were
	// made. Hooks run in commit order while the next Update waits, so
	// they must be quick: an event hub copies the changes to its
	// subscribers and returns.
	OnCommit(fn func([]Change))
	// Close closes the store. Transactions still running finish first.
	Close() error
}

// Tx is one transaction, valid only inside the View or Update function it
// was passed to. Resources and bytes it returns are copies unless a
// method says they point into the transaction. Writes in a View fail.
type Tx interface {
	// Get returns the resource kind/key, or an error wrapping
	// ErrNotFound.
	Get(kind, key string) (Resource, error)
	// GetObject decodes the JSON of resource kind/key into into, or
	// returns an error wrapping ErrNotFound.
	GetObject(kind, key string, into any) error
	// List returns every resource of kind, ordered by key.
	List(kind string) ([]Resource, error)
	// Scan calls fn with each resource of kind whose key starts with
	// prefix, in key order, until fn returns an error, which Scan
	// returns. The Resource's Object points into the transaction and is
	// valid only until fn returns. fn must not change the store.
	Scan(kind, prefix string, fn func(Resource) error) error
	// Count returns how many resources of kind the store holds.
	Count(kind string) int
	// TenantObjects calls fn with each resource of kind that belongs to
	// tenant (a Tenant belongs to itself; an object of a kind that lives
	// in tenants to the tenant its schema.LabelTenant label names), in
	// key order, until fn returns an error, which it returns. As with
	// Scan, the Object is valid only until fn returns.
	TenantObjects(tenant, kind string, fn func(Resource) error) error
	// ResourceVersion returns the store's latest revision: the one the
	// last change received, or 0 before the first.
	ResourceVersion() uint64

	// Put stores data as the internal record kind/key, which the API
	// never serves, and returns its revision. It refuses the kinds of
	// schema.Kinds, which go through PutObject. Storing the same bytes
	// again changes nothing: Put returns the stored revision and records
	// no change.
	Put(kind, key string, data []byte) (uint64, error)
	// PutObject stores obj, an object of an API kind, as kind/key, and
	// stamps its metadata as StampObject says. It reports whether
	// anything changed; when nothing did, obj's metadata holds the stored
	// values.
	PutObject(kind, key string, obj schema.Object) (changed bool, err error)
	// Delete removes kind/key and returns the revision of the delete, or
	// an error wrapping ErrNotFound. Its change carries the resource as
	// it was (see DeletedObject).
	Delete(kind, key string) (uint64, error)

	// Events calls fn with each logged change whose revision is above
	// after, oldest first, until fn returns an error, which it returns.
	// Changes of every kind are logged. A change's Object is valid only
	// until fn returns. When the log no longer holds every change after
	// after, it returns an error wrapping ErrGone and calls fn for none.
	Events(after uint64, fn func(Change) error) error
	// EventsFrom returns the revision above which the event log holds
	// every change: Events(after) is complete for any after at or above
	// it.
	EventsFrom() uint64

	// State returns the current bytes of the TF state name and their
	// meta, or an error wrapping ErrNoState.
	State(name string) ([]byte, *StateMeta, error)
	// StateVersion returns kept version v of the state name, its meta
	// and whether it is the current one, or an error wrapping ErrNoState.
	StateVersion(name string, v uint64) ([]byte, *StateMeta, bool, error)
	// StateVersions lists the kept versions of the state name, newest
	// first; none when nothing was ever stored under name.
	StateVersions(name string) ([]StateVersion, error)
	// PutState stores data as the new current version of the state name
	// with its meta, keeping at most keep earlier versions, and returns
	// the new version's number: one more than the state's last. It
	// checks nothing: WriteState is the rule of a new version.
	PutState(name string, data []byte, meta StateMeta, keep int) (uint64, error)
	// DeleteState makes the state name have no current version; its
	// versions stay until newer ones push them out. It returns an error
	// wrapping ErrNoState when there is no current version.
	DeleteState(name string) error

	// Lock returns the lock held on the state name, or nil.
	Lock(name string) (*Lock, error)
	// PutLock records l as the lock held on the state name, replacing
	// any. LockState is the rule of taking one.
	PutLock(name string, l Lock) error
	// DeleteLock removes the lock on the state name, if any.
	DeleteLock(name string) error
	// Locks lists the locks held on states, by state name.
	Locks() ([]HeldLock, error)

	// PutSeries stores data under key in the series area: bytes a
	// package keeps for itself (package history's chunks) that take no
	// revision, record no change and never reach the event log, so that
	// frequent writes of them do not push API watches past the log's
	// horizon. An empty key is refused.
	PutSeries(key string, data []byte) error
	// Series returns the bytes stored under key in the series area, or
	// an error wrapping ErrNotFound.
	Series(key string) ([]byte, error)
	// ScanSeries calls fn with each key of the series area that starts
	// with prefix and its bytes, in key order, until fn returns an error,
	// which ScanSeries returns. data points into the transaction and is
	// valid only until fn returns; fn must not change the store.
	ScanSeries(prefix string, fn func(key string, data []byte) error) error
	// DeleteSeries removes key from the series area; a missing key is
	// no error.
	DeleteSeries(key string) error
}
