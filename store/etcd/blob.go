package etcd

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rezuscloud/rezuscloud/store"
)

// chunksPerRead bounds the chunks one read of a blob asks for.
const chunksPerRead = 8

// writeBlob writes data as the chunks of blob id, each in a request of
// its own, conditional on the fence when there is one.
func (s *Store) writeBlob(id string, data []byte, f fence) error {
	for i := range chunkCount(len(data)) {
		ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
		put := clientv3.OpPut(s.chunkKey(id, i), string(chunk(data, i)))
		var err error
		if f.key == "" {
			_, err = s.cli.Do(ctx, put)
		} else {
			var resp *clientv3.TxnResponse
			resp, err = s.cli.Txn(ctx).If(f.cmp()).Then(put).Commit()
			if err == nil && !resp.Succeeded {
				err = fmt.Errorf("fence %s of revision %d: %w", f.key, f.rev, store.ErrFenced)
			}
		}
		cancel()
		if err != nil {
			return fmt.Errorf("write blob %s chunk %d: %w", id, i, err)
		}
	}
	return nil
}

// loadBlob returns the bytes of the blob ref as of etcd revision rev:
// from this store's fresh commits when it has them, else read from etcd,
// at rev when etcd still keeps it (a newer commit may have removed the
// blob since), else as it is now.
func (s *Store) loadBlob(ref blobRef, rev int64) ([]byte, error) {
	if v, ok := s.fresh.Load(ref.ID); ok {
		return v.([]byte), nil
	}
	ctx := s.ctx
	data := make([]byte, 0, ref.Size)
	for i := 0; i < ref.Chunks; i += chunksPerRead {
		end := min(i+chunksPerRead, ref.Chunks)
		kvs, err := s.readChunks(ctx, ref.ID, i, end, rev)
		if err != nil {
			return nil, err
		}
		if len(kvs) != end-i {
			return nil, fmt.Errorf("blob %s: %d of chunks %d to %d are there", ref.ID, len(kvs), i, end-1)
		}
		for _, kv := range kvs {
			data = append(data, kv.Value...)
		}
	}
	return data, ref.check(data)
}

// readChunks reads chunks from to end (excluded) of blob id, at rev when
// etcd keeps it.
func (s *Store) readChunks(ctx context.Context, id string, from, end int, rev int64) ([]*mvccpb.KeyValue, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithRange(s.chunkKey(id, end))}
	resp, err := s.cli.Get(ctx, s.chunkKey(id, from), append(opts, clientv3.WithRev(rev))...)
	if errors.Is(err, rpctypes.ErrCompacted) {
		resp, err = s.cli.Get(ctx, s.chunkKey(id, from), opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("read blob %s: %w", id, err)
	}
	return resp.Kvs, nil
}
