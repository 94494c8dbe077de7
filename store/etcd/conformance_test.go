package etcd_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rezuscloud/rezuscloud/internal/etcdtest"
	"github.com/rezuscloud/rezuscloud/store"
	etcdstore "github.com/rezuscloud/rezuscloud/store/etcd"
	"github.com/rezuscloud/rezuscloud/store/storetest"
)

// endpointsEnv hands the parent's etcd to the child process of the
// conformance suite's crash check, which opens the store on it again.
const endpointsEnv = "REZUSCLOUD_ETCDSTORE_TEST_ENDPOINTS"

// testClient returns a client of the etcd this test process uses: the
// parent's, when it is the crash check's child, else a new one-member
// cluster, which it names to children.
func testClient(t *testing.T) *clientv3.Client {
	t.Helper()
	if eps := os.Getenv(endpointsEnv); eps != "" {
		cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(eps, ","), DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	c := etcdtest.Start(t, 1)
	t.Setenv(endpointsEnv, strings.Join(c.Endpoints(), ","))
	return c.Client(t)
}

// open opens the store under a prefix made of dir.
func open(t testing.TB, cli *clientv3.Client, dir string, cfg etcdstore.Config) *etcdstore.Store {
	t.Helper()
	cfg.Client, cfg.Prefix = cli, "/storetest"+dir+"/"
	s, err := etcdstore.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestConformance runs the store's conformance suite against the engine
// on a real etcd.
func TestConformance(t *testing.T) {
	cli := testClient(t)
	storetest.Run(t, func(t testing.TB, dir string, opts storetest.Options) store.Store {
		t.Helper()
		return open(t, cli, dir, etcdstore.Config{EventHistory: opts.EventHistory, Now: opts.Now})
	})
}
