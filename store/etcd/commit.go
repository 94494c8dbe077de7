package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rezuscloud/rezuscloud/store"
)

// conflictError says another commit came between a transaction's
// snapshot and its commit; rev is etcd's revision when it was refused.
type conflictError struct{ rev int64 }

func (e *conflictError) Error() string {
	return fmt.Sprintf("another commit came first (etcd revision %d)", e.rev)
}

// kvOp is one write of a commit: a put of value (bound to lease, when not
// 0) or a delete of key (of every key under it, with prefix). key is
// relative to the store's prefix.
type kvOp struct {
	key    string
	value  []byte
	del    bool
	prefix bool
	lease  clientv3.LeaseID
}

func (o kvOp) op(prefix string) clientv3.Op {
	switch {
	case o.del && o.prefix:
		return clientv3.OpDelete(prefix+o.key, clientv3.WithPrefix())
	case o.del:
		return clientv3.OpDelete(prefix + o.key)
	case o.lease != 0:
		return clientv3.OpPut(prefix+o.key, string(o.value), clientv3.WithLease(o.lease))
	}
	return clientv3.OpPut(prefix+o.key, string(o.value))
}

func opsSize(ops []kvOp) int {
	n := 0
	for _, o := range ops {
		n += len(o.key) + len(o.value)
	}
	return n
}

// txnPlan is what one commit writes.
type txnPlan struct {
	cmps []clientv3.Cmp
	// head are the head's and the log's writes; keys the writes of the
	// keys the transaction changed; optional the removals of what nothing
	// refers to any more, which go in while there is room (else a later
	// commit or the collection of blobs removes it).
	head, keys, optional []kvOp
	// tagged are the values that go inline or to a blob.
	tagged []taggedPut
	// blobs are the new blobs' bytes by ID; fresh those of tagged values.
	blobs map[string][]byte
	fresh []string
}

type taggedPut struct {
	key  string
	data []byte
	head bool
}

// commit writes tx to etcd in one transaction and returns its etcd
// revision; a *conflictError when another commit came first, an error
// wrapping store.ErrFenced when the fence is gone.
func (s *Store) commit(tx *Tx) (int64, error) {
	s.mu.Lock()
	f := fence{key: s.fenceKey, rev: s.fenceRev}
	lease := s.lease
	s.mu.Unlock()
	p, err := s.plan(tx, lease)
	if err != nil {
		return 0, err
	}
	defer func() {
		for _, id := range p.fresh {
			s.fresh.Delete(id)
		}
	}()
	if f.key != "" {
		p.cmps = append(p.cmps, f.cmp())
	}
	ops, ahead, pending, err := s.place(&p, f)
	if err != nil {
		s.dropBlobs(ahead)
		return 0, err
	}
	if len(p.cmps) > s.maxOps {
		s.dropBlobs(ahead)
		return 0, fmt.Errorf("commit: it read %d locks, etcd compares at most %d keys in one transaction (its --max-txn-ops)", len(p.cmps)-2, s.maxOps)
	}
	ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
	defer cancel()
	otherwise := []clientv3.Op{clientv3.OpGet(s.prefix + pendingKey)}
	if f.key != "" {
		otherwise = append(otherwise, clientv3.OpGet(f.key))
	}
	resp, err := s.cli.Txn(ctx).If(p.cmps...).Then(ops...).Else(otherwise...).Commit()
	if err != nil {
		s.dropBlobs(ahead)
		return 0, fmt.Errorf("commit: %w", err)
	}
	if resp.Succeeded {
		if pending != nil {
			s.finishPending(pending.value, resp.Header.Revision)
		}
		return resp.Header.Revision, nil
	}
	s.dropBlobs(ahead)
	if f.key != "" {
		kvs := resp.Responses[1].GetResponseRange().Kvs
		if len(kvs) == 0 || kvs[0].CreateRevision != f.rev {
			return 0, fmt.Errorf("commit: fence %s of revision %d: %w", f.key, f.rev, store.ErrFenced)
		}
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		// A large commit of another writer that stopped before it was
		// done: finish it first.
		s.finishPending(kvs[0].Value, kvs[0].CreateRevision)
	}
	return 0, &conflictError{rev: resp.Header.Revision}
}

