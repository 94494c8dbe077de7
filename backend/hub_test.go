package backend

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/rezuscloud/rezuscloud/schema"
)

// change builds a Change of kind/name at rv with obj as JSON; an API
// object gets rv into its metadata and its header, as the store writes it.
func change(t testing.TB, typ EventType, kind, name string, rv uint64, obj any) Change {
	t.Helper()
	r := Resource{Kind: kind, Name: name, ResourceVersion: rv}
	var err error
	if o, ok := obj.(schema.Object); ok {
		o.Meta().ResourceVersion = fmt.Sprint(rv)
		r.Object, r.head, err = encodeObject(o)
	} else {
		r.Object, err = json.Marshal(obj)
	}
	if err != nil {
		t.Fatal(err)
	}
	return Change{Type: typ, Resource: r}
}

func machineChange(t testing.TB, rv uint64, id string) Change {
	return change(t, Added, schema.KindMachine, id, rv, machineObj(id, "alpha", "workers", schema.RoleWorker, "small", int(rv)))
}

func rvsOf(evs []*Event) []uint64 {
	out := []uint64{}
	for _, ev := range evs {
		out = append(out, ev.ResourceVersion)
	}
	return out
}

func TestHubEncodesOnce(t *testing.T) {
	h := NewHub(HubOptions{})
	sub, _, err := h.Subscribe(SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := machineObj("sim-1", "alpha", "workers", schema.RoleWorker, "small", 1)
	m.Spec.Tenant, m.Spec.NodeGroup = "beta", "cp" // the labels decide, not the spec
	h.Publish([]Change{
		change(t, Added, schema.KindTenant, "alpha", 1, tenantObj("alpha", "prod", 1)),
		change(t, Added, applied, "alpha", 2, map[string]any{"tenant": "alpha"}),
		change(t, Modified, schema.KindMachine, "sim-1", 3, m),
		change(t, Added, schema.KindNodeGroup, "alpha/cp", 4, nodeGroupObj("alpha", "cp", schema.RoleControlPlane, 1, 4)),
	})
	batch := <-sub.Events()
	if len(batch) != 3 {
		t.Fatalf("batch of %d events, want 3 (the internal kind left out)", len(batch))
	}
	for _, ev := range batch {
		sse, line := ev.SSE(), ev.JSON()
		// One encoding: the JSON line is part of the SSE frame.
		if &sse[len(sse)-len(line)-1] != &line[0] {
			t.Errorf("%s: JSON line is not a slice of the SSE frame", ev.Name)
		}
		wantFrame := fmt.Sprintf("id: %d\ndata: %s\n", ev.ResourceVersion, line)
		if string(sse) != wantFrame {
			t.Errorf("SSE frame %q, want %q", sse, wantFrame)
		}
		var e struct {
			Type   EventType
			Object struct{ Metadata schema.ObjectMeta }
		}
		if err := json.Unmarshal(line, &e); err != nil || e.Type != ev.Type || e.Object.Metadata.ResourceVersion != fmt.Sprint(ev.ResourceVersion) {
			t.Errorf("line %s: %v, type %s resourceVersion %q", line, err, e.Type, e.Object.Metadata.ResourceVersion)
		}
	}
	got := []string{}
	for _, ev := range batch {
		got = append(got, fmt.Sprintf("%s %s %s tenant=%s ng=%s", ev.Type, ev.Kind, ev.Name, ev.Tenant, ev.NodeGroup))
	}
	want := []string{
		"ADDED Tenant alpha tenant=alpha ng=",
		"MODIFIED Machine sim-1 tenant=alpha ng=workers",
		"ADDED NodeGroup alpha/cp tenant=alpha ng=cp",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if h.Last() != 4 {
		t.Errorf("Last %d, want 4", h.Last())
	}
	// A change that cannot be served is dropped, not sent half-made.
	h.Publish([]Change{{Type: Added, Resource: Resource{Kind: schema.KindTenant, Name: "bad", ResourceVersion: 5, Object: []byte(`[1,2]`)}}})
	select {
	case b := <-sub.Events():
		t.Errorf("unservable change published: %v", rvsOf(b))
	default:
	}
}

func TestHubResume(t *testing.T) {
	h := NewHub(HubOptions{History: 5})
	for rv := uint64(1); rv <= 8; rv++ {
		h.Publish([]Change{machineChange(t, rv, fmt.Sprint("m", rv%3))})
	}
	if _, _, err := h.Subscribe(SubscribeOptions{Resume: true, After: 2}); !errors.Is(err, ErrGone) {
		t.Fatalf("resume after 2 with 4..8 kept: %v, want ErrGone", err)
	}
	sub, replay, err := h.Subscribe(SubscribeOptions{Resume: true, After: 3})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint64{4, 5, 6, 7, 8}, rvsOf(replay)); diff != "" {
		t.Errorf("replay after 3 (-want +got):\n%s", diff)
	}
	only1 := func(ev *Event) bool { return ev.Name == "m1" }
	_, replay, _ = h.Subscribe(SubscribeOptions{Resume: true, After: 4, Match: only1})
	if diff := cmp.Diff([]uint64{7}, rvsOf(replay)); diff != "" {
		t.Errorf("filtered replay after 4 (-want +got):\n%s", diff)
	}
	_, replay, _ = h.Subscribe(SubscribeOptions{Resume: true, After: 8})
	_, fresh, _ := h.Subscribe(SubscribeOptions{})
	if len(replay) != 0 || len(fresh) != 0 {
		t.Errorf("replay after the latest: %v; without resume: %v; want none", rvsOf(replay), rvsOf(fresh))
	}
	h.Publish([]Change{machineChange(t, 9, "m0")})
	if b := <-sub.Events(); rvsOf(b)[0] != 9 {
		t.Errorf("live after replay: %v, want 9", rvsOf(b))
	}
	// Internal changes do not use up the history.
	for rv := uint64(10); rv < 30; rv++ {
		h.Publish([]Change{change(t, Added, applied, "x", rv, map[string]any{"n": rv})})
	}
	if _, replay, err := h.Subscribe(SubscribeOptions{Resume: true, After: 4}); err != nil || len(replay) != 5 {
		t.Errorf("resume after 4: %v, %v; want 5..9", err, rvsOf(replay))
	}
	if h.Last() != 29 {
		t.Errorf("Last %d, want 29", h.Last())
	}
	// Old or repeated changes are not published again.
	h.Publish([]Change{machineChange(t, 9, "m0")})
	select {
	case b := <-sub.Events():
		t.Errorf("old change published again: %v", rvsOf(b))
	default:
	}
}

func TestHubSlowSubscriber(t *testing.T) {
	h := NewHub(HubOptions{Buffer: 2})
	var ends []error
	slow, _, _ := h.Subscribe(SubscribeOptions{OnEnd: func(err error) { ends = append(ends, err) }})
	fast, _, _ := h.Subscribe(SubscribeOptions{})
	other, _, _ := h.Subscribe(SubscribeOptions{Match: func(ev *Event) bool { return ev.Name == "never" }})
	start := time.Now()
	for rv := uint64(1); rv <= 1000; rv++ {
		h.Publish([]Change{machineChange(t, rv, "m")})
		if b := <-fast.Events(); b[0].ResourceVersion != rv {
			t.Fatalf("fast subscriber got %d, want %d", b[0].ResourceVersion, rv)
		}
	}
	t.Logf("1000 publishes in %v", time.Since(start))
	select {
	case <-slow.Done():
	default:
		t.Fatal("slow subscriber still subscribed")
	}
	if !errors.Is(slow.Err(), ErrSlowSubscriber) || len(ends) != 1 || !errors.Is(ends[0], ErrSlowSubscriber) {
		t.Errorf("slow subscriber: Err %v, OnEnd calls %v; want ErrSlowSubscriber once", slow.Err(), ends)
	}
	// Its buffer keeps what it had; the subscriber that matched nothing
	// was never woken and stays.
	if slow.Pending() != 2 || other.Pending() != 0 {
		t.Errorf("pending: slow %d, other %d; want 2 and 0", slow.Pending(), other.Pending())
	}
	if h.CutOffs() != 1 || h.Subscribers() != 2 {
		t.Errorf("%d cut off, %d subscribers; want 1 and 2", h.CutOffs(), h.Subscribers())
	}
}

func TestHubClose(t *testing.T) {
	h := NewHub(HubOptions{})
	var ended []error
	a, _, _ := h.Subscribe(SubscribeOptions{OnEnd: func(err error) { ended = append(ended, err) }})
	b, _, _ := h.Subscribe(SubscribeOptions{OnEnd: func(err error) { ended = append(ended, err) }})
	b.Close()
	b.Close()
	if b.Err() != nil || h.Subscribers() != 1 {
		t.Errorf("after Close: Err %v, %d subscribers; want nil and 1", b.Err(), h.Subscribers())
	}
	h.Close()
	if !errors.Is(a.Err(), ErrHubClosed) || len(ended) != 1 || !errors.Is(ended[0], ErrHubClosed) {
		t.Errorf("hub closed: Err %v, OnEnd calls %v; want ErrHubClosed once", a.Err(), ended)
	}
	if _, _, err := h.Subscribe(SubscribeOptions{}); !errors.Is(err, ErrHubClosed) {
		t.Errorf("Subscribe after Close: %v, want ErrHubClosed", err)
	}
	h.Publish([]Change{machineChange(t, 1, "m")})
	if h.Subscribers() != 0 {
		t.Errorf("%d subscribers after Close", h.Subscribers())
	}
}

// TestHubConcurrent subscribes, resumes and leaves while a store commits:
// every subscriber sees the changes after its start exactly once, in
// order. Run it with -race.
func TestHubConcurrent(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "data"))
	defer s.Close()
	h := NewHub(HubOptions{Buffer: 1 << 12})
	if err := h.Attach(s); err != nil {
		t.Fatal(err)
	}
	const writes = 300
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range writes {
			putObj(t, s, schema.KindMachine, fmt.Sprint("m", i%10), machineObj(fmt.Sprint("m", i%10), "alpha", "w", schema.RoleWorker, fmt.Sprint(i), i))
		}
	}()
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			after := h.Last()
			sub, replay, err := h.Subscribe(SubscribeOptions{Resume: true, After: after})
			if err != nil {
				t.Error(err)
				return
			}
			defer sub.Close()
			next := after + 1
			check := func(ev *Event) bool {
				if ev.ResourceVersion != next {
					t.Errorf("client %d: got %d, want %d", c, ev.ResourceVersion, next)
					return false
				}
				next++
				return true
			}
			for _, ev := range replay {
				if !check(ev) {
					return
				}
			}
			for next <= writes {
				select {
				case b := <-sub.Events():
					for _, ev := range b {
						if !check(ev) {
							return
						}
					}
				case <-time.After(5 * time.Second):
					t.Errorf("client %d: stuck at %d", c, next)
					return
				}
			}
		}()
	}
	wg.Wait()
	<-done
}

