package etcd_test

import (
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/etcdtest"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
	etcdstore "github.com/rezuscloud/rezuscloud/store/etcd"
	"github.com/rezuscloud/rezuscloud/store/storetest"
)

// engines opens a store of each engine for b: etcd (one member, in the
// test process) and bbolt.
func engines(b *testing.B) map[string]store.Store {
	b.Helper()
	cli := etcdtest.Start(b, 1).Client(b)
	dir := b.TempDir()
	e := open(b, cli, dir, etcdstore.Config{})
	bs, err := bolt.Open(dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close(); bs.Close() })
	return map[string]store.Store{"etcd": e, "bolt": bs}
}

// BenchmarkNoChangeUpdate: an Update that puts a tenant as it is stored,
// which writes nothing, as a reconcile of an unchanged commit does.
func BenchmarkNoChangeUpdate(b *testing.B) {
	for name, s := range engines(b) {
		b.Run(name, func(b *testing.B) {
			put := func() error {
				return s.Update(func(tx store.Tx) error {
					_, err := tx.PutObject(schema.KindTenant, "alpha", storetest.Tenant("alpha", "prod", 1))
					return err
				})
			}
			if err := put(); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := put(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPutState1MiB: an Update that stores a new version of a TF
// state of 1 MiB, keeping 4.
func BenchmarkPutState1MiB(b *testing.B) {
	for name, s := range engines(b) {
		b.Run(name, func(b *testing.B) {
			serial := uint64(0)
			b.SetBytes(1 << 20)
			for b.Loop() {
				serial++
				data := storetest.State(serial, "lin", 1<<20)
				err := s.Update(func(tx store.Tx) error {
					_, err := store.WriteState(tx, "alpha", store.StateWrite{Data: data, Serial: serial, Lineage: "lin",
						Token: "tofu", Time: storetest.SeedTime, Keep: 4})
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
