package store

import (
	"errors"
	"fmt"
	"time"
)

// ErrNoState says a TF state has no current version, or not the version
// asked for.
var ErrNoState = errors.New("no state")

// StateMeta is what the store records about each version of a TF state.
// The JSON names are those the bbolt engine stores.
type StateMeta struct {
	// Serial and Lineage are the state's, as ParseState read them; a
	// version stored without checks (by an older server) may have none.
	Serial  *uint64 `json:"serial,omitempty"`
	Lineage string  `json:"lineage,omitempty"`
	// Size is the length of the state's bytes, MD5 their Content-MD5 as
	// the writer sent it.
	Size int64  `json:"size"`
	MD5  string `json:"md5,omitempty"`
	// Time is when the version was stored, Token who stored it.
	Time  time.Time `json:"time"`
	Token string    `json:"token"`
	// Lock is the lock the writer held, if any.
	Lock *Lock `json:"lock,omitempty"`
}

// StateVersion is one kept version of a TF state.
type StateVersion struct {
	// Version numbers the state's versions from 1, without gaps.
	Version uint64
	// Current says it is the state's current version.
	Current bool
	StateMeta
}

// CurrentState returns the current bytes of the TF state name, or nil
// when it has none or they cannot be read.
func CurrentState(tx Tx, name string) []byte {
	b, _, err := tx.State(name)
	if err != nil {
		return nil
	}
	return b
}

// StateWrite is a new version of a TF state and who writes it.
type StateWrite struct {
	// Data is the state, Serial and Lineage what ParseState read of it,
	// MD5 its Content-MD5 as the writer sent it ("" when none).
	Data    []byte
	Serial  uint64
	Lineage string
	MD5     string
	// Token names the writer; Admin says it may overwrite what others
	// may not (another token's lock held under the ID it names, a state
	// of unknown lineage).
	Token string
	Admin bool
	// LockID is the lock ID the writer names, "" for none. A locked
	// state takes a write only under its lock's ID.
	LockID string
	// Time is when the version is stored.
	Time time.Time
	// Keep is how many earlier versions to keep.
	Keep int
}

// GuardReason says why a state write was refused.
type GuardReason int

// The reasons of a GuardError.
const (
	// LockReleased: the write names a lock ID, but the state is not
	// locked: the lock was released (force-unlocked) while the writer
	// ran.
	LockReleased GuardReason = iota + 1
	// UnknownLineage: the current version is not a TF state (stored by
	// an older server that did not check), so its lineage is unknown,
	// and the writer is not an admin.
	UnknownLineage
	// OtherLineage: the stored state has another lineage: the write is a
	// different state.
	OtherLineage
	// StaleSerial: the stored state has a higher serial: the writer is
	// stale.
	StaleSerial
)

// GuardError refuses a state write that would replace what it must not.
type GuardError struct {
	Name   string
	Reason GuardReason
	// Write is the refused write (without its data); Stored the meta
	// the guards compared with, nil for LockReleased and UnknownLineage.
	Write  StateWrite
	Stored *StateMeta
}

func (e *GuardError) Error() string {
	switch e.Reason {
	case LockReleased:
		return fmt.Sprintf("state %q is not locked, but the write carries lock ID %s", e.Name, e.Write.LockID)
	case UnknownLineage:
		return fmt.Sprintf("state %q holds bytes that are not a TF state, so its lineage is unknown", e.Name)
	case OtherLineage:
		return fmt.Sprintf("state %q has lineage %s, but the write has lineage %s", e.Name, e.Stored.Lineage, e.Write.Lineage)
	default:
		return fmt.Sprintf("state %q is at serial %d, but the write has serial %d", e.Name, *e.Stored.Serial, e.Write.Serial)
	}
}

