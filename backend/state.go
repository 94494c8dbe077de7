package backend

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/rezuscloud/rezuscloud/backend/api"
)

// How one TF state is laid out under bucketStates/NAME:
//
//	cur          8-byte number of the current version; absent after DELETE
//	meta/VER     JSON stateMeta of each kept version
//	data/VER/b   the bytes of each kept version
//
// VER is an 8-byte big-endian number from the state bucket's sequence.
// Each version's bytes sit alone in a bucket of their own, so a new version
// is written once and never rewritten, and dropping the oldest only frees
// its pages.
var (
	keyCurrent        = []byte("cur")
	keyBytes          = []byte("b")
	bucketMetaOfState = []byte("meta")
	bucketDataOfState = []byte("data")
)

// stateMeta is what the store records about each version of a state.
type stateMeta struct {
	Serial  *uint64     `json:"serial,omitempty"`
	Lineage string      `json:"lineage,omitempty"`
	Size    int64       `json:"size"`
	MD5     string      `json:"md5,omitempty"`
	Time    time.Time   `json:"time"`
	Token   string      `json:"token"`
	Lock    *lockRecord `json:"lock,omitempty"`
}

// lockRecord is a held lock: the client's LockInfo as sent, its ID, the
// token that took it and when.
type lockRecord struct {
	ID      string          `json:"id"`
	Token   string          `json:"token"`
	Created time.Time       `json:"created"`
	Info    json.RawMessage `json:"info"`
}

// lockInfo holds the LockInfo fields the server reads.
type lockInfo struct {
	ID        string `json:"ID"`
	Operation string `json:"Operation"`
	Who       string `json:"Who"`
}

func (l *lockRecord) view(staleAge time.Duration, now time.Time) *api.StateLock {
	var li lockInfo
	json.Unmarshal(l.Info, &li)
	return &api.StateLock{
		ID:        l.ID,
		Token:     l.Token,
		Who:       li.Who,
		Operation: li.Operation,
		Created:   l.Created,
		Stale:     staleAge > 0 && now.Sub(l.Created) > staleAge,
	}
}

// holderInfo returns the LockInfo JSON sent back with 423: the client's own
// LockInfo with the token's name added to Who, so that tofu, which prints
// Who, tells its user which token holds the lock.
func (l *lockRecord) holderInfo() []byte {
	var m map[string]any
	if err := json.Unmarshal(l.Info, &m); err != nil || m == nil {
		m = map[string]any{"ID": l.ID}
	}
	who, _ := m["Who"].(string)
	if who == "" {
		m["Who"] = "token " + l.Token
	} else {
		m["Who"] = fmt.Sprintf("%s (token %s)", who, l.Token)
	}
	if _, ok := m["Created"]; !ok {
		m["Created"] = l.Created
	}
	b, _ := json.Marshal(m)
	return b
}

// Errors of state operations. The HTTP handler maps them to status codes.
var (
	errNoState = errors.New("no state")
)

// lockedError says the state is locked by someone other than the caller.
type lockedError struct {
	name string
	lock *lockRecord
	why  string
}

func (e *lockedError) Error() string {
	return fmt.Sprintf("state %q is locked by token %q (lock ID %s): %s", e.name, e.lock.Token, e.lock.ID, e.why)
}

func versionKey(v uint64) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, v)
	return k
}

// stateBucket returns the state's bucket, or nil when nothing was ever
// stored under name.
func (tx *Tx) stateBucket(name string) *bolt.Bucket {
	return tx.tx.Bucket(bucketStates).Bucket([]byte(name))
}

// CurrentState returns a copy of the current bytes of the TF state name,
// or nil when there is none. In a read transaction the pages of the
// store's mapping that held them are released once copied: a state is
// large, and read whole and seldom (a tenant's secrets bundle comes from
// it once after a restart), so they would only stay in the server's
// resident memory.
func (tx *Tx) CurrentState(name string) []byte {
	b := tx.stateBucket(name)
	if b == nil {
		return nil
	}
	cur := b.Get(keyCurrent)
	if cur == nil {
		return nil
	}
	v := versionBytes(b, cur)
	out := bytes.Clone(v)
	tx.releaseRead(v)
	return out
}

