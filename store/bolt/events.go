package bolt

import (
	"encoding/binary"
	"fmt"

	bbolt "go.etcd.io/bbolt"

	"github.com/rezuscloud/rezuscloud/store"
)

// The event log. Update appends every change it commits to bucketEvents in
// the same transaction and trims the log to the store's EventHistory, so
// the log always holds every change with a resourceVersion above
// keyEventsFrom. An event hub reloads it when the server starts, which lets
// a watch resume from a resourceVersion given out before a restart.
//
// A logged change is: one byte of type ('A', 'M' or 'D'), the kind and the
// name each as a uvarint length and bytes, then the object's JSON.

// openEventLog creates the event log of a new or older store file. When
// resources changed without being logged (a file written before the log
// existed), the log starts over at the current resourceVersion.
func openEventLog(tx *bbolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	events, err := tx.CreateBucketIfNotExists(bucketEvents)
	if err != nil {
		return err
	}
	seq := meta.Sequence()
	from := uint64(0)
	if v := meta.Get(keyEventsFrom); len(v) == 8 {
		from = binary.BigEndian.Uint64(v)
	} else if v != nil || seq > 0 {
		from = seq
	}
	last := from
	if k, _ := events.Cursor().Last(); k != nil && binary.BigEndian.Uint64(k) > last {
		last = binary.BigEndian.Uint64(k)
	}
	if last < seq {
		// Changes between last and seq are missing: nobody can resume
		// from before seq.
		from = seq
	}
	if err := trimEvents(events, from); err != nil {
		return err
	}
	return meta.Put(keyEventsFrom, binary.BigEndian.AppendUint64(nil, from))
}

// logChanges appends the transaction's changes to the event log and trims
// it to history changes.
func (tx *Tx) logChanges(history int) error {
	if len(tx.changes) == 0 {
		return nil
	}
	events := tx.tx.Bucket(bucketEvents)
	for _, c := range tx.changes {
		// bbolt keeps the value until the commit: one buffer each.
		if err := events.Put(eventKey(c.Resource.ResourceVersion), encodeChange(c)); err != nil {
			return fmt.Errorf("log %s %q: %w", c.Resource.Kind, c.Resource.Name, err)
		}
	}
	seq := tx.ResourceVersion()
	if seq <= uint64(history) {
		return nil
	}
	from := seq - uint64(history)
	meta := tx.tx.Bucket(bucketMeta)
	if v := meta.Get(keyEventsFrom); len(v) == 8 && binary.BigEndian.Uint64(v) >= from {
		return nil
	}
	if err := trimEvents(events, from); err != nil {
		return err
	}
	return meta.Put(keyEventsFrom, binary.BigEndian.AppendUint64(nil, from))
}

// trimEvents deletes the logged changes up to and including from.
func trimEvents(events *bbolt.Bucket, from uint64) error {
	var old [][]byte
	c := events.Cursor()
	for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k) <= from; k, _ = c.Next() {
		old = append(old, k)
	}
	for _, k := range old {
		if err := events.Delete(k); err != nil {
			return fmt.Errorf("trim event log: %w", err)
		}
	}
	return nil
}

// EventsFrom returns the resourceVersion above which the event log holds
// every change: Events(after) is complete for any after at or above it.
func (tx *Tx) EventsFrom() uint64 {
	v := tx.tx.Bucket(bucketMeta).Get(keyEventsFrom)
	if len(v) != 8 {
		return tx.ResourceVersion()
	}
	return binary.BigEndian.Uint64(v)
}

// Events calls fn with each logged change whose resourceVersion is above
// after, oldest first, until fn returns an error. Changes of every kind are
// logged, internal ones included; a change's Object is valid only inside
// the transaction. An after below EventsFrom gives an error wrapping
// store.ErrGone.
func (tx *Tx) Events(after uint64, fn func(store.Change) error) error {
	if from := tx.EventsFrom(); after < from {
		return fmt.Errorf("events after %d: the log starts after %d: %w", after, from, store.ErrGone)
	}
	c := tx.tx.Bucket(bucketEvents).Cursor()
	for k, v := c.Seek(eventKey(after + 1)); k != nil; k, v = c.Next() {
		ch, err := decodeChange(binary.BigEndian.Uint64(k), v)
		if err != nil {
			return err
		}
		if err := fn(ch); err != nil {
			return err
		}
	}
	return nil
}

func eventKey(rv uint64) []byte { return binary.BigEndian.AppendUint64(nil, rv) }

var changeTypeCodes = map[store.EventType]byte{store.Added: 'A', store.Modified: 'M', store.Deleted: 'D'}

func encodeChange(c store.Change) []byte {
	r := c.Resource
	buf := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(r.Kind)+len(r.Name)+len(r.Object))
	buf = append(buf, changeTypeCodes[c.Type])
	buf = binary.AppendUvarint(buf, uint64(len(c.Resource.Kind)))
	buf = append(buf, c.Resource.Kind...)
	buf = binary.AppendUvarint(buf, uint64(len(c.Resource.Name)))
	buf = append(buf, c.Resource.Name...)
	return append(buf, c.Resource.Object...)
}

func decodeChange(rv uint64, v []byte) (store.Change, error) {
	bad := func(what string) (store.Change, error) {
		return store.Change{}, fmt.Errorf("event log entry %d: %s", rv, what)
	}
	if len(v) == 0 {
		return bad("empty")
	}
	var c store.Change
	switch v[0] {
	case 'A':
		c.Type = store.Added
	case 'M':
		c.Type = store.Modified
	case 'D':
		c.Type = store.Deleted
	default:
		return bad(fmt.Sprintf("unknown change type %q", v[0]))
	}
	rest := v[1:]
	field := func() (string, bool) {
		n, w := binary.Uvarint(rest)
		if w <= 0 || n > uint64(len(rest)-w) {
			return "", false
		}
		s := string(rest[w : w+int(n)])
		rest = rest[w+int(n):]
		return s, true
	}
	var ok bool
	if c.Resource.Kind, ok = field(); !ok {
		return bad("truncated kind")
	}
	if c.Resource.Name, ok = field(); !ok {
		return bad("truncated name")
	}
	c.Resource.ResourceVersion = rv
	c.Resource.Object = rest
	if c.Resource.Kind == "" || c.Resource.Name == "" {
		return bad("no kind or name")
	}
	return c, nil
}