// WriteState stores w as the new current version of the state name when
// the state's lock and guards allow it, and returns its version number:
//
//   - a locked state takes a write only under its lock's ID, and from the
//     token that took the lock or an admin (a *LockedError otherwise); a
//     write under a lock ID of a state that is not locked is refused
//     (LockReleased);
//   - the write must not replace a different state (another lineage) or
//     a newer one (a higher serial). The guards compare with the newest
//     kept version that has a lineage; when none has (the current bytes
//     are not a TF state, stored by an older server that did not check),
//     only an admin may overwrite them. Anyone may after a DeleteState.
//
// The version records the lock it was written under.
func WriteState(tx Tx, name string, w StateWrite) (uint64, error) {
	l, err := tx.Lock(name)
	if err != nil {
		return 0, err
	}
	switch {
	case l != nil && w.LockID != l.ID:
		why := "the write carries no lock ID"
		if w.LockID != "" {
			why = fmt.Sprintf("the write carries lock ID %s", w.LockID)
		}
		return 0, &LockedError{Name: name, Lock: l, Why: why}
	case l != nil && w.Token != l.Token && !w.Admin:
		return 0, &LockedError{Name: name, Lock: l, Why: fmt.Sprintf("the lock ID matches but token %q did not take the lock", w.Token)}
	case l == nil && w.LockID != "":
		return 0, &GuardError{Name: name, Reason: LockReleased, Write: withoutData(w)}
	}
	if err := checkGuards(tx, name, w); err != nil {
		return 0, err
	}
	serial := w.Serial
	meta := StateMeta{
		Serial: &serial, Lineage: w.Lineage, Size: int64(len(w.Data)), MD5: w.MD5,
		Time: w.Time, Token: w.Token, Lock: l,
	}
	return tx.PutState(name, w.Data, meta, w.Keep)
}

func withoutData(w StateWrite) StateWrite {
	w.Data = nil
	return w
}

// checkGuards refuses w when it would replace a different state or a
// newer one (see WriteState).
func checkGuards(tx Tx, name string, w StateWrite) error {
	ref, err := guardMeta(tx, name)
	switch {
	case errors.Is(err, ErrNoState):
		return nil
	case err != nil:
		return err
	case ref == nil && w.Admin:
		return nil
	case ref == nil:
		return &GuardError{Name: name, Reason: UnknownLineage, Write: withoutData(w)}
	case ref.Lineage != w.Lineage:
		return &GuardError{Name: name, Reason: OtherLineage, Write: withoutData(w), Stored: ref}
	case ref.Serial != nil && w.Serial < *ref.Serial:
		return &GuardError{Name: name, Reason: StaleSerial, Write: withoutData(w), Stored: ref}
	}
	return nil
}

// guardMeta returns the meta the guards compare with: the current
// version's, or, when the current bytes have no lineage, the newest
// earlier version's that has one. It returns ErrNoState when there is no
// current version, and a nil meta when no kept version up to the current
// one has a lineage: the lineage is unknown.
func guardMeta(tx Tx, name string) (*StateMeta, error) {
	versions, err := tx.StateVersions(name)
	if err != nil {
		return nil, err
	}
	cur := -1
	for i, v := range versions {
		if v.Current {
			cur = i
			break
		}
	}
	if cur < 0 {
		return nil, ErrNoState
	}
	for _, v := range versions[cur:] {
		if v.Lineage != "" {
			return &v.StateMeta, nil
		}
	}
	return nil, nil
}

// RemoveState makes the state name have no current version (see
// Tx.DeleteState), for token, which names lockID ("" for none). A locked
// state is removed only by the token that holds its lock, and under its
// ID when one is named; a *LockedError otherwise.
func RemoveState(tx Tx, name, token, lockID string) error {
	l, err := tx.Lock(name)
	if err != nil {
		return err
	}
	if l != nil && (l.Token != token || (lockID != "" && lockID != l.ID)) {
		return &LockedError{Name: name, Lock: l, Why: "only the token that holds the lock may delete the state"}
	}
	return tx.DeleteState(name)
}
