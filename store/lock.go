package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Lock is a lock held on a TF state: its ID, the token that took it and
// when, and the client's LockInfo as it was sent. The JSON names are
// those the bbolt engine stores.
type Lock struct {
	ID      string          `json:"id"`
	Token   string          `json:"token"`
	Created time.Time       `json:"created"`
	Info    json.RawMessage `json:"info"`
}

// LockInfo holds the fields of a client's LockInfo (tofu's lock request)
// that the server reads.
type LockInfo struct {
	ID        string `json:"ID"`
	Operation string `json:"Operation"`
	Who       string `json:"Who"`
}

// Holder returns what the lock's LockInfo says of its holder: empty
// fields where it says nothing.
func (l *Lock) Holder() LockInfo {
	var li LockInfo
	_ = json.Unmarshal(l.Info, &li)
	return li
}

// HeldLock is a lock held on a TF state, named by the state.
type HeldLock struct {
	State string
	Lock
}

// ErrNotLocked says an unlock found no lock to release.
var ErrNotLocked = errors.New("state is not locked")

// LockedError says a state is locked by someone other than the caller;
// Lock is the holder's lock.
type LockedError struct {
	Name string
	Lock *Lock
	// Why says what the caller did that the lock forbids.
	Why string
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("state %q is locked by token %q (lock ID %s): %s", e.Name, e.Lock.Token, e.Lock.ID, e.Why)
}

// ForceUnlockError refuses a force-unlock to a caller that may not force
// one: an unlock that names no lock ID (NoID), or that releases another
// token's lock.
type ForceUnlockError struct {
	Name string
	Lock *Lock
	NoID bool
}

func (e *ForceUnlockError) Error() string {
	what := "releasing another token's lock"
	if e.NoID {
		what = "an unlock without the lock ID"
	}
	return fmt.Sprintf("state %q is locked by token %q (lock ID %s); %s is a force-unlock", e.Name, e.Lock.Token, e.Lock.ID, what)
}

// LockState takes l on the state name. When a lock is held it returns a
// *LockedError with the holder, unless the held lock is l itself (the
// same ID and token), which is taken already.
func LockState(tx Tx, name string, l Lock) error {
	held, err := tx.Lock(name)
	if err != nil {
		return err
	}
	if held != nil {
		if held.ID == l.ID && held.Token == l.Token {
			return nil
		}
		return &LockedError{Name: name, Lock: held, Why: "already locked"}
	}
	return tx.PutLock(name, l)
}

// UnlockState releases the lock on the state name for token and returns
// it. id is the lock ID the caller names, "" for none. It returns
// ErrNotLocked when no lock is held and a *LockedError when id names
// another lock. Releasing without an ID, or another token's lock, is a
// force-unlock, which needs force (a *ForceUnlockError otherwise).
func UnlockState(tx Tx, name, id, token string, force bool) (*Lock, error) {
	l, err := tx.Lock(name)
	if err != nil {
		return nil, err
	}
	switch {
	case l == nil:
		return nil, fmt.Errorf("state %q: %w", name, ErrNotLocked)
	case id != "" && id != l.ID:
		return nil, &LockedError{Name: name, Lock: l, Why: fmt.Sprintf("the unlock names lock ID %s", id)}
	case id == "" && !force:
		return nil, &ForceUnlockError{Name: name, Lock: l, NoID: true}
	case l.Token != token && !force:
		return nil, &ForceUnlockError{Name: name, Lock: l}
	}
	return l, tx.DeleteLock(name)
}

// ReleaseLock removes the lock on the state name if it is still the lock
// id held by token, and reports whether it did. It is how the server
// releases a lock that a run of its own took and could not release.
func ReleaseLock(tx Tx, name, id, token string) (bool, error) {
	l, err := tx.Lock(name)
	if err != nil || l == nil || l.ID != id || l.Token != token {
		return false, err
	}
	if err := tx.DeleteLock(name); err != nil {
		return false, fmt.Errorf("release lock on %q: %w", name, err)
	}
	return true, nil
}