// TestHubAttach resumes from the store's event log, so that a
// resourceVersion from before the store was reopened resumes exactly.
func TestHubAttach(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s, err := Open(dir, &StoreOptions{EventHistory: 6})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		putObj(t, s, schema.KindMachine, fmt.Sprint("m", i), machineObj(fmt.Sprint("m", i), "alpha", "w", schema.RoleWorker, "small", i))
		if i%3 == 0 {
			putObj(t, s, applied, fmt.Sprint("m", i), map[string]any{"n": i})
		}
	}
	deleteObj(t, s, schema.KindMachine, "m9")
	s.Close()

	s, err = Open(dir, &StoreOptions{EventHistory: 6})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := NewHub(HubOptions{})
	if err := h.Attach(s); err != nil {
		t.Fatal(err)
	}
	// Versions 1..15 were given out; the log keeps 10..15, of which 10
	// and 14 are internal.
	if h.Last() != 15 {
		t.Fatalf("Last %d, want 15", h.Last())
	}
	if _, _, err := h.Subscribe(SubscribeOptions{Resume: true, After: 8}); !errors.Is(err, ErrGone) {
		t.Errorf("resume after 8: %v, want ErrGone", err)
	}
	sub, replay, err := h.Subscribe(SubscribeOptions{Resume: true, After: 9})
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, ev := range replay {
		got = append(got, fmt.Sprintf("%d %s %s", ev.ResourceVersion, ev.Type, ev.Name))
	}
	want := []string{"11 ADDED m7", "12 ADDED m8", "13 ADDED m9", "15 DELETED m9"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("replay after 9 (-want +got):\n%s", diff)
	}
	// Commits after Attach come through the hook, once.
	rv := putObj(t, s, schema.KindMachine, "m10", machineObj("m10", "alpha", "w", schema.RoleWorker, "small", 10))
	if b := <-sub.Events(); len(b) != 1 || b[0].ResourceVersion != rv {
		t.Fatalf("live: %v, want %d", rvsOf(b), rv)
	}
	s.View(func(tx *Tx) error {
		return tx.Events(14, func(c Change) error {
			h.Publish([]Change{c})
			return nil
		})
	})
	select {
	case b := <-sub.Events():
		t.Errorf("a change published twice: %v", rvsOf(b))
	default:
	}
}

