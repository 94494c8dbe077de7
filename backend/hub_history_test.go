package backend

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
	"github.com/rezuscloud/rezuscloud/store/storetest"
)

// TestHubHistoryBytes bounds the ring by the size of its frames: the
// oldest events go first, the newest stays however large it is, and a
// hub with no store answers ErrGone for what it dropped.
func TestHubHistoryBytes(t *testing.T) {
	one := machineChange(t, 1, "m1")
	ev, err := newEvent(one)
	if err != nil {
		t.Fatal(err)
	}
	size := len(ev.frame)
	h := NewHub(HubOptions{History: 100, HistoryBytes: 3*size + size/2})
	for rv := uint64(1); rv <= 6; rv++ {
		h.Publish([]store.Change{machineChange(t, rv, "m1")})
	}
	if h.n != 3 || h.bytes > 3*size+size/2 {
		t.Fatalf("ring holds %d events, %d bytes; want 3 of about %d bytes", h.n, h.bytes, size)
	}
	if _, _, err := h.Subscribe(SubscribeOptions{Resume: true, After: 2}); !errors.Is(err, store.ErrGone) {
		t.Errorf("resume after 2 with 4..6 kept: %v, want store.ErrGone", err)
	}
	_, replay, err := h.Subscribe(SubscribeOptions{Resume: true, After: 3})
	if err != nil || !cmp.Equal([]uint64{4, 5, 6}, rvsOf(replay)) {
		t.Errorf("resume after 3: %v, %v; want 4..6", err, rvsOf(replay))
	}
	big := storetest.Machine("m2", "alpha", "workers", schema.RoleWorker, "small", 7)
	big.Meta().Labels = map[string]string{"pad": strings.Repeat("x", 10*size)}
	h.Publish([]store.Change{change(t, store.Added, schema.KindMachine, "m2", 7, big)})
	_, replay, err = h.Subscribe(SubscribeOptions{Resume: true, After: 6})
	if err != nil || !cmp.Equal([]uint64{7}, rvsOf(replay)) || h.n != 1 {
		t.Errorf("after an event over the budget: resume after 6 %v, %v, ring of %d; want just 7", err, rvsOf(replay), h.n)
	}
}

// TestHubResumeFromStoreLog resumes watches from before the ring (it
// holds two events here) out of the store's event log: exactly the
// matching events up to the latest, then live ones with no gap or repeat;
// ErrGone only before the log.
func TestHubResumeFromStoreLog(t *testing.T) {
	s, err := bolt.Open(filepath.Join(t.TempDir(), "data"), &bolt.Options{EventHistory: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := NewHub(HubOptions{History: 2})
	if err := h.Attach(s); err != nil {
		t.Fatal(err)
	}
	var m1 []uint64
	for i := range 30 {
		rv := putObj(t, s, schema.KindMachine, fmt.Sprint("m", i%3), storetest.Machine(fmt.Sprint("m", i%3), "alpha", "w", schema.RoleWorker, "small", i))
		if i%3 == 1 && rv > 16 {
			m1 = append(m1, rv)
		}
		if i%5 == 0 {
			putObj(t, s, applied, "x", map[string]any{"n": i}) // internal: never replayed
		}
	}
	// 36 versions, of which the log keeps the last 20, 17..36.
	if _, _, err := h.Subscribe(SubscribeOptions{Resume: true, After: 15}); !errors.Is(err, store.ErrGone) {
		t.Fatalf("resume after 15 with the log at 17..36: %v, want store.ErrGone", err)
	}
	only := func(ev *Event) bool { return ev.Name == "m1" }
	sub, replay, err := h.Subscribe(SubscribeOptions{Resume: true, After: 16, Match: only})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	want := m1
	if diff := cmp.Diff(want, rvsOf(replay)); diff != "" {
		t.Fatalf("m1 after 16 from the log (-want +got):\n%s", diff)
	}
	rv := putObj(t, s, schema.KindMachine, "m1", storetest.Machine("m1", "alpha", "w", schema.RoleWorker, "small", 99))
	if b := <-sub.Events(); !cmp.Equal([]uint64{rv}, rvsOf(b)) {
		t.Fatalf("live after the replay: %v, want %d", rvsOf(b), rv)
	}
}

// TestHubResumeFromLogWhileWriting resumes from the store's log while a
// store commits: every subscriber sees each change after its start once,
// in order. Run it with -race.
func TestHubResumeFromLogWhileWriting(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "data"))
	defer s.Close()
	h := NewHub(HubOptions{History: 3, Buffer: 1 << 12})
	if err := h.Attach(s); err != nil {
		t.Fatal(err)
	}
	const writes = 300
	put := func(i int) {
		putObj(t, s, schema.KindMachine, fmt.Sprint("m", i%10), storetest.Machine(fmt.Sprint("m", i%10), "alpha", "w", schema.RoleWorker, fmt.Sprint(i), i))
	}
	for i := range 50 {
		put(i)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 50; i < writes; i++ {
			put(i)
		}
	}()
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			after := h.Last() - 20 // behind the ring of 3
			sub, replay, err := h.Subscribe(SubscribeOptions{Resume: true, After: after})
			if err != nil {
				t.Error(err)
				return
			}
			defer sub.Close()
			next := after + 1
			for _, ev := range replay {
				if ev.ResourceVersion != next {
					t.Errorf("client %d: replayed %d, want %d", c, ev.ResourceVersion, next)
					return
				}
				next++
			}
			for next <= writes {
				select {
				case b := <-sub.Events():
					for _, ev := range b {
						if ev.ResourceVersion != next {
							t.Errorf("client %d: got %d, want %d", c, ev.ResourceVersion, next)
							return
						}
						next++
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
