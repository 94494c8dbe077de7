package replica

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ShareToken records value under the digest of a credential this replica
// minted, bound to its lease, so that every replica finds it (SharedToken)
// for as long as this replica lives: tofu, whose state requests may reach
// any replica, keeps its credential when the replica that ran it dies, up
// to the end of its lease. Only the digest is stored, never the secret.
// remove deletes the record.
func (r *Replica) ShareToken(ctx context.Context, digest []byte, value []byte) (remove func(), err error) {
	lease := r.Lease()
	if lease == clientv3.NoLease {
		return nil, errors.New("this replica holds no lease: it is fenced")
	}
	key := r.tokenKey(digest)
	ctx, cancel := context.WithTimeout(ctx, r.opTimeout())
	defer cancel()
	if _, err := r.cli.Put(ctx, key, string(value), clientv3.WithLease(lease)); err != nil {
		return nil, fmt.Errorf("share a credential in etcd: %w", err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), r.opTimeout())
		defer cancel()
		r.cli.Delete(ctx, key) // the lease's end removes it otherwise
	}, nil
}

// RevokeToken removes what any replica recorded with ShareToken under
// digest.
func (r *Replica) RevokeToken(ctx context.Context, digest []byte) error {
	ctx, cancel := context.WithTimeout(ctx, r.opTimeout())
	defer cancel()
	if _, err := r.cli.Delete(ctx, r.tokenKey(digest)); err != nil {
		return fmt.Errorf("revoke a shared credential in etcd: %w", err)
	}
	return nil
}

// SharedToken returns the value that a live replica recorded with
// ShareToken under digest; ok is false when there is none.
func (r *Replica) SharedToken(ctx context.Context, digest []byte) (value []byte, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.opTimeout())
	defer cancel()
	resp, err := r.cli.Get(ctx, r.tokenKey(digest))
	if err != nil {
		return nil, false, fmt.Errorf("look up a shared credential in etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, false, nil
	}
	return resp.Kvs[0].Value, true, nil
}

func (r *Replica) tokenKey(digest []byte) string {
	return r.cfg.Prefix + tokensDir + hex.EncodeToString(digest)
}
