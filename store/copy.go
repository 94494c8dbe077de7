package store

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// copyBatch is how many records one transaction of a copy writes into its
// target: few enough for etcd's limit on the operations of a transaction.
const copyBatch = 16

// Inventory is a transaction that says what its store holds, which Tx
// lists only by kind and by state name. The bbolt engine's Tx is one.
type Inventory interface {
	Kinds() ([]string, error)
	StateNames() ([]string, error)
}

// CopyClock is the target store's clock during a copy: it says the time
// it was set to, so that PutObject stamps each object's updatedAt as the
// source has it.
type CopyClock struct {
	mu sync.Mutex
	t  time.Time
}

// Now returns the time the clock was set to.
func (c *CopyClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *CopyClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// Copied counts what a copy wrote.
type Copied struct {
	Objects, Records, States, Versions, Locks, Series int
}

func (c Copied) String() string {
	return fmt.Sprintf("%s, %s, %s with %s, %s, %s",
		count(c.Objects, "API object"), count(c.Records, "internal record"), count(c.States, "TF state"),
		count(c.Versions, "version"), count(c.Locks, "state lock"), count(c.Series, "series key"))
}

// count is "1 thing" or "n things".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// Copy copies everything from holds into to, which must be empty,
// through the store interface: the resources of every kind in the order of
// their revisions, TF states with every kept version (under the same
// numbers) and its meta, state locks and the series area. clock must be
// to's clock (see CopyClock). What the interface does not let a copy
// keep: resources take new revisions, 1 and up in the same order, and
// the target's event log starts with the copy's additions instead of the
// source's history.
//
// from must not change while it copies (a stopped server's store). A copy
// that breaks off leaves to holding part of from, and says so.
func Copy(from, to Store, clock *CopyClock) (Copied, error) {
	var n Copied
	err := from.View(func(src Tx) error {
		inv, ok := src.(Inventory)
		if !ok {
			return errors.New("the source store cannot list what it holds: copy from a bbolt store")
		}
		kinds, err := inv.Kinds()
		if err != nil {
			return err
		}
		states, err := inv.StateNames()
		if err != nil {
			return err
		}
		if err := checkEmpty(to, states); err != nil {
			return err
		}
		for _, step := range []func() error{
			func() error { return copyResources(src, to, kinds, clock, &n) },
			func() error { return copyStates(src, to, states, &n) },
			func() error { return copyLocks(src, to, &n) },
			func() error { return copySeries(src, to, &n) },
		} {
			if err := step(); err != nil {
				return fmt.Errorf("the copy broke off after %s, which the target now holds: empty it before copying again: %w", n, err)
			}
		}
		return nil
	})
	return n, err
}

// checkEmpty refuses a target that holds anything: a resource, a lock, a
// series entry, a state of one of the names states, or, when it says what
// it holds, any kind or state at all.
func checkEmpty(to Store, states []string) error {
	return to.View(func(tx Tx) error {
		var held []string
		if rv := tx.ResourceVersion(); rv > 0 {
			held = append(held, fmt.Sprintf("resources up to revision %d", rv))
		}
		if locks, err := tx.Locks(); err != nil || len(locks) > 0 {
			held = append(held, count(len(locks), "state lock"))
		}
		if err := tx.ScanSeries("", func(string, []byte) error { return errStop }); errors.Is(err, errStop) {
			held = append(held, "series entries")
		}
		if inv, ok := tx.(Inventory); ok {
			names, err := inv.StateNames()
			if err != nil {
				return err
			}
			states = append(states, names...)
		}
		for _, name := range states {
			if vs, err := tx.StateVersions(name); err != nil || len(vs) > 0 {
				held = append(held, fmt.Sprintf("TF state %q", name))
				break
			}
		}
		if len(held) > 0 {
			return fmt.Errorf("the target store is not empty (it holds %s): copy into an empty one, such as a new etcd prefix", strings.Join(held, ", "))
		}
		return nil
	})
}

// errStop ends a scan early.
var errStop = errors.New("stop")

// resourceRef names one resource of the source and its revision.
type resourceRef struct {
	kind, key string
	rv        uint64
}

// copyResources copies the resources of kinds, oldest revision first, so
// that the target's revisions keep their order.
func copyResources(src Tx, to Store, kinds []string, clock *CopyClock, n *Copied) error {
	var refs []resourceRef
	for _, kind := range kinds {
		err := src.Scan(kind, "", func(r Resource) error {
			refs = append(refs, resourceRef{kind, r.Name, r.ResourceVersion})
			return nil
		})
		if err != nil {
			return err
		}
	}
	slices.SortFunc(refs, func(a, b resourceRef) int { return cmp.Compare(a.rv, b.rv) })
	for batch := range slices.Chunk(refs, copyBatch) {
		var added Copied
		err := to.Update(func(tx Tx) error {
			added = Copied{}
			for _, ref := range batch {
				if err := copyResource(src, tx, ref, clock, &added); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		n.Objects, n.Records = n.Objects+added.Objects, n.Records+added.Records
	}
	return nil
}

// copyResource copies one resource: an API object through PutObject, with
// its uid, createdAt and updatedAt, an internal record through Put.
func copyResource(src, tx Tx, ref resourceRef, clock *CopyClock, n *Copied) error {
	r, err := src.Get(ref.kind, ref.key)
	if err != nil {
		return err
	}
	k, ok := schema.LookupKind(ref.kind)
	if !ok {
		n.Records++
		_, err := tx.Put(ref.kind, ref.key, r.Object)
		return err
	}
	obj := k.New()
	if err := json.Unmarshal(r.Object, obj); err != nil {
		return fmt.Errorf("%s %q: %w", ref.kind, ref.key, err)
	}
	clock.Set(obj.Meta().UpdatedAt)
	n.Objects++
	_, err = tx.PutObject(ref.kind, ref.key, obj)
	return err
}

// copyStates copies every kept version of the states names, one version
// per transaction (a state may be large).
func copyStates(src Tx, to Store, names []string, n *Copied) error {
	for _, name := range names {
		versions, err := src.StateVersions(name)
		if err != nil || len(versions) == 0 {
			if err != nil {
				return err
			}
			continue
		}
		slices.Reverse(versions)
		if err := padVersions(to, name, versions[0].Version-1); err != nil {
			return err
		}
		for i, v := range versions {
			if err := copyVersion(src, to, name, v.Version, i); err != nil {
				return err
			}
			n.Versions++
		}
		if !versions[len(versions)-1].Current {
			if err := to.Update(func(tx Tx) error { return tx.DeleteState(name) }); err != nil {
				return fmt.Errorf("state %q: %w", name, err)
			}
		}
		n.States++
	}
	return nil
}

// padVersions stores count empty versions of the state name, each pushing
// out the one before, so that the next version stored gets the number
// count+1: the versions the source no longer keeps are not Copied, but
// their numbers stay taken.
func padVersions(to Store, name string, count uint64) error {
	for count > 0 {
		k := min(count, 8*copyBatch)
		count -= k
		err := to.Update(func(tx Tx) error {
			for range k {
				if _, err := tx.PutState(name, []byte{}, StateMeta{}, 0); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("state %q: %w", name, err)
		}
	}
	return nil
}

// copyVersion copies version v of the state name, the earlier ones
// copied before it, of which it keeps all (older) of them and no padding.
func copyVersion(src Tx, to Store, name string, v uint64, older int) error {
	data, meta, _, err := src.StateVersion(name, v)
	if err != nil {
		return err
	}
	return to.Update(func(tx Tx) error {
		got, err := tx.PutState(name, data, *meta, older)
		if err == nil && got != v {
			err = fmt.Errorf("stored as version %d", got)
		}
		if err != nil {
			return fmt.Errorf("state %q version %d: %w", name, v, err)
		}
		return nil
	})
}

// copyLocks copies the locks held on states, with their holders.
func copyLocks(src Tx, to Store, n *Copied) error {
	locks, err := src.Locks()
	if err != nil {
		return err
	}
	for batch := range slices.Chunk(locks, copyBatch) {
		err := to.Update(func(tx Tx) error {
			for _, l := range batch {
				if err := tx.PutLock(l.State, l.Lock); err != nil {
					return fmt.Errorf("lock on state %q: %w", l.State, err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		n.Locks += len(batch)
	}
	return nil
}

// copySeries copies the series area, in batches as it reads it.
func copySeries(src Tx, to Store, n *Copied) error {
	type entry struct {
		key  string
		data []byte
	}
	var batch []entry
	flush := func() error {
		err := to.Update(func(tx Tx) error {
			for _, e := range batch {
				if err := tx.PutSeries(e.key, e.data); err != nil {
					return fmt.Errorf("series %q: %w", e.key, err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		n.Series += len(batch)
		batch = batch[:0]
		return nil
	}
	err := src.ScanSeries("", func(key string, data []byte) error {
		batch = append(batch, entry{key, bytes.Clone(data)})
		if len(batch) < copyBatch {
			return nil
		}
		return flush()
	})
	if err == nil && len(batch) > 0 {
		err = flush()
	}
	return err
}
