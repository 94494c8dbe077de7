package backend

import (
	"fmt"

	"github.com/rezuscloud/rezuscloud/backend/api"
)

// HeldLock is a lock held on a TF state, named by the state.
type HeldLock struct {
	State string
	api.StateLock
}

// Locks lists the locks held on TF states, by state name.
func (tx *Tx) Locks() ([]HeldLock, error) {
	var out []HeldLock
	err := tx.tx.Bucket(bucketLocks).ForEach(func(k, _ []byte) error {
		l, err := tx.lock(string(k))
		if err != nil || l == nil {
			return err
		}
		out = append(out, HeldLock{State: string(k), StateLock: *l.view(0, l.Created)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list state locks: %w", err)
	}
	return out, nil
}

// ReleaseLock removes the lock on the state name if it is still the lock
// id held by token, and reports whether it did. It is how the server
// releases a lock that a run of its own took and could not release.
func (tx *Tx) ReleaseLock(name, id, token string) (bool, error) {
	l, err := tx.lock(name)
	if err != nil || l == nil || l.ID != id || l.Token != token {
		return false, err
	}
	if err := tx.deleteLock(name); err != nil {
		return false, fmt.Errorf("release lock on %q: %w", name, err)
	}
	return true, nil
}