func versionBytes(b *bolt.Bucket, key []byte) []byte {
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

// stateVersion returns a copy of version v of the state, its meta, and
// whether it is the current one; errNoState when it is not kept.
func (tx *Tx) stateVersion(name string, v uint64) ([]byte, *stateMeta, bool, error) {
	b := tx.stateBucket(name)
	if b == nil {
		return nil, nil, false, errNoState
	}
	key := versionKey(v)
	data := versionBytes(b, key)
	if data == nil {
		return nil, nil, false, errNoState
	}
	meta, err := readMeta(b, key)
	if err != nil {
		return nil, nil, false, err
	}
	return bytes.Clone(data), meta, bytes.Equal(b.Get(keyCurrent), key), nil
}

// currentState returns a copy of the current bytes and their meta, or
// errNoState.
func (tx *Tx) currentState(name string) ([]byte, *stateMeta, error) {
	b := tx.stateBucket(name)
	if b == nil {
		return nil, nil, errNoState
	}
	cur := b.Get(keyCurrent)
	if cur == nil {
		return nil, nil, errNoState
	}
	data := versionBytes(b, cur)
	if data == nil {
		return nil, nil, fmt.Errorf("state %q: current version %d has no bytes", name, binary.BigEndian.Uint64(cur))
	}
	meta, err := readMeta(b, cur)
	if err != nil {
		return nil, nil, err
	}
	return bytes.Clone(data), meta, nil
}

func readMeta(b *bolt.Bucket, key []byte) (*stateMeta, error) {
	m := b.Bucket(bucketMetaOfState)
	if m == nil {
		return nil, errors.New("state bucket has no meta")
	}
	raw := m.Get(key)
	if raw == nil {
		return nil, fmt.Errorf("version %d has no meta", binary.BigEndian.Uint64(key))
	}
	var meta stateMeta
	if err := json.Unmarshal(raw, &meta); err != nil {
		return nil, fmt.Errorf("version %d meta: %w", binary.BigEndian.Uint64(key), err)
	}
	return &meta, nil
}

// lock returns the lock on name, or nil.
func (tx *Tx) lock(name string) (*lockRecord, error) {
	raw := tx.tx.Bucket(bucketLocks).Get([]byte(name))
	if raw == nil {
		return nil, nil
	}
	var l lockRecord
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, fmt.Errorf("lock on %q: %w", name, err)
	}
	return &l, nil
}

func (tx *Tx) putLock(name string, l *lockRecord) error {
	raw, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return tx.tx.Bucket(bucketLocks).Put([]byte(name), raw)
}

func (tx *Tx) deleteLock(name string) error {
	return tx.tx.Bucket(bucketLocks).Delete([]byte(name))
}

// putState stores data as the new current version of name, keeping at
// most keep earlier versions, and returns the new version's number.
func (tx *Tx) putState(name string, data []byte, meta *stateMeta, keep int) (uint64, error) {
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
		if err := datas.DeleteBucket(first); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
			return 0, err
		}
	}
	return v, nil
}

// deleteState makes name have no current state. Its versions stay in the
// history until newer ones push them out.
func (tx *Tx) deleteState(name string) error {
	b := tx.stateBucket(name)
	if b == nil || b.Get(keyCurrent) == nil {
		return errNoState
	}
	return b.Delete(keyCurrent)
}

// stateVersions lists the kept versions of name, newest first.
func (tx *Tx) stateVersions(name string) ([]api.StateVersion, error) {
	b := tx.stateBucket(name)
	if b == nil {
		return nil, nil
	}
	metas := b.Bucket(bucketMetaOfState)
	if metas == nil {
		return nil, nil
	}
	cur := b.Get(keyCurrent)
	var out []api.StateVersion
	c := metas.Cursor()
	for k, raw := c.Last(); k != nil; k, raw = c.Prev() {
		var m stateMeta
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("state %q version %d meta: %w", name, binary.BigEndian.Uint64(k), err)
		}
		sv := api.StateVersion{
			Version: binary.BigEndian.Uint64(k),
			Current: bytes.Equal(k, cur),
			Serial:  m.Serial,
			Lineage: m.Lineage,
			Size:    m.Size,
			MD5:     m.MD5,
			Time:    m.Time,
			Token:   m.Token,
		}
		if m.Lock != nil {
			sv.LockHolder = m.Lock.view(0, m.Time)
		}
		out = append(out, sv)
	}
	return out, nil
}

// currentMeta returns the current version's key and meta, or errNoState.
func (tx *Tx) currentMeta(name string) ([]byte, *stateMeta, error) {
	b := tx.stateBucket(name)
	if b == nil {
		return nil, nil, errNoState
	}
	cur := b.Get(keyCurrent)
	if cur == nil {
		return nil, nil, errNoState
	}
	meta, err := readMeta(b, cur)
	return cur, meta, err
}

// guardMeta returns the meta the lineage and serial guards of a POST
// compare with: the current version's, or, when the current bytes have no
// lineage (not a TF state, stored by a server that did not check), the
// newest earlier version's that has one. It returns errNoState when there
// is no current version, and a nil meta when no kept version up to the
// current one has a lineage: the lineage is unknown.
func (tx *Tx) guardMeta(name string) (*stateMeta, error) {
	cur, meta, err := tx.currentMeta(name)
	if err != nil || meta.Lineage != "" {
		return meta, err
	}
	metas := tx.stateBucket(name).Bucket(bucketMetaOfState)
	c := metas.Cursor()
	for k, raw := c.Seek(cur); k != nil; k, raw = c.Prev() {
		var m stateMeta
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("state %q version %d meta: %w", name, binary.BigEndian.Uint64(k), err)
		}
		if m.Lineage != "" {
			return &m, nil
		}
	}
	return nil, nil
}
