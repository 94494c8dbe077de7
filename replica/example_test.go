package replica_test

import (
	"context"
	"log"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rezuscloud/rezuscloud/replica"
)

// A server joins as a replica, makes its store's writes conditional on
// its membership, and works on the tenants it owns.
func Example() {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	r, err := replica.Join(ctx, replica.Config{Client: cli, Prefix: "/rezuscloud/replicas/", Name: "server-1", Address: "https://server-1:8443"})
	if err != nil {
		log.Fatal(err)
	}
	setFence := func(key string, rev int64) { /* e.g. the store's SetFence */ }
	r.OnFence(setFence)
	go func() { _ = r.Run(ctx) }()
	for {
		changed := r.Changed()
		if wctx, done, ok := r.Acquire("production"); ok {
			go func() {
				defer done()
				<-wctx.Done() // reconcile the tenant until wctx ends
			}()
		}
		<-changed
	}
}
