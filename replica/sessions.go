package replica

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ShareSession records value under the digest of a dashboard session
// until expires, under a lease of its own, so that the session outlives
// the replica that made it: every replica finds it (SharedSession) until
// it expires or is revoked (RevokeSession). Only the digest is stored,
// never the session's id.
func (r *Replica) ShareSession(ctx context.Context, digest, value []byte, expires time.Time) error {
	ttl := int64(time.Until(expires)/time.Second) + 1
	if ttl <= 1 {
		return errors.New("the session has expired")
	}
	ctx, cancel := context.WithTimeout(ctx, r.opTimeout())
	defer cancel()
	lease, err := r.cli.Grant(ctx, ttl)
	if err != nil {
		return fmt.Errorf("share a dashboard session in etcd: %w", err)
	}
	if _, err := r.cli.Put(ctx, r.sessionKey(digest), string(value), clientv3.WithLease(lease.ID)); err != nil {
		r.cli.Revoke(ctx, lease.ID)
		return fmt.Errorf("share a dashboard session in etcd: %w", err)
	}
	return nil
}

// SharedSession returns what a replica recorded with ShareSession under
// digest; ok is false when there is none.
func (r *Replica) SharedSession(ctx context.Context, digest []byte) (value []byte, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.opTimeout())
	defer cancel()
	resp, err := r.cli.Get(ctx, r.sessionKey(digest))
	if err != nil {
		return nil, false, fmt.Errorf("look up a shared dashboard session in etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, false, nil
	}
	return resp.Kvs[0].Value, true, nil
}

// RevokeSession removes the session under digest, with its lease.
func (r *Replica) RevokeSession(ctx context.Context, digest []byte) error {
	ctx, cancel := context.WithTimeout(ctx, r.opTimeout())
	defer cancel()
	key := r.sessionKey(digest)
	resp, err := r.cli.Get(ctx, key)
	if err == nil && len(resp.Kvs) > 0 && resp.Kvs[0].Lease != 0 {
		_, err = r.cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	}
	if err == nil {
		_, err = r.cli.Delete(ctx, key) // when the lease had ended already
	}
	if err != nil {
		return fmt.Errorf("revoke a shared dashboard session in etcd: %w", err)
	}
	return nil
}

func (r *Replica) sessionKey(digest []byte) string {
	return r.cfg.Prefix + sessionsDir + hex.EncodeToString(digest)
}
