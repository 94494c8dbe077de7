package bolt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	bbolt "go.etcd.io/bbolt"
	bbolterrors "go.etcd.io/bbolt/errors"

	"github.com/rezuscloud/rezuscloud/store"
)

// How one TF state is laid out under bucketStates/NAME:
//
//	cur          8-byte number of the current version; absent after DELETE
//	meta/VER     JSON store.StateMeta of each kept version
//	data/VER/b   the bytes of each kept version
//
// VER is an 8-byte big-endian number from the state bucket's sequence.
// Each version's bytes sit alone in a bucket of their own, so a new version
// is written once and never rewritten, and dropping the oldest only frees
// its pages. A lock is the JSON store.Lock under bucketLocks/NAME.
var (
	keyCurrent        = []byte("cur")
	keyBytes          = []byte("b")
	bucketMetaOfState = []byte("meta")
	bucketDataOfState = []byte("data")
)

func versionKey(v uint64) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, v)
	return k
}

// stateBucket returns the state's bucket, or nil when nothing was ever
// stored under name.
func (tx *Tx) stateBucket(name string) *bbolt.Bucket {
	return tx.tx.Bucket(bucketStates).Bucket([]byte(name))
}

func versionBytes(b *bbolt.Bucket, key []byte) []byte {
	d := b.Bucket(bucketDataOfState)
	if d == nil {
		return nil
	}
	vb := d.Bucket(key)
	if vb == nil {
		return nil
	}
	return vb.Get(keyBytes)
}

func readMeta(b *bbolt.Bucket, key []byte) (*store.StateMeta, error) {
	m := b.Bucket(bucketMetaOfState)
	if m == nil {
		return nil, errors.New("state bucket has no meta")
	}
	raw := m.Get(key)
	if raw == nil {
		return nil, fmt.Errorf("version %d has no meta", binary.BigEndian.Uint64(key))
	}
	var meta store.StateMeta
	if err := json.Unmarshal(raw, &meta); err != nil {
		return nil, fmt.Errorf("version %d meta: %w", binary.BigEndian.Uint64(key), err)
	}
	return &meta, nil
}

// State returns a copy of the current bytes of the TF state name and their
// meta, or an error wrapping store.ErrNoState. In a read transaction the
// pages of the store's mapping that held the bytes are released once
// copied: a state is large, and read whole and seldom (a tenant's secrets
// bundle comes from it once after a restart), so they would only stay in
// the server's resident memory.
func (tx *Tx) State(name string) ([]byte, *store.StateMeta, error) {
	b := tx.stateBucket(name)
	if b == nil {
		return nil, nil, fmt.Errorf("state %q: %w", name, store.ErrNoState)
	}
	cur := b.Get(keyCurrent)
	if cur == nil {
		return nil, nil, fmt.Errorf("state %q: %w", name, store.ErrNoState)
	}
	data := versionBytes(b, cur)
	if data == nil {
		return nil, nil, fmt.Errorf("state %q: current version %d has no bytes", name, binary.BigEndian.Uint64(cur))
	}
	meta, err := readMeta(b, cur)
	if err != nil {
		return nil, nil, fmt.Errorf("state %q: %w", name, err)
	}
	out := bytes.Clone(data)
	tx.releaseRead(data)
	return out, meta, nil
}

// StateVersion returns a copy of version v of the state, its meta, and
// whether it is the current one; an error wrapping store.ErrNoState when
// it is not kept.
func (tx *Tx) StateVersion(name string, v uint64) ([]byte, *store.StateMeta, bool, error) {
	b := tx.stateBucket(name)
	if b == nil {
		return nil, nil, false, fmt.Errorf("state %q: %w", name, store.ErrNoState)
	}
	key := versionKey(v)
	data := versionBytes(b, key)
	if data == nil {
		return nil, nil, false, fmt.Errorf("state %q version %d: %w", name, v, store.ErrNoState)
	}
	meta, err := readMeta(b, key)
	if err != nil {
		return nil, nil, false, err
	}
	return bytes.Clone(data), meta, bytes.Equal(b.Get(keyCurrent), key), nil
}

