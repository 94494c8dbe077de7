package etcd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/rezuscloud/rezuscloud/store"
)

// stateRecord returns the record of the state name, or nil.
func (tx *Tx) stateRecord(name string) *stateRecord {
	it, ok := tx.img.states.Get(item[*stateRecord]{key: name})
	if !ok {
		return nil
	}
	return it.v
}

// stateBytes returns the bytes of a kept version: from the transaction
// when it stored them, else from etcd as of the transaction's image.
func (tx *Tx) stateBytes(name string, v *stateVersion) ([]byte, error) {
	if data, ok := tx.blobs[v.Data.ID]; ok {
		return bytes.Clone(data), nil
	}
	data, err := tx.s.loadBlob(v.Data, tx.img.etcdRev)
	if err != nil {
		return nil, fmt.Errorf("state %q version %d: %w", name, v.Version, err)
	}
	return data, nil
}

// State returns the current bytes of the TF state name and their meta, or
// an error wrapping store.ErrNoState.
func (tx *Tx) State(name string) ([]byte, *store.StateMeta, error) {
	rec := tx.stateRecord(name)
	if rec == nil || rec.Current == 0 {
		return nil, nil, fmt.Errorf("state %q: %w", name, store.ErrNoState)
	}
	v := rec.version(rec.Current)
	if v == nil {
		return nil, nil, fmt.Errorf("state %q: current version %d is not kept", name, rec.Current)
	}
	data, err := tx.stateBytes(name, v)
	if err != nil {
		return nil, nil, err
	}
	meta := v.Meta
	return data, &meta, nil
}

// StateVersion returns kept version v of the state name, its meta and
// whether it is the current one, or an error wrapping store.ErrNoState.
func (tx *Tx) StateVersion(name string, v uint64) ([]byte, *store.StateMeta, bool, error) {
	rec := tx.stateRecord(name)
	var sv *stateVersion
	if rec != nil {
		sv = rec.version(v)
	}
	if sv == nil {
		return nil, nil, false, fmt.Errorf("state %q version %d: %w", name, v, store.ErrNoState)
	}
	data, err := tx.stateBytes(name, sv)
	if err != nil {
		return nil, nil, false, err
	}
	meta := sv.Meta
	return data, &meta, rec.Current == v, nil
}

// StateVersions lists the kept versions of the state name, newest first.
func (tx *Tx) StateVersions(name string) ([]store.StateVersion, error) {
	rec := tx.stateRecord(name)
	if rec == nil {
		return nil, nil
	}
	var out []store.StateVersion
	for _, v := range slices.Backward(rec.Versions) {
		out = append(out, store.StateVersion{Version: v.Version, Current: v.Version == rec.Current, StateMeta: v.Meta})
	}
	return out, nil
}

// PutState stores data as the new current version of the state name,
// keeping at most keep earlier versions, and returns its number. The
// bytes go to a blob of their own; the caller must not change data
// before the Update returns.
func (tx *Tx) PutState(name string, data []byte, meta store.StateMeta, keep int) (uint64, error) {
	if err := tx.writable(); err != nil {
		return 0, err
	}
	if name == "" {
		return 0, errors.New("put state: no name")
	}
	rec := &stateRecord{}
	if old := tx.stateRecord(name); old != nil {
		*rec = *old
		rec.Versions = slices.Clone(old.Versions)
	}
	rec.Last++
	ref := newBlobRef(data)
	tx.blobs[ref.ID] = data
	rec.Versions = append(rec.Versions, stateVersion{Version: rec.Last, Meta: meta, Data: ref})
	rec.Current = rec.Last
	// Versions are numbered without gaps and dropped oldest first.
	for len(rec.Versions) > 0 && rec.Last-rec.Versions[0].Version > uint64(max(keep, 0)) {
		rec.Versions = rec.Versions[1:]
	}
	tx.setState(name, rec)
	return rec.Last, nil
}

