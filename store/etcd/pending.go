package etcd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A large commit is one whose writes do not fit into one etcd
// transaction (--max-txn-ops, --max-request-bytes). Its transaction
// writes the head, the commit's log and the key pendingKey, which names a
// blob of all its writes (encodeBatch); every image applies those writes
// at once when it sees the key, so readers see the commit whole. The
// writes are then made, in transactions as large as etcd takes, and the
// key removed. While the key is there no other commit is made: a writer
// that finds it finishes the writes first, so a commit whose writer died
// half way is finished by the next one.

// Flags of an encoded write.
const (
	batchDelete byte = 1 << iota
	batchPrefix
)

// encodeBatch encodes writes: for each, its flags, its key and value (a
// uvarint length and bytes each) and its lease (a varint).
func encodeBatch(ops []kvOp) []byte {
	var b []byte
	for _, o := range ops {
		var flags byte
		if o.del {
			flags |= batchDelete
		}
		if o.prefix {
			flags |= batchPrefix
		}
		b = append(b, flags)
		b = binary.AppendUvarint(b, uint64(len(o.key)))
		b = append(b, o.key...)
		b = binary.AppendUvarint(b, uint64(len(o.value)))
		b = append(b, o.value...)
		b = binary.AppendVarint(b, int64(o.lease))
	}
	return b
}

// decodeBatch decodes what encodeBatch wrote.
func decodeBatch(b []byte) ([]kvOp, error) {
	var out []kvOp
	bad := errors.New("pending commit: truncated writes")
	field := func() ([]byte, bool) {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return nil, false
		}
		f := b[w : w+int(n)]
		b = b[w+int(n):]
		return f, true
	}
	for len(b) > 0 {
		o := kvOp{del: b[0]&batchDelete != 0, prefix: b[0]&batchPrefix != 0}
		b = b[1:]
		key, ok := field()
		if !ok {
			return nil, bad
		}
		if o.value, ok = field(); !ok {
			return nil, bad
		}
		o.key = string(key)
		lease, w := binary.Varint(b)
		if w <= 0 {
			return nil, bad
		}
		o.lease, b = clientv3.LeaseID(lease), b[w:]
		out = append(out, o)
	}
	return out, nil
}

// applyPending applies a large commit's writes, named by the value v of
// pendingKey, to the image.
func (im *image) applyPending(l loader, v []byte, mod int64) error {
	_, ref, err := decodeTagged(v)
	if err == nil && ref == nil {
		err = errors.New("names no blob")
	}
	if err != nil {
		return fmt.Errorf("pending commit: %w", err)
	}
	data, err := l.loadBlob(*ref, mod)
	if err != nil {
		return fmt.Errorf("pending commit: %w", err)
	}
	ops, err := decodeBatch(data)
	if err != nil {
		return err
	}
	for _, o := range ops {
		if o.prefix {
			continue // the removal of a blob, which images do not hold
		}
		if _, err := im.apply(l, kvChange{key: o.key, value: o.value, mod: mod, delete: o.del}); err != nil {
			return err
		}
	}
	return nil
}

// finishPending makes the writes of the large commit whose pendingKey
// holds v and was created at created, and removes the key. It stops when
// the key is gone (another writer finished them); what fails it logs,
// for the next writer to finish.
func (s *Store) finishPending(v []byte, created int64) {
	if err := s.finish(v, created); err != nil && s.ctx.Err() == nil {
		s.log.Warn("finish the writes of a large commit; the next commit will", "err", err)
	}
}

func (s *Store) finish(v []byte, created int64) error {
	_, ref, err := decodeTagged(v)
	if err != nil || ref == nil {
		return fmt.Errorf("pending commit names no blob (%v)", err)
	}
	data, err := s.loadBlob(*ref, 0)
	if err != nil {
		return err
	}
	ops, err := decodeBatch(data)
	if err != nil {
		return err
	}
	still := clientv3.Compare(clientv3.CreateRevision(s.prefix+pendingKey), "=", created)
	for len(ops) > 0 {
		n, size := 0, 0
		for n < len(ops) && n < s.maxOps-2 && (n == 0 || size+len(ops[n].value) <= txnBudget) {
			size += len(ops[n].key) + len(ops[n].value)
			n++
		}
		done, err := s.writeIf(still, ops[:n])
		if err != nil || done {
			return err
		}
		ops = ops[n:]
	}
	_, err = s.writeIf(still, []kvOp{{key: pendingKey, del: true}, {key: chunkDir + ref.ID + "/", del: true, prefix: true}})
	return err
}

// writeIf makes writes when cmp holds, and reports done when it does not.
// A lock whose holder's lease ended meanwhile is not written: it went
// with the lease.
func (s *Store) writeIf(cmp clientv3.Cmp, writes []kvOp) (done bool, err error) {
	for {
		ops := make([]clientv3.Op, len(writes))
		for i, o := range writes {
			ops[i] = o.op(s.prefix)
		}
		ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
		resp, err := s.cli.Txn(ctx).If(cmp).Then(ops...).Commit()
		cancel()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			writes = withoutLeases(writes)
			continue
		}
		if err != nil {
			return false, err
		}
		return !resp.Succeeded, nil
	}
}

// withoutLeases turns the puts bound to a lease into deletes.
func withoutLeases(writes []kvOp) []kvOp {
	out := make([]kvOp, len(writes))
	for i, o := range writes {
		if o.lease != 0 {
			o = kvOp{key: o.key, del: true}
		}
		out[i] = o
	}
	return out
}
