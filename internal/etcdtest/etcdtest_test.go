package etcdtest

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestQuorum: a cluster of three writes with one member killed, stops
// with two killed, and serves again, with what it held, once they are
// back.
func TestQuorum(t *testing.T) {
	c := Start(t, 3)
	cli := c.Client(t)
	ctx := context.Background()
	if _, err := cli.Put(ctx, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	c.Kill(0)
	if _, err := cli.Put(ctx, "k", "v2"); err != nil {
		t.Fatalf("a write with one member of three killed: %v", err)
	}
	c.Kill(1)
	if c.Healthy(ctx, cli, time.Second) {
		t.Fatal("a read answered with two members of three killed")
	}
	var wg sync.WaitGroup
	for _, i := range []int{0, 1} {
		wg.Go(func() {
			if err := c.Restart(i); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	resp, err := cli.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v2" {
		t.Fatalf("after the restart k = %v, want v2", resp.Kvs)
	}
}