// DeleteState makes the state name have no current version; its versions
// stay until newer ones push them out.
func (tx *Tx) DeleteState(name string) error {
	if err := tx.writable(); err != nil {
		return err
	}
	old := tx.stateRecord(name)
	if old == nil || old.Current == 0 {
		return fmt.Errorf("state %q: %w", name, store.ErrNoState)
	}
	rec := *old
	rec.Current = 0
	tx.setState(name, &rec)
	return nil
}

func (tx *Tx) setState(name string, rec *stateRecord) {
	tx.img.states.ReplaceOrInsert(item[*stateRecord]{key: name, v: rec})
	tx.dirty[stateDir+name] = true
}

// Lock returns the lock held on the state name, or nil.
func (tx *Tx) Lock(name string) (*store.Lock, error) {
	it, ok := tx.img.locks.Get(item[heldLock]{key: name})
	if tx.readLocks != nil && !tx.dirty[lockDir+name] {
		if _, seen := tx.readLocks[name]; !seen {
			tx.readLocks[name] = it.v.mod
		}
	}
	if !ok {
		return nil, nil
	}
	var l store.Lock
	if err := json.Unmarshal(it.v.raw, &l); err != nil {
		return nil, fmt.Errorf("lock on %q: %w", name, err)
	}
	return &l, nil
}

// PutLock records l as the lock held on the state name, replacing any.
// The lock is bound to the store's lock lease (see SetLockLease), so that
// it goes when its holder's lease ends.
func (tx *Tx) PutLock(name string, l store.Lock) error {
	if err := tx.writable(); err != nil {
		return err
	}
	if name == "" {
		return errors.New("put lock: no state name")
	}
	raw, err := json.Marshal(l)
	if err != nil {
		return err
	}
	tx.img.locks.ReplaceOrInsert(item[heldLock]{key: name, v: heldLock{raw: raw}})
	tx.dirty[lockDir+name] = true
	return nil
}

// DeleteLock removes the lock on the state name, if any.
func (tx *Tx) DeleteLock(name string) error {
	if err := tx.writable(); err != nil {
		return err
	}
	if _, ok := tx.img.locks.Delete(item[heldLock]{key: name}); ok {
		tx.dirty[lockDir+name] = true
	}
	return nil
}

// Locks lists the locks held on states, by state name.
func (tx *Tx) Locks() ([]store.HeldLock, error) {
	var out []store.HeldLock
	err := scan(tx.img.locks, "", func(it item[heldLock]) error {
		l, err := tx.Lock(it.key)
		if err != nil || l == nil {
			return err
		}
		out = append(out, store.HeldLock{State: it.key, Lock: *l})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list state locks: %w", err)
	}
	return out, nil
}

// PutSeries stores data under key in the series area.
func (tx *Tx) PutSeries(key string, data []byte) error {
	if err := tx.writable(); err != nil {
		return err
	}
	if key == "" {
		return errors.New("put series: empty key")
	}
	tx.img.series.ReplaceOrInsert(item[tagged]{key: key, v: tagged{data: bytes.Clone(data)}})
	tx.dirty[seriesDir+key] = true
	return nil
}

// Series returns a copy of the bytes under key in the series area, or an
// error wrapping store.ErrNotFound.
func (tx *Tx) Series(key string) ([]byte, error) {
	it, ok := tx.img.series.Get(item[tagged]{key: key})
	if !ok {
		return nil, fmt.Errorf("series %q: %w", key, store.ErrNotFound)
	}
	return bytes.Clone(it.v.data), nil
}

// ScanSeries calls fn with each key of the series area under prefix and
// its bytes, in key order, until fn returns an error, which it returns.
func (tx *Tx) ScanSeries(prefix string, fn func(key string, data []byte) error) error {
	return scan(tx.img.series, prefix, func(it item[tagged]) error { return fn(it.key, it.v.data) })
}

// DeleteSeries removes key from the series area.
func (tx *Tx) DeleteSeries(key string) error {
	if err := tx.writable(); err != nil {
		return err
	}
	if _, ok := tx.img.series.Delete(item[tagged]{key: key}); ok {
		tx.dirty[seriesDir+key] = true
	}
	return nil
}
