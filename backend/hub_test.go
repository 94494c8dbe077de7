package backend

import (
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

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
	"github.com/rezuscloud/rezuscloud/store/storetest"
)

// change builds a Change of kind/name at rv with obj as JSON; an API
// object gets rv into its metadata and its header, as the store writes it.
func change(t testing.TB, typ store.EventType, kind, name string, rv uint64, obj any) store.Change {
	t.Helper()
	r := store.Resource{Kind: kind, Name: name, ResourceVersion: rv}
	var err error
	if o, ok := obj.(schema.Object); ok {
		o.Meta().ResourceVersion = fmt.Sprint(rv)
		var v []byte
		if v, err = store.ObjectValue(rv, o); err == nil {
			r, err = store.DecodeValue(kind, name, v)
		}
	} else {
		r.Object, err = json.Marshal(obj)
	}
	if err != nil {
		t.Fatal(err)
	}
	return store.Change{Type: typ, Resource: r}
}

func machineChange(t testing.TB, rv uint64, id string) store.Change {
	return change(t, store.Added, schema.KindMachine, id, rv, storetest.Machine(id, "alpha", "workers", schema.RoleWorker, "small", int(rv)))
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
	m := storetest.Machine("sim-1", "alpha", "workers", schema.RoleWorker, "small", 1)
	m.Spec.Tenant, m.Spec.NodeGroup = "beta", "cp" // the labels decide, not the spec
	h.Publish([]store.Change{
		change(t, store.Added, schema.KindTenant, "alpha", 1, storetest.Tenant("alpha", "prod", 1)),
		change(t, store.Added, applied, "alpha", 2, map[string]any{"tenant": "alpha"}),
		change(t, store.Modified, schema.KindMachine, "sim-1", 3, m),
		change(t, store.Added, schema.KindNodeGroup, "alpha/cp", 4, storetest.NodeGroup("alpha", "cp", schema.RoleControlPlane, 1, 4)),
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
			Type   store.EventType
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
	h.Publish([]store.Change{{Type: store.Added, Resource: store.Resource{Kind: schema.KindTenant, Name: "bad", ResourceVersion: 5, Object: []byte(`[1,2]`)}}})
	select {
	case b := <-sub.Events():
		t.Errorf("unservable change published: %v", rvsOf(b))
	default:
	}
}

func TestHubResume(t *testing.T) {
	h := NewHub(HubOptions{History: 5})
	for rv := uint64(1); rv <= 8; rv++ {
		h.Publish([]store.Change{machineChange(t, rv, fmt.Sprint("m", rv%3))})
	}
	if _, _, err := h.Subscribe(SubscribeOptions{Resume: true, After: 2}); !errors.Is(err, store.ErrGone) {
		t.Fatalf("resume after 2 with 4..8 kept: %v, want store.ErrGone", err)
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
	h.Publish([]store.Change{machineChange(t, 9, "m0")})
	if b := <-sub.Events(); rvsOf(b)[0] != 9 {
		t.Errorf("live after replay: %v, want 9", rvsOf(b))
	}
	// Internal changes do not use up the history.
	for rv := uint64(10); rv < 30; rv++ {
		h.Publish([]store.Change{change(t, store.Added, applied, "x", rv, map[string]any{"n": rv})})
	}
	if _, replay, err := h.Subscribe(SubscribeOptions{Resume: true, After: 4}); err != nil || len(replay) != 5 {
		t.Errorf("resume after 4: %v, %v; want 5..9", err, rvsOf(replay))
	}
	if h.Last() != 29 {
		t.Errorf("Last %d, want 29", h.Last())
	}
	// Old or repeated changes are not published again.
	h.Publish([]store.Change{machineChange(t, 9, "m0")})
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
		h.Publish([]store.Change{machineChange(t, rv, "m")})
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
	h.Publish([]store.Change{machineChange(t, 1, "m")})
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
			putObj(t, s, schema.KindMachine, fmt.Sprint("m", i%10), storetest.Machine(fmt.Sprint("m", i%10), "alpha", "w", schema.RoleWorker, fmt.Sprint(i), i))
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
	s, err := bolt.Open(dir, &bolt.Options{EventHistory: 6})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		putObj(t, s, schema.KindMachine, fmt.Sprint("m", i), storetest.Machine(fmt.Sprint("m", i), "alpha", "w", schema.RoleWorker, "small", i))
		if i%3 == 0 {
			putObj(t, s, applied, fmt.Sprint("m", i), map[string]any{"n": i})
		}
	}
	deleteObj(t, s, schema.KindMachine, "m9")
	s.Close()

	s, err = bolt.Open(dir, &bolt.Options{EventHistory: 6})
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
	if _, _, err := h.Subscribe(SubscribeOptions{Resume: true, After: 8}); !errors.Is(err, store.ErrGone) {
		t.Errorf("resume after 8: %v, want store.ErrGone", err)
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
	rv := putObj(t, s, schema.KindMachine, "m10", storetest.Machine("m10", "alpha", "w", schema.RoleWorker, "small", 10))
	if b := <-sub.Events(); len(b) != 1 || b[0].ResourceVersion != rv {
		t.Fatalf("live: %v, want %d", rvsOf(b), rv)
	}
	s.View(func(tx store.Tx) error {
		return tx.Events(14, func(c store.Change) error {
			h.Publish([]store.Change{c})
			return nil
		})
	})
	select {
	case b := <-sub.Events():
		t.Errorf("a change published twice: %v", rvsOf(b))
	default:
	}
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
		h.Publish([]store.Change{c})
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
	st, err := bolt.Open(filepath.Join(dir, "data"), &bolt.Options{Now: clock})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	hub := NewHub(HubOptions{})
	if err := hub.Attach(st); err != nil {
		log.Fatal(err)
	}
	prod := &schema.Provider{Kind: schema.KindProvider, Metadata: schema.ObjectMeta{Name: "sim", UID: "u-1", CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}
	put := func(p *schema.Provider) {
		st.Update(func(tx store.Tx) error { _, err := tx.PutObject(schema.KindProvider, "sim", p); return err })
	}
	put(prod)
	st.Update(func(tx store.Tx) error {
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