func TestStoreEventLog(t *testing.T) {
	const record = "Record" // an internal kind: stored as it is given
	dir := filepath.Join(t.TempDir(), "data")
	s, err := Open(dir, &StoreOptions{EventHistory: 5})
	if err != nil {
		t.Fatal(err)
	}
	logged := func(s *Store) (uint64, []string) {
		var from uint64
		var got []string
		err := s.View(func(tx *Tx) error {
			from = tx.EventsFrom()
			return tx.Events(0, func(c Change) error {
				got = append(got, fmt.Sprintf("%d %s %s/%s %s", c.Resource.ResourceVersion, c.Type, c.Resource.Kind, c.Resource.Name, c.Resource.Object))
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		return from, got
	}
	if from, got := logged(s); from != 0 || len(got) != 0 {
		t.Fatalf("new store: from %d, %v", from, got)
	}
	err = s.Update(func(tx *Tx) error {
		for i := range 4 {
			if _, err := tx.Put(record, fmt.Sprint("t", i), []byte(fmt.Sprintf(`{"n":%d}`, i))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A rolled back transaction logs nothing.
	s.Update(func(tx *Tx) error {
		tx.Put(record, "gone", []byte(`{}`))
		return errors.New("roll back")
	})
	putObj(t, s, record, "t0", map[string]int{"n": 10})
	deleteObj(t, s, record, "t1")
	putObj(t, s, "AppliedTenant", "t2", map[string]int{"n": 2})
	from, got := logged(s)
	want := []string{
		`4 ADDED Record/t3 {"n":3}`,
		`5 MODIFIED Record/t0 {"n":10}`,
		`6 DELETED Record/t1 {"n":1}`,
		`7 ADDED AppliedTenant/t2 {"n":2}`,
	}
	if from != 2 || !cmp.Equal(want[0:], got[1:]) || len(got) != 5 || got[0] != `3 ADDED Record/t2 {"n":2}` {
		t.Fatalf("log: from %d\n%s\nwant from 2, 3..7", from, bytes.Join(toBytes(got), []byte("\n")))
	}
	s.Close()

	// Reopened with a longer history, the log keeps what it has.
	s, err = Open(dir, &StoreOptions{EventHistory: 100})
	if err != nil {
		t.Fatal(err)
	}
	if f, g := logged(s); f != 2 || len(g) != 5 {
		t.Errorf("reopened: from %d, %d changes; want 2 and 5", f, len(g))
	}
	s.Close()

	// A file whose resources changed without a log (as an older build
	// wrote it) starts its log at the current version.
	db, err := bolt.Open(filepath.Join(dir, DBFile), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketEvents); err != nil {
			return err
		}
		seq := tx.Bucket(bucketMeta).Sequence()
		if err := tx.Bucket(bucketMeta).SetSequence(seq + 3); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Delete(keyEventsFrom)
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if f, g := logged(s); f != 10 || len(g) != 0 {
		t.Errorf("older file: from %d, %v; want 10 and none", f, g)
	}
	rv := putObj(t, s, record, "t9", map[string]int{"n": 9})
	if f, g := logged(s); f != 10 || len(g) != 1 || rv != 11 {
		t.Errorf("after a change: from %d, %v, rv %d", f, g, rv)
	}
}

func toBytes(ss []string) [][]byte {
	var out [][]byte
	for _, s := range ss {
		out = append(out, []byte(s))
	}
	return out
}

// BenchmarkHubPublish publishes one machine change to 1,000 subscribers
// that each take it.
func BenchmarkHubPublish(b *testing.B) {
	h := NewHub(HubOptions{})
	const subs = 1000
	var wg sync.WaitGroup
	for range subs {
		sub, _, _ := h.Subscribe(SubscribeOptions{Match: func(ev *Event) bool { return ev.Tenant == "alpha" }})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-sub.Events():
				case <-sub.Done():
					return
				}
			}
		}()
	}
	c := machineChange(b, 1, "m")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.Resource.ResourceVersion = uint64(i + 1)
		h.Publish([]Change{c})
	}
	b.StopTimer()
	if h.CutOffs() != 0 {
		b.Logf("%d subscribers cut off", h.CutOffs())
	}
	h.Close()
	wg.Wait()
}

// A hub publishes the store's committed changes of served kinds; a
// subscriber that resumes from a resourceVersion gets the kept events
// after it, then live ones.
func ExampleHub() {
	dir, _ := os.MkdirTemp("", "rezuscloud-example")
	defer os.RemoveAll(dir)
	clock := func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
	store, err := Open(filepath.Join(dir, "data"), &StoreOptions{Now: clock})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	hub := NewHub(HubOptions{})
	if err := hub.Attach(store); err != nil {
		log.Fatal(err)
	}
	prod := &schema.Provider{Kind: schema.KindProvider, Metadata: schema.ObjectMeta{Name: "sim", UID: "u-1", CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}
	put := func(p *schema.Provider) {
		store.Update(func(tx *Tx) error { _, err := tx.PutObject(schema.KindProvider, "sim", p); return err })
	}
	put(prod)
	store.Update(func(tx *Tx) error {
		_, err := tx.Put("AppliedTenant", "prod", []byte(`{"revision":"abc"}`))
		return err
	})

	sub, replay, err := hub.Subscribe(SubscribeOptions{Resume: true, After: 0})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	for _, ev := range replay {
		fmt.Printf("%s", ev.JSON())
	}
	prod.Spec.Class = "sim"
	put(prod)
	for _, ev := range <-sub.Events() {
		fmt.Printf("%s", ev.SSE())
	}
	// Output:
	// {"type":"ADDED","object":{"apiVersion":"","kind":"Provider","metadata":{"name":"sim","uid":"u-1","resourceVersion":"1","createdAt":"2026-01-02T03:04:05Z","updatedAt":"2026-01-02T03:04:05Z"},"spec":{"class":"","source":"","builtin":false,"mappings":null}}}
	// id: 3
	// data: {"type":"MODIFIED","object":{"apiVersion":"","kind":"Provider","metadata":{"name":"sim","uid":"u-1","resourceVersion":"3","createdAt":"2026-01-02T03:04:05Z","updatedAt":"2026-01-02T03:04:05Z"},"spec":{"class":"sim","source":"","builtin":false,"mappings":null}}}
}
