package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/etcdtest"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
	etcdstore "github.com/rezuscloud/rezuscloud/store/etcd"
)

// TestStoreCopyToEtcd: `store copy` moves a bbolt store of many tenants,
// one of whose states is larger than etcd takes in one request and one of
// which keeps versions 299 to 301 only, into an
// empty prefix of a real etcd, where the etcd engine reads it back equal
// object by object, state versions included; a second copy into the same
// prefix is refused.
func TestStoreCopyToEtcd(t *testing.T) {
	src := copySource(t, 40)
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16)
	big = append(append([]byte(`{"version":4,"serial":9,"lineage":"big","pad":"`), big...), `"}`...)
	st, err := bolt.Open(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = st.Update(func(tx store.Tx) error {
		for range 300 {
			if _, err := tx.PutState("churned", []byte(`{"version":4}`), store.StateMeta{Token: "t"}, 2); err != nil {
				return err
			}
		}
		_, err := tx.PutState("big", big, store.StateMeta{Lineage: "big", Size: int64(len(big))}, 3)
		return err
	})
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	c := etcdtest.Start(t, 1)
	to := "etcd:" + strings.Join(c.Endpoints(), ",") + "?prefix=/moved/"
	out, err := runStoreCmd(t, nil, "store", "copy", "--from", "bbolt:"+src, "--to", to)
	if err != nil {
		t.Fatal(err)
	}
	if want := "240 API objects, 80 internal records, 42 TF states with 124 versions, 1 state lock, 96 series keys\n"; !strings.HasSuffix(out, want) {
		t.Errorf("store copy said %q, want it to end %q", out, want)
	}
	_, err = runStoreCmd(t, nil, "store", "copy", "--from", "bbolt:"+src, "--to", to)
	if want := "the target store is not empty (etcd at " + c.Endpoints()[0] + " under /moved/ holds"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a second copy into /moved/: %v, want an error with %q", err, want)
	}

	moved, err := etcdstore.Open(context.Background(), etcdstore.Config{Client: c.Client(t), Prefix: "/moved/", CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer moved.Close()
	compareStores(t, openCopied(t, src)[0], moved)
}
