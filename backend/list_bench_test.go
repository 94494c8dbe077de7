package backend

import (
	"fmt"
	"testing"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/storetest"
)

// BenchmarkWatchSnapshot measures the current state a new watch of one
// tenant starts with, on a store of ten tenants with 500 machines each.
func BenchmarkWatchSnapshot(b *testing.B) {
	ts := startServer(b, Config{}, false)
	err := ts.Store().Update(func(tx store.Tx) error {
		for i := range 10 {
			name := fmt.Sprintf("t%d", i)
			if err := benchPut(tx, schema.KindTenant, name, storetest.Tenant(name, "prod", i)); err != nil {
				return err
			}
		}
		for i := range 5000 {
			id := fmt.Sprintf("sim-%05d", i)
			if err := benchPut(tx, schema.KindMachine, id, storetest.Machine(id, fmt.Sprintf("t%d", i%10), "ng", schema.RoleWorker, "small", i)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		evs, _, err := ts.api.snapshot(tenantScope("t3"), nil)
		if err != nil || len(evs) != 501 {
			b.Fatalf("snapshot: %d events, %v", len(evs), err)
		}
	}
}

func benchPut(tx store.Tx, kind, key string, obj schema.Object) error {
	_, err := tx.PutObject(kind, key, obj)
	return err
}
