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

// txnPlan is the etcd transaction of one commit.
type txnPlan struct {
	cmps []clientv3.Cmp
	// ops must go in; optional ops (removing what nothing refers to any
	// more) go in while the transaction has room, else a later commit or
	// the collection of blobs removes it.
	ops, optional []clientv3.Op
	size          int
	// tagged are the values that go inline or to a blob; blobs the new
	// blobs with their bytes.
	tagged []taggedPut
	blobs  map[string][]byte
	refs   map[string]blobRef
}

type taggedPut struct {
	key  string
	data []byte
}

func (p *txnPlan) put(key string, v []byte, opts ...clientv3.OpOption) {
	p.ops = append(p.ops, clientv3.OpPut(key, string(v), opts...))
	p.size += len(key) + len(v)
}

// commit writes tx to etcd in one transaction and returns its etcd
// revision; a *conflictError when another commit came first, an error
// wrapping store.ErrFenced when the fence is gone.
func (s *Store) commit(tx *Tx) (int64, error) {
	s.mu.Lock()
	fenceKey, fenceRev, lease := s.fenceKey, s.fenceRev, s.lease
	s.mu.Unlock()
	p, err := s.plan(tx, lease)
	if err != nil {
		return 0, err
	}
	if fenceKey != "" {
		p.cmps = append(p.cmps, clientv3.Compare(clientv3.CreateRevision(fenceKey), "=", fenceRev))
	}
	ahead, err := s.placeBlobs(&p, fenceKey, fenceRev)
	defer func() {
		for id := range p.refs {
			s.fresh.Delete(id)
		}
	}()
	if err != nil {
		s.dropBlobs(ahead)
		return 0, err
	}
	if n := max(len(p.ops), len(p.cmps)); n > s.maxOps {
		s.dropBlobs(ahead)
		return 0, fmt.Errorf("commit of %d writes: etcd takes at most %d operations in one transaction (its --max-txn-ops)", len(p.ops), s.maxOps)
	}
	for _, op := range p.optional {
		if len(p.ops) >= s.maxOps {
			break
		}
		p.ops = append(p.ops, op)
	}
	ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
	defer cancel()
	else_ := []clientv3.Op{clientv3.OpGet(s.prefix + headKey)}
	if fenceKey != "" {
		else_ = append(else_, clientv3.OpGet(fenceKey))
	}
	resp, err := s.cli.Txn(ctx).If(p.cmps...).Then(p.ops...).Else(else_...).Commit()
	if err != nil {
		s.dropBlobs(ahead)
		return 0, fmt.Errorf("commit: %w", err)
	}
	if resp.Succeeded {
		return resp.Header.Revision, nil
	}
	s.dropBlobs(ahead)
	if fenceKey != "" {
		kvs := resp.Responses[1].GetResponseRange().Kvs
		if len(kvs) == 0 || kvs[0].CreateRevision != fenceRev {
			return 0, fmt.Errorf("commit: fence %s of revision %d: %w", fenceKey, fenceRev, store.ErrFenced)
		}
	}
	return 0, &conflictError{rev: resp.Header.Revision}
}

// plan builds the transaction of tx: the head, the commit's log, every key
// it changed, conditional on the head and the locks it read being as its
// snapshot had them.
func (s *Store) plan(tx *Tx, lease clientv3.LeaseID) (txnPlan, error) {
	base, img := tx.base, tx.img
	p := txnPlan{blobs: map[string][]byte{}, refs: map[string]blobRef{}}
	p.cmps = append(p.cmps, clientv3.Compare(clientv3.ModRevision(s.prefix+headKey), "=", base.headMod))
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
	p.put(s.prefix+headKey, hb)
	if len(tx.changes) > 0 {
		first, err := store.DecodeValue(tx.changes[0].Kind, tx.changes[0].Name, tx.changes[0].Value)
		if err != nil {
			return p, err
		}
		p.tagged = append(p.tagged, taggedPut{eventKey(first.ResourceVersion), encodeChanges(tx.changes)})
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
		p.optional = append(p.optional, clientv3.OpDelete(s.prefix+it.key))
		s.optionalDrop(&p, it.v.blob)
		return true
	})
	for id, data := range tx.blobs {
		p.blobs[id] = data
	}
	return p, nil
}