// StateVersions lists the kept versions of name, newest first.
func (tx *Tx) StateVersions(name string) ([]store.StateVersion, error) {
	b := tx.stateBucket(name)
	if b == nil {
		return nil, nil
	}
	metas := b.Bucket(bucketMetaOfState)
	if metas == nil {
		return nil, nil
	}
	cur := b.Get(keyCurrent)
	var out []store.StateVersion
	c := metas.Cursor()
	for k, raw := c.Last(); k != nil; k, raw = c.Prev() {
		sv := store.StateVersion{Version: binary.BigEndian.Uint64(k), Current: bytes.Equal(k, cur)}
		if err := json.Unmarshal(raw, &sv.StateMeta); err != nil {
			return nil, fmt.Errorf("state %q version %d meta: %w", name, sv.Version, err)
		}
		out = append(out, sv)
	}
	return out, nil
}

// PutState stores data as the new current version of name, keeping at
// most keep earlier versions, and returns the new version's number.
func (tx *Tx) PutState(name string, data []byte, meta store.StateMeta, keep int) (uint64, error) {
	b, err := tx.tx.Bucket(bucketStates).CreateBucketIfNotExists([]byte(name))
	if err != nil {
		return 0, err
	}
	metas, err := b.CreateBucketIfNotExists(bucketMetaOfState)
	if err != nil {
		return 0, err
	}
	datas, err := b.CreateBucketIfNotExists(bucketDataOfState)
	if err != nil {
		return 0, err
	}
	v, err := b.NextSequence()
	if err != nil {
		return 0, err
	}
	key := versionKey(v)
	vb, err := datas.CreateBucket(key)
	if err != nil {
		return 0, fmt.Errorf("version %d: %w", v, err)
	}
	if err := vb.Put(keyBytes, data); err != nil {
		return 0, fmt.Errorf("version %d: %w", v, err)
	}
	rawMeta, err := json.Marshal(meta)
	if err != nil {
		return 0, err
	}
	if err := metas.Put(key, rawMeta); err != nil {
		return 0, err
	}
	if err := b.Put(keyCurrent, key); err != nil {
		return 0, err
	}
	// Versions are numbered without gaps and dropped oldest first, so the
	// kept ones are the range from the first key to v.
	for {
		first, _ := metas.Cursor().First()
		if first == nil || v-binary.BigEndian.Uint64(first) <= uint64(keep) {
			break
		}
		if err := metas.Delete(first); err != nil {
			return 0, err
		}
		if err := datas.DeleteBucket(first); err != nil && !errors.Is(err, bbolterrors.ErrBucketNotFound) {
			return 0, err
		}
	}
	return v, nil
}

// DeleteState makes name have no current state. Its versions stay in the
// history until newer ones push them out.
func (tx *Tx) DeleteState(name string) error {
	b := tx.stateBucket(name)
	if b == nil || b.Get(keyCurrent) == nil {
		return fmt.Errorf("state %q: %w", name, store.ErrNoState)
	}
	return b.Delete(keyCurrent)
}

// Lock returns the lock on name, or nil.
func (tx *Tx) Lock(name string) (*store.Lock, error) {
	raw := tx.tx.Bucket(bucketLocks).Get([]byte(name))
	if raw == nil {
		return nil, nil
	}
	var l store.Lock
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, fmt.Errorf("lock on %q: %w", name, err)
	}
	return &l, nil
}

// PutLock records l as the lock on name.
func (tx *Tx) PutLock(name string, l store.Lock) error {
	raw, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return tx.tx.Bucket(bucketLocks).Put([]byte(name), raw)
}

// DeleteLock removes the lock on name.
func (tx *Tx) DeleteLock(name string) error {
	return tx.tx.Bucket(bucketLocks).Delete([]byte(name))
}

// Locks lists the locks held on TF states, by state name.
func (tx *Tx) Locks() ([]store.HeldLock, error) {
	var out []store.HeldLock
	err := tx.tx.Bucket(bucketLocks).ForEach(func(k, _ []byte) error {
		l, err := tx.Lock(string(k))
		if err != nil || l == nil {
			return err
		}
		out = append(out, store.HeldLock{State: string(k), Lock: *l})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list state locks: %w", err)
	}
	return out, nil
}
