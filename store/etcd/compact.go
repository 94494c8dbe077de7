package etcd

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// compactLoop compacts etcd's history every compactEvery, to the revision
// the image had one interval before, and removes the blobs nothing refers
// to that are as old. So etcd keeps at least one interval of history: a
// replica's watch that fell behind less than that resumes, and a View's
// reads of a state's bytes as of its image find them. The event log, which
// API watches resume from, is keys of the store's own and outlives it.
func (s *Store) compactLoop() {
	t := time.NewTicker(s.compactEvery)
	defer t.Stop()
	var last int64
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if last > 0 {
			if err := s.compact(last); err != nil && s.ctx.Err() == nil {
				s.log.Warn("compact etcd's history", "revision", last, "err", err)
			}
		}
		last = s.snapshot().etcdRev
	}
}

// compact compacts etcd's history up to rev and removes the blobs nothing
// refers to that were written before rev.
func (s *Store) compact(rev int64) error {
	ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
	defer cancel()
	if _, err := s.cli.Compact(ctx, rev); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return err
	}
	return s.collectBlobs(ctx, rev)
}

// collectBlobs removes the blobs that the image does not refer to and
// whose chunks were all written before rev: those of commits that failed
// or were never made, and those a commit had no room to remove. A commit
// checks that the blobs it wrote ahead are still there, and the removal
// is conditional on no commit after the image, so no commit refers to a
// removed blob.
func (s *Store) collectBlobs(ctx context.Context, rev int64) error {
	im := s.snapshot()
	used := im.blobs()
	dir := s.prefix + chunkDir
	newest := map[string]int64{}
	from, end := dir, clientv3.GetPrefixRangeEnd(dir)
	for {
		resp, err := s.cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(loadPage))
		if err != nil {
			return err
		}
		for _, kv := range resp.Kvs {
			id, _, _ := strings.Cut(string(kv.Key[len(dir):]), "/")
			newest[id] = max(newest[id], kv.ModRevision)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	var drop []clientv3.Op
	for id, mod := range newest {
		if !used[id] && mod < rev {
			drop = append(drop, clientv3.OpDelete(s.blobDir(id), clientv3.WithPrefix()))
		}
	}
	// Only while no commit came after the image: a commit may refer to a
	// blob it wrote ahead long ago.
	unchanged := clientv3.Compare(clientv3.ModRevision(s.prefix+headKey), "=", im.headMod)
	for len(drop) > 0 {
		n := min(len(drop), s.maxOps)
		resp, err := s.cli.Txn(ctx).If(unchanged).Then(drop[:n]...).Commit()
		if err != nil || !resp.Succeeded {
			return err
		}
		drop = drop[n:]
	}
	return nil
}

// blobs returns the IDs of every blob the image refers to.
func (im *image) blobs() map[string]bool {
	used := map[string]bool{}
	im.res.Ascend(func(it item[resource]) bool { used[it.v.blob] = true; return true })
	im.series.Ascend(func(it item[tagged]) bool { used[it.v.blob] = true; return true })
	im.events.Ascend(func(it item[commitLog]) bool { used[it.v.blob] = true; return true })
	im.states.Ascend(func(it item[*stateRecord]) bool {
		for _, v := range it.v.Versions {
			used[v.Data.ID] = true
		}
		return true
	})
	return used
}