// planKey adds the write of one changed key.
func (s *Store) planKey(p *txnPlan, tx *Tx, key string, lease clientv3.LeaseID) error {
	base, img := tx.base, tx.img
	switch {
	case strings.HasPrefix(key, resDir):
		kind, name, _ := strings.Cut(strings.TrimPrefix(key, resDir), "/")
		old, had := base.getRes(kind, name)
		if r, ok := img.getRes(kind, name); ok {
			p.tagged = append(p.tagged, taggedPut{key, r.value})
		} else {
			p.ops = append(p.ops, clientv3.OpDelete(s.prefix+key))
		}
		if had {
			s.optionalDrop(p, old.blob)
		}
	case strings.HasPrefix(key, seriesDir):
		name := strings.TrimPrefix(key, seriesDir)
		old, had := base.series.Get(item[tagged]{key: name})
		if it, ok := img.series.Get(item[tagged]{key: name}); ok {
			p.tagged = append(p.tagged, taggedPut{key, it.v.data})
		} else {
			p.ops = append(p.ops, clientv3.OpDelete(s.prefix+key))
		}
		if had {
			s.optionalDrop(p, old.v.blob)
		}
	case strings.HasPrefix(key, stateDir):
		name := strings.TrimPrefix(key, stateDir)
		it, _ := img.states.Get(item[*stateRecord]{key: name})
		b, err := json.Marshal(it.v)
		if err != nil {
			return err
		}
		p.put(s.prefix+key, b)
		kept := map[string]bool{}
		for _, v := range it.v.Versions {
			kept[v.Data.ID] = true
		}
		if old, ok := base.states.Get(item[*stateRecord]{key: name}); ok {
			for _, v := range old.v.Versions {
				if !kept[v.Data.ID] {
					s.optionalDrop(p, v.Data.ID)
				}
			}
		}
	case strings.HasPrefix(key, lockDir):
		it, ok := img.locks.Get(item[heldLock]{key: strings.TrimPrefix(key, lockDir)})
		if !ok {
			p.ops = append(p.ops, clientv3.OpDelete(s.prefix+key))
			return nil
		}
		var opts []clientv3.OpOption
		if lease != 0 {
			opts = append(opts, clientv3.WithLease(lease))
		}
		p.put(s.prefix+key, it.v.raw, opts...)
	default:
		return fmt.Errorf("commit: unknown key %q", key)
	}
	return nil
}

// optionalDrop adds the removal of blob id, if any, to the optional ops.
func (s *Store) optionalDrop(p *txnPlan, id string) {
	if id != "" {
		p.optional = append(p.optional, clientv3.OpDelete(s.blobDir(id), clientv3.WithPrefix()))
	}
}

// placeBlobs decides which tagged values go inline and which to blobs,
// puts the blobs that fit into the transaction, and writes the others
// ahead of it (conditional on the fence), returning those. The
// transaction then checks that the blobs written ahead are still there.
func (s *Store) placeBlobs(p *txnPlan, fenceKey string, fenceRev int64) ([]string, error) {
	total := p.size
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
			p.refs[r.ID] = r
			s.fresh.Store(r.ID, t.data)
			total -= len(t.data)
		}
		p.put(s.prefix+t.key, encodeTagged(t.data, ref))
	}
	var ahead []string
	ids := slices.SortedFunc(maps.Keys(p.blobs), func(a, b string) int { return len(p.blobs[a]) - len(p.blobs[b]) })
	for _, id := range ids {
		data := p.blobs[id]
		n := chunkCount(len(data))
		if p.size+len(data) <= txnBudget && len(p.ops)+n < s.maxOps {
			for i := range n {
				p.put(s.chunkKey(id, i), chunk(data, i))
			}
			continue
		}
		ahead = append(ahead, id)
		if err := s.writeBlob(id, data, fenceKey, fenceRev); err != nil {
			return ahead, err
		}
		p.cmps = append(p.cmps, clientv3.Compare(clientv3.CreateRevision(s.chunkKey(id, 0)), ">", 0))
	}
	return ahead, nil
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
