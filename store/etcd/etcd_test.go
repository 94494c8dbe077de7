package etcd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	etcdstore "github.com/rezuscloud/rezuscloud/store/etcd"
	"github.com/rezuscloud/rezuscloud/store/storetest"
)

// bigState returns a TF state of serial and about size bytes whose every
// filler byte says the serial, so that a mix of two states shows.
func bigState(serial uint64, size int) []byte {
	head := fmt.Sprintf(`{"version":4,"serial":%d,"lineage":"lin","resources":[],"filler":"`, serial)
	fill := bytes.Repeat([]byte{byte('a' + serial%26)}, size-len(head)-2)
	return append(append([]byte(head), fill...), '"', '}')
}

// putState writes data as the state name at serial.
func putState(tx store.Tx, name string, serial uint64, data []byte) error {
	_, err := store.WriteState(tx, name, store.StateWrite{Data: data, Serial: serial, Lineage: "lin",
		Token: "tofu", Time: storetest.SeedTime, Keep: 2})
	return err
}

// chunks counts the chunk keys of the store under prefix.
func chunks(t *testing.T, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), prefix+"c/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// TestStateOf5MiB: a state of 5 MiB, beyond etcd's request limit, is
// stored in chunks, reads back whole on another replica, and its chunks
// go once newer versions push it out.
func TestStateOf5MiB(t *testing.T) {
	cli := testClient(t)
	dir := t.TempDir()
	a := open(t, cli, dir, etcdstore.Config{})
	defer a.Close()
	data := bigState(1, 5<<20)
	if err := a.Update(func(tx store.Tx) error { return putState(tx, "big", 1, data) }); err != nil {
		t.Fatal(err)
	}
	prefix := "/storetest" + dir + "/"
	if n := chunks(t, cli, prefix); n < 5 {
		t.Fatalf("a state of 5 MiB is %d chunks, want at least 5", n)
	}
	b := open(t, cli, dir, etcdstore.Config{})
	defer b.Close()
	if err := b.View(func(tx store.Tx) error {
		got, meta, err := tx.State("big")
		if err != nil || !bytes.Equal(got, data) || meta.Size != int64(len(data)) {
			t.Errorf("the other replica read %d bytes (%v), want the %d written", len(got), err, len(data))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for serial := uint64(2); serial <= 4; serial++ {
		if err := b.Update(func(tx store.Tx) error { return putState(tx, "big", serial, bigState(serial, 1000)) }); err != nil {
			t.Fatal(err)
		}
	}
	if n := chunks(t, cli, prefix); n != 3 {
		t.Errorf("after three small versions with Keep 2: %d chunks, want 3 (the 5 MiB version's are gone)", n)
	}
}

// TestReadersNeverSeeAMix: while two replicas write states of 3 MiB, a
// reader on each replica only ever reads one whole version, never parts
// of two.
func TestReadersNeverSeeAMix(t *testing.T) {
	cli := testClient(t)
	dir := t.TempDir()
	replicas := []*etcdstore.Store{open(t, cli, dir, etcdstore.Config{}), open(t, cli, dir, etcdstore.Config{})}
	for _, s := range replicas {
		defer s.Close()
	}
	const size, writes = 3 << 20, 6
	var serial sync.Mutex
	next := uint64(0)
	var writers sync.WaitGroup
	for _, s := range replicas {
		writers.Go(func() {
			for range writes {
				err := s.Update(func(tx store.Tx) error {
					serial.Lock()
					next++
					n := next
					serial.Unlock()
					return putState(tx, "big", n, bigState(n, size))
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { writers.Wait(); close(done) }()
	reads := 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		for _, s := range replicas {
			err := s.View(func(tx store.Tx) error {
				data, meta, err := tx.State("big")
				if errors.Is(err, store.ErrNoState) {
					return nil
				}
				if err != nil {
					return err
				}
				reads++
				if want := bigState(*meta.Serial, size); !bytes.Equal(data, want) {
					return fmt.Errorf("a reader read %d bytes that are not serial %d's state: a mix", len(data), *meta.Serial)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if reads == 0 {
		t.Fatal("no read found a state while the writers ran")
	}
}

// transfer moves one unit from account from to account to, among n, on
// store s, and counts it for writer w.
func transfer(s store.Store, w, from, to int) error {
	return s.Update(func(tx store.Tx) error {
		var a, b, c int
		for _, x := range []struct {
			key string
			v   *int
		}{{"a" + strconv.Itoa(from), &a}, {"a" + strconv.Itoa(to), &b}, {"w" + strconv.Itoa(w), &c}} {
			if err := tx.GetObject("Account", x.key, x.v); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		for key, v := range map[string]int{"a" + strconv.Itoa(from): a - 1, "a" + strconv.Itoa(to): b + 1, "w" + strconv.Itoa(w): c + 1} {
			if _, err := tx.Put("Account", key, []byte(strconv.Itoa(v))); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestTwoReplicas: writers on two replicas of one store transfer between
// the same accounts at once. No transfer is lost, the accounts sum to
// zero, and each replica's commit hooks saw every commit of both, in the
// same order, with revisions one after another.
func TestTwoReplicas(t *testing.T) {
	cli := testClient(t)
	dir := t.TempDir()
	replicas := []*etcdstore.Store{open(t, cli, dir, etcdstore.Config{}), open(t, cli, dir, etcdstore.Config{})}
	seen := make([][]uint64, len(replicas))
	for i, s := range replicas {
		defer s.Close()
		s.OnCommit(func(cs []store.Change) {
			seenMu.Lock()
			defer seenMu.Unlock()
			for _, c := range cs {
				seen[i] = append(seen[i], c.Resource.ResourceVersion)
			}
		})
	}
	const accounts, perWriter = 4, 25
	var wg sync.WaitGroup
	for w := range 4 {
		s := replicas[w%2]
		wg.Go(func() {
			for i := range perWriter {
				if err := transfer(s, w, (w+i)%accounts, (w+i+1)%accounts); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// A replica's image holds the other's commits once they reach it: a
	// commit of its own, which comes after them, waits for them.
	for i, s := range replicas {
		if err := s.Update(func(tx store.Tx) error { _, err := tx.Put("Sync", strconv.Itoa(i), []byte("1")); return err }); err != nil {
			t.Fatal(err)
		}
	}
	var latest uint64
	_ = replicas[1].View(func(tx store.Tx) error { latest = tx.ResourceVersion(); return nil })
	for i := range replicas {
		waitFor(t, fmt.Sprintf("replica %d's hooks", i), func() bool { return uint64(len(seenCopy(&seen[i]))) >= latest })
	}
	for i, s := range replicas {
		if err := s.View(func(tx store.Tx) error {
			sum, count := 0, 0
			for _, r := range must(tx.List("Account")) {
				n, _ := strconv.Atoi(string(r.Object))
				if r.Name[0] == 'a' {
					sum += n
				} else {
					count += n
				}
			}
			if sum != 0 || count != 4*perWriter {
				t.Errorf("replica %d: accounts sum to %d and %d transfers are counted, want 0 and %d", i, sum, count, 4*perWriter)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range replicas {
		got := seenCopy(&seen[i])
		for j, rv := range got {
			if rv != uint64(j+1) {
				t.Fatalf("replica %d's hooks saw revision %d at %d, want %d: a commit was missed or out of order", i, rv, j, j+1)
			}
		}
	}
}

var seenMu sync.Mutex

func seenCopy(s *[]uint64) []uint64 {
	seenMu.Lock()
	defer seenMu.Unlock()
	return append([]uint64(nil), *s...)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// waitFor waits until cond holds, and fails t after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFence: with a fence on a key bound to a lease, commits succeed
// while the key is the one fenced on, and once the lease is gone (or the
// key made anew) they are refused with ErrFenced and write nothing, not
// even the chunks of a big state.
func TestFence(t *testing.T) {
	cli := testClient(t)
	dir := t.TempDir()
	s := open(t, cli, dir, etcdstore.Config{})
	defer s.Close()
	ctx := context.Background()
	lease := must(cli.Grant(ctx, 60))
	put := must(cli.Put(ctx, "/replicas/a", "a", clientv3.WithLease(lease.ID)))
	s.SetFence("/replicas/a", put.Header.Revision)
	if err := s.Update(func(tx store.Tx) error { _, err := tx.Put("Record", "r", []byte("1")); return err }); err != nil {
		t.Fatalf("a commit under the fence: %v", err)
	}
	must(cli.Revoke(ctx, lease.ID))
	prefix := "/storetest" + dir + "/"
	before := chunks(t, cli, prefix)
	err := s.Update(func(tx store.Tx) error {
		if _, err := tx.Put("Record", "r", []byte("2")); err != nil {
			return err
		}
		return putState(tx, "big", 1, bigState(1, 3<<20))
	})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a commit after the lease ended: %v, want ErrFenced", err)
	}
	if n := chunks(t, cli, prefix); n != before {
		t.Errorf("the fenced commit left %d chunks, there were %d", n, before)
	}
	must(cli.Put(ctx, "/replicas/a", "a again"))
	err = s.Update(func(tx store.Tx) error { _, err := tx.Put("Record", "r", []byte("3")); return err })
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a commit after the key was made anew: %v, want ErrFenced", err)
	}
	other := open(t, cli, dir, etcdstore.Config{})
	defer other.Close()
	_ = other.View(func(tx store.Tx) error {
		var r store.Resource
		if r, err = tx.Get("Record", "r"); err != nil || string(r.Object) != "1" || tx.ResourceVersion() != 1 {
			t.Errorf("after the fenced commits: record %q (%v), revision %d; want 1 and 1", r.Object, err, tx.ResourceVersion())
		}
		if _, _, err := tx.State("big"); !errors.Is(err, store.ErrNoState) {
			t.Errorf("the fenced commit's state: %v, want ErrNoState", err)
		}
		return nil
	})
}

// TestLockLease: a lock taken under the store's lock lease goes when the
// lease ends, on every replica, and the state can be locked again.
func TestLockLease(t *testing.T) {
	cli := testClient(t)
	dir := t.TempDir()
	a, b := open(t, cli, dir, etcdstore.Config{}), open(t, cli, dir, etcdstore.Config{})
	defer a.Close()
	defer b.Close()
	ctx := context.Background()
	lease := must(cli.Grant(ctx, 60))
	a.SetLockLease(lease.ID)
	lock := store.Lock{ID: "L1", Token: "tofu-a", Created: storetest.SeedTime, Info: []byte(`{"Who":"a"}`)}
	if err := a.Update(func(tx store.Tx) error { return store.LockState(tx, "alpha", lock) }); err != nil {
		t.Fatal(err)
	}
	held := func(s store.Store) bool {
		var l *store.Lock
		_ = s.View(func(tx store.Tx) (err error) { l, err = tx.Lock("alpha"); return err })
		return l != nil
	}
	waitFor(t, "the lock on the other replica", func() bool { return held(b) })
	other := store.Lock{ID: "L2", Token: "tofu-b", Created: storetest.SeedTime, Info: []byte(`{}`)}
	var le *store.LockedError
	if err := b.Update(func(tx store.Tx) error { return store.LockState(tx, "alpha", other) }); !errors.As(err, &le) {
		t.Fatalf("a second lock: %v, want a LockedError", err)
	}
	must(cli.Revoke(ctx, lease.ID))
	waitFor(t, "the lock going with its lease", func() bool { return !held(a) && !held(b) })
	if err := b.Update(func(tx store.Tx) error { return store.LockState(tx, "alpha", other) }); err != nil {
		t.Fatalf("a lock after the holder's lease ended: %v", err)
	}
}

// TestCompaction: the store compacts etcd's history on its schedule and
// removes blobs nothing refers to, while the event log keeps its horizon
// and a watch from it resumes.
func TestCompaction(t *testing.T) {
	cli := testClient(t)
	dir := t.TempDir()
	s := open(t, cli, dir, etcdstore.Config{CompactInterval: 20 * time.Millisecond, EventHistory: 50})
	defer s.Close()
	ctx := context.Background()
	prefix := "/storetest" + dir + "/"
	must(cli.Put(ctx, prefix+"c/orphan/000000", "left by a commit that never came"))
	for i := range 20 {
		if err := s.Update(func(tx store.Tx) error { _, err := tx.Put("Record", "r", []byte(strconv.Itoa(i))); return err }); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "compaction", func() bool {
		_, err := cli.Get(ctx, prefix+"d/rev", clientv3.WithRev(2))
		return errors.Is(err, rpctypes.ErrCompacted)
	})
	waitFor(t, "the orphan blob's removal", func() bool { return must(cli.Get(ctx, prefix+"c/orphan/000000")).Count == 0 })
	if err := s.Update(func(tx store.Tx) error { _, err := tx.Put("Record", "r", []byte("last")); return err }); err != nil {
		t.Fatal(err)
	}
	_ = s.View(func(tx store.Tx) error {
		n := 0
		if err := tx.Events(tx.EventsFrom(), func(store.Change) error { n++; return nil }); err != nil || n != 21 || tx.EventsFrom() != 0 {
			t.Errorf("events after compaction: %d from %d (%v), want all 21 from 0", n, tx.EventsFrom(), err)
		}
		return nil
	})
}

// TestLargeCommit: a commit of more writes than one etcd transaction
// takes is seen whole, by its replica's hooks and another's, and the
// store takes commits after it.
func TestLargeCommit(t *testing.T) {
	cli := testClient(t)
	dir := t.TempDir()
	a, b := open(t, cli, dir, etcdstore.Config{}), open(t, cli, dir, etcdstore.Config{})
	defer a.Close()
	defer b.Close()
	var mu sync.Mutex
	var commits []int
	b.OnCommit(func(cs []store.Change) { mu.Lock(); commits = append(commits, len(cs)); mu.Unlock() })
	const machines = 300
	err := a.Update(func(tx store.Tx) error {
		for i := range machines {
			id := fmt.Sprintf("sim-%03d", i)
			if _, err := tx.PutObject(schema.KindMachine, id, storetest.Machine(id, "alpha", "w", schema.RoleWorker, "small", i)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Update(func(tx store.Tx) error { _, err := tx.Put("Record", "after", []byte("1")); return err }); err != nil {
		t.Fatalf("a commit after the large one: %v", err)
	}
	waitFor(t, "the other replica's hooks", func() bool { mu.Lock(); defer mu.Unlock(); return len(commits) == 2 })
	if commits[0] != machines {
		t.Errorf("the other replica's hooks got the large commit as %v changes, want %d at once", commits, machines)
	}
	c := open(t, cli, dir, etcdstore.Config{})
	defer c.Close()
	_ = c.View(func(tx store.Tx) error {
		var n int
		_ = tx.TenantObjects("alpha", schema.KindMachine, func(store.Resource) error { n++; return nil })
		if n != machines || tx.ResourceVersion() != machines+1 {
			t.Errorf("a new replica reads %d machines of alpha at revision %d, want %d at %d", n, tx.ResourceVersion(), machines, machines+1)
		}
		return nil
	})
}