// fence is the key whose creation revision every write compares.
type fence struct {
	key string
	rev int64
}

func (f fence) cmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(f.key), "=", f.rev)
}

// plan builds what tx writes: the head, the commit's log and every key it
// changed, conditional on the head, the locks it read and no large commit
// being unfinished.
func (s *Store) plan(tx *Tx, lease clientv3.LeaseID) (txnPlan, error) {
	base, img := tx.base, tx.img
	p := txnPlan{blobs: map[string][]byte{}}
	p.cmps = append(p.cmps,
		clientv3.Compare(clientv3.ModRevision(s.prefix+headKey), "=", base.headMod),
		clientv3.Compare(clientv3.CreateRevision(s.prefix+pendingKey), "=", 0))
	for _, name := range slices.Sorted(maps.Keys(tx.readLocks)) {
		p.cmps = append(p.cmps, clientv3.Compare(clientv3.ModRevision(s.prefix+lockDir+name), "=", tx.readLocks[name]))
	}
	h := img.head
	if h.Rev > uint64(s.history) {
		h.From = max(h.From, h.Rev-uint64(s.history))
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return p, err
	}
	p.head = append(p.head, kvOp{key: headKey, value: hb})
	if len(tx.changes) > 0 {
		first, err := store.DecodeValue(tx.changes[0].Kind, tx.changes[0].Name, tx.changes[0].Value)
		if err != nil {
			return p, err
		}
		p.tagged = append(p.tagged, taggedPut{eventKey(first.ResourceVersion), encodeChanges(tx.changes), true})
	}
	for _, key := range slices.Sorted(maps.Keys(tx.dirty)) {
		if err := s.planKey(&p, tx, key, lease); err != nil {
			return p, err
		}
	}
	// The event log keeps the changes above its horizon.
	base.events.Ascend(func(it item[commitLog]) bool {
		if it.v.last() > h.From {
			return false
		}
		p.optional = append(p.optional, kvOp{key: it.key, del: true})
		dropBlob(&p, it.v.blob)
		return true
	})
	maps.Copy(p.blobs, tx.blobs)
	return p, nil
}

// planKey adds the write of one changed key.
func (s *Store) planKey(p *txnPlan, tx *Tx, key string, lease clientv3.LeaseID) error {
	base, img := tx.base, tx.img
	switch {
	case strings.HasPrefix(key, resDir):
		kind, name, _ := strings.Cut(strings.TrimPrefix(key, resDir), "/")
		if r, ok := img.getRes(kind, name); ok {
			p.tagged = append(p.tagged, taggedPut{key: key, data: r.value})
		} else {
			p.keys = append(p.keys, kvOp{key: key, del: true})
		}
		if old, ok := base.getRes(kind, name); ok {
			dropBlob(p, old.blob)
		}
	case strings.HasPrefix(key, seriesDir):
		name := strings.TrimPrefix(key, seriesDir)
		if it, ok := img.series.Get(item[tagged]{key: name}); ok {
			p.tagged = append(p.tagged, taggedPut{key: key, data: it.v.data})
		} else {
			p.keys = append(p.keys, kvOp{key: key, del: true})
		}
		if old, ok := base.series.Get(item[tagged]{key: name}); ok {
			dropBlob(p, old.v.blob)
		}
	case strings.HasPrefix(key, stateDir):
		name := strings.TrimPrefix(key, stateDir)
		it, _ := img.states.Get(item[*stateRecord]{key: name})
		b, err := json.Marshal(it.v)
		if err != nil {
			return err
		}
		p.keys = append(p.keys, kvOp{key: key, value: b})
		kept := map[string]bool{}
		for _, v := range it.v.Versions {
			kept[v.Data.ID] = true
		}
		if old, ok := base.states.Get(item[*stateRecord]{key: name}); ok {
			for _, v := range old.v.Versions {
				if !kept[v.Data.ID] {
					dropBlob(p, v.Data.ID)
				}
			}
		}
	case strings.HasPrefix(key, lockDir):
		it, ok := img.locks.Get(item[heldLock]{key: strings.TrimPrefix(key, lockDir)})
		if !ok {
			p.keys = append(p.keys, kvOp{key: key, del: true})
			return nil
		}
		p.keys = append(p.keys, kvOp{key: key, value: it.v.raw, lease: lease})
	default:
		return fmt.Errorf("commit: unknown key %q", key)
	}
	return nil
}

