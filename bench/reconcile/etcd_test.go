package reconcile

import (
	"context"
	"flag"
	"fmt"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/etcdtest"
	"github.com/rezuscloud/rezuscloud/store"
	etcdstore "github.com/rezuscloud/rezuscloud/store/etcd"
)

// storeEngine is the store of the rig: `-args -store etcd` puts it in a
// real etcd of three members in the benchmark's process, as replicas
// share it, instead of bbolt in the data dir. The etcd rig lives as long
// as the benchmark that opened it (select one benchmark) and cannot be
// kept (-keep).
var storeEngine = "bolt"

func init() {
	flag.Func("store", "`ENGINE` of the rig's store: bolt (default) or etcd", func(v string) error {
		if v != "bolt" && v != "etcd" {
			return fmt.Errorf("unknown store engine %q: want bolt or etcd", v)
		}
		storeEngine = v
		return nil
	})
}

// rigStore opens the rig's store as -store says: nil for bbolt, which the
// backend opens in its data dir.
func rigStore(b *testing.B) store.Store {
	if storeEngine != "etcd" {
		return nil
	}
	if keepDir != "" {
		b.Fatal("-store etcd cannot keep its rig (-keep)")
	}
	cli := etcdtest.Start(b, 3).Client(b)
	st, err := etcdstore.Open(context.Background(), etcdstore.Config{Client: cli, Prefix: "/rezuscloud/"})
	if err != nil {
		b.Fatal(err)
	}
	return st
}
