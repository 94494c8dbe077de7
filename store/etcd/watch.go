package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// loadPage is how many keys one read of the store's keys asks for.
const loadPage = 1000

// load reads every key of the store under d/ as of one etcd revision into
// a new image.
func (s *Store) load(ctx context.Context) (*image, error) {
	im := newImage()
	from, end := s.prefix+dataDir, clientv3.GetPrefixRangeEnd(s.prefix+dataDir)
	var rev int64
	var pending *kvChange
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(loadPage)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		rctx, cancel := context.WithTimeout(ctx, opTimeout)
		resp, err := s.cli.Get(rctx, from, opts...)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("read the store: %w", err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if string(kv.Key) == s.prefix+pendingKey {
				// Its writes go over the keys, some not yet written.
				pending = &kvChange{value: kv.Value, mod: kv.ModRevision}
				continue
			}
			if _, err := im.apply(s, kvChange{key: string(kv.Key[len(s.prefix):]), value: kv.Value, mod: kv.ModRevision}); err != nil {
				return nil, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	if pending != nil {
		if err := im.applyPending(s, pending.value, pending.mod); err != nil {
			return nil, err
		}
	}
	im.etcdRev = rev
	return im, nil
}

// follow keeps the image current until the store closes: it watches the
// store's keys from the image's revision, and reads them again when etcd
// has compacted the history the watch needs.
func (s *Store) follow() {
	backoff := 50 * time.Millisecond
	for s.ctx.Err() == nil {
		err := s.watch()
		if s.ctx.Err() != nil {
			return
		}
		if errors.Is(err, rpctypes.ErrCompacted) {
			err = s.reload()
		}
		if err == nil {
			backoff = 50 * time.Millisecond
			continue
		}
		s.log.Warn("the store's watch of etcd failed; it starts again", "err", err, "in", backoff)
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// watch applies the changes of the store's keys after the image's
// revision, until the watch fails.
func (s *Store) watch() error {
	rev := s.snapshot().etcdRev
	wch := s.cli.Watch(s.ctx, s.prefix+dataDir, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	for resp := range wch {
		if err := resp.Err(); err != nil {
			return err
		}
		if resp.IsProgressNotify() {
			s.progress(resp.Header.Revision)
			continue
		}
		evs := resp.Events
		for i := 0; i < len(evs); {
			j := i
			for j < len(evs) && evs[j].Kv.ModRevision == evs[i].Kv.ModRevision {
				j++
			}
			if err := s.applyRevision(evs[i].Kv.ModRevision, evs[i:j]); err != nil {
				return err
			}
			i = j
		}
	}
	if err := s.ctx.Err(); err != nil {
		return err
	}
	return errors.New("the watch ended")
}

// applyRevision applies the changes of one etcd revision (one commit, or
// a lock whose lease ended) to a new image, publishes it, and calls the
// hooks with the commit's changes.
func (s *Store) applyRevision(rev int64, evs []*clientv3.Event) error {
	im := s.cloneOf(s.snapshot())
	var logs []commitLog
	for _, ev := range evs {
		cl, err := im.apply(s, kvChange{
			key: string(ev.Kv.Key[len(s.prefix):]), value: ev.Kv.Value, mod: rev,
			delete: ev.Type == mvccpb.DELETE,
		})
		if err != nil {
			return fmt.Errorf("etcd revision %d: %w", rev, err)
		}
		if cl != nil {
			logs = append(logs, *cl)
		}
	}
	im.etcdRev = rev
	s.publish(im, logs)
	return nil
}

// publish makes im the latest image, calls the hooks with logs, and then
// wakes the Updates that wait for im's revision.
func (s *Store) publish(im *image, logs []commitLog) {
	s.mu.Lock()
	s.img = im
	s.mu.Unlock()
	s.runHooks(logs)
	s.mu.Lock()
	s.hooked = im.etcdRev
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// progress records that the image reflects every change up to rev.
func (s *Store) progress(rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev <= s.hooked {
		return
	}
	im := *s.img
	im.etcdRev = rev
	s.img, s.hooked = &im, rev
	close(s.changed)
	s.changed = make(chan struct{})
}

// reload reads the store again, when the watch fell behind etcd's
// compaction, and calls the hooks with the commits it had not seen, as
// far as the event log still holds them.
func (s *Store) reload() error {
	old := s.snapshot()
	im, err := s.load(s.ctx)
	if err != nil {
		return err
	}
	if old.head.Rev < im.head.From {
		s.log.Error("the store's watch fell behind the event log: commit hooks miss changes",
			"seen", old.head.Rev, "logFrom", im.head.From)
	}
	var logs []commitLog
	for _, cl := range im.logsAfter(old.head.Rev) {
		cs := cl.changes
		for len(cs) > 0 && cs[0].Resource.ResourceVersion <= old.head.Rev {
			cs = cs[1:]
		}
		logs = append(logs, commitLog{changes: cs})
	}
	s.publish(im, logs)
	return nil
}