// dropBlob adds the removal of blob id, if any, to the optional writes.
func dropBlob(p *txnPlan, id string) {
	if id != "" {
		p.optional = append(p.optional, kvOp{key: chunkDir + id + "/", del: true, prefix: true})
	}
}

// place decides which tagged values go inline and which to blobs and
// returns the transaction's writes. Blobs that fit go into the
// transaction; the others are written ahead of it (conditional on the
// fence), and the transaction checks that they are still there. A commit
// whose writes do not fit into one transaction is a large one (see
// pending.go): its writes are a blob, which the transaction names as the
// store's pending commit, returned as pending.
func (s *Store) place(p *txnPlan, f fence) (ops []clientv3.Op, ahead []string, pending *kvOp, err error) {
	total := opsSize(p.keys) + opsSize(p.head)
	for _, t := range p.tagged {
		total += len(t.key) + len(t.data)
	}
	// The largest values go to blobs first, until the rest fits.
	slices.SortStableFunc(p.tagged, func(a, b taggedPut) int { return len(b.data) - len(a.data) })
	for _, t := range p.tagged {
		var ref *blobRef
		if len(t.data) > inlineMax || total > txnBudget {
			r := newBlobRef(t.data)
			ref = &r
			p.blobs[r.ID] = t.data
			p.fresh = append(p.fresh, r.ID)
			s.fresh.Store(r.ID, t.data)
			total -= len(t.data)
		}
		o := kvOp{key: t.key, value: encodeTagged(t.data, ref)}
		if t.head {
			p.head = append(p.head, o)
		} else {
			p.keys = append(p.keys, o)
		}
	}
	writes := append(slices.Clone(p.head), p.keys...)
	large := len(writes)+1 > s.maxOps || opsSize(writes) > txnBudget
	if large {
		batch := encodeBatch(append(p.keys, p.optional...))
		ref := newBlobRef(batch)
		p.blobs[ref.ID] = batch
		pending = &kvOp{key: pendingKey, value: encodeTagged(nil, &ref)}
		writes = append(slices.Clone(p.head), *pending)
	}
	size := opsSize(writes)
	ids := slices.SortedFunc(maps.Keys(p.blobs), func(a, b string) int { return len(p.blobs[a]) - len(p.blobs[b]) })
	for _, id := range ids {
		data := p.blobs[id]
		n := chunkCount(len(data))
		if !large && size+len(data) <= txnBudget && len(writes)+n < s.maxOps {
			for i := range n {
				writes = append(writes, kvOp{key: chunkDir + id + "/" + chunkName(i), value: chunk(data, i)})
			}
			size += len(data)
			continue
		}
		ahead = append(ahead, id)
		if err := s.writeBlob(id, data, f); err != nil {
			return nil, ahead, nil, err
		}
		if len(p.cmps) < s.maxOps {
			p.cmps = append(p.cmps, clientv3.Compare(clientv3.CreateRevision(s.chunkKey(id, 0)), ">", 0))
		}
	}
	if !large {
		for _, o := range p.optional {
			if len(writes) >= s.maxOps {
				break
			}
			writes = append(writes, o)
		}
	}
	for _, o := range writes {
		ops = append(ops, o.op(s.prefix))
	}
	return ops, ahead, pending, nil
}

// dropBlobs removes blobs written ahead of a transaction that failed.
func (s *Store) dropBlobs(ids []string) {
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
		if _, err := s.cli.Delete(ctx, s.blobDir(id), clientv3.WithPrefix()); err != nil && !errors.Is(err, context.Canceled) {
			s.log.Warn("remove the blob of a failed commit; the collection of blobs will", "blob", id, "err", err)
		}
		cancel()
	}
}
