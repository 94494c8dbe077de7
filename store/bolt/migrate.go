package bolt

import (
	"bytes"
	"encoding/binary"
	"fmt"

	bbolt "go.etcd.io/bbolt"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// migrateFormat1 turns a store file of format "1" into the current format,
// inside the transaction that opens it, so that a server upgraded in place
// serves the same objects with the same resourceVersions and resumes the
// same watches:
//
//   - every stored API object gets its resourceVersion into
//     metadata.resourceVersion, which format 1 added only when serving;
//   - so does every API object in the event log, with the resourceVersion
//     of its logged change;
//   - every stored value gets the header of the current format (see
//     store.DecodeValue), and the tenant index is built.
//
// An object that does not decode keeps its JSON as it is; the API answers
// 500 for it, as before.
func migrateFormat1(btx *bbolt.Tx) error {
	tx := &Tx{tx: btx}
	err := btx.Bucket(bucketResources).ForEachBucket(func(kind []byte) error {
		b := btx.Bucket(bucketResources).Bucket(kind)
		_, served := schema.LookupKind(string(kind))
		var keys, values [][]byte
		err := b.ForEach(func(key, v []byte) error {
			if len(v) < 8 { // a nested bucket, or nothing of ours
				return nil
			}
			rv, data := binary.BigEndian.Uint64(v), v[8:]
			value := store.RecordValue(rv, data)
			if served {
				if restamped, err := store.RestampValue(string(kind), data, rv); err == nil {
					value = restamped
				}
			}
			keys, values = append(keys, bytes.Clone(key)), append(values, value)
			return nil
		})
		if err != nil {
			return err
		}
		for i, key := range keys {
			if err := b.Put(key, values[i]); err != nil {
				return fmt.Errorf("migrate %s %q: %w", kind, key, err)
			}
			if served {
				if err := tx.indexMigrated(string(kind), string(key), values[i]); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := migrateEvents(btx.Bucket(bucketEvents)); err != nil {
		return err
	}
	return btx.Bucket(bucketMeta).Put(keyFormat, []byte(storeFormat))
}

// indexMigrated adds a migrated API object to the tenant index, unless its
// metadata does not decode.
func (tx *Tx) indexMigrated(kind, key string, value []byte) error {
	r, err := store.DecodeValue(kind, key, value)
	var head store.MetaHead
	if err != nil || r.DecodeMeta(&head) != nil {
		return nil
	}
	m := head.Meta()
	return tx.reindex(kind, key, "", schema.TenantOf(kind, &m))
}

// migrateEvents puts the resourceVersion of each logged change of an API
// kind into its object.
func migrateEvents(events *bbolt.Bucket) error {
	var keys, values [][]byte
	err := events.ForEach(func(key, v []byte) error {
		if len(key) != 8 {
			return nil
		}
		c, err := decodeChange(binary.BigEndian.Uint64(key), v)
		if err != nil {
			return nil
		}
		if _, ok := schema.LookupKind(c.Resource.Kind); !ok {
			return nil
		}
		value, err := store.RestampValue(c.Resource.Kind, c.Resource.Object, c.Resource.ResourceVersion)
		if err != nil {
			return nil
		}
		r, err := store.DecodeValue(c.Resource.Kind, c.Resource.Name, value)
		if err != nil {
			return nil
		}
		c.Resource.Object = r.Object
		keys = append(keys, bytes.Clone(key))
		values = append(values, encodeChange(c))
		return nil
	})
	if err != nil {
		return err
	}
	for i, key := range keys {
		if err := events.Put(key, values[i]); err != nil {
			return fmt.Errorf("migrate event log: %w", err)
		}
	}
	return nil
}
