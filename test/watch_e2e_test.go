package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// sseEvent is one event a watch delivered.
type sseEvent struct {
	RV   uint64
	Type string
	Name string
	UID  string
}

func (e sseEvent) String() string { return fmt.Sprintf("%d %s %s", e.RV, e.Type, e.Name) }

// watchEnvelope is the JSON of one watch event.
type watchEnvelope struct {
	Type   string `json:"type"`
	Object struct {
		Metadata struct {
			Name            string `json:"name"`
			UID             string `json:"uid"`
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	} `json:"object"`
}

func (w watchEnvelope) event() (sseEvent, error) {
	rv, err := strconv.ParseUint(w.Object.Metadata.ResourceVersion, 10, 64)
	if err != nil {
		return sseEvent{}, fmt.Errorf("resourceVersion %q: %v", w.Object.Metadata.ResourceVersion, err)
	}
	return sseEvent{RV: rv, Type: w.Type, Name: w.Object.Metadata.Name, UID: w.Object.Metadata.UID}, nil
}

// sseFollower follows an SSE watch the way a browser's EventSource does:
// when the stream ends or the server is gone it connects again, sending the
// last `id:` it saw as Last-Event-ID.
type sseFollower struct {
	t   *testing.T
	url string

	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	events   []sseEvent // data events, in the order received
	initial  uint64     // the id that ended the first connection's current state
	initialN int        // how many events came before it
	lastID   string
	connects int
	resumes  []string // the Last-Event-ID of every connection that sent one
	held     bool
	problems []string
}

// hold keeps the follower from connecting again once its stream ends, until
// it is released; meanwhile the server's changes can only reach it through
// Last-Event-ID.
func (f *sseFollower) hold(b bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = b
}

// followSSE starts following url (a full URL) in the background.
func followSSE(t *testing.T, url string) *sseFollower {
	ctx, cancel := context.WithCancel(context.Background())
	f := &sseFollower{t: t, url: url, cancel: cancel, done: make(chan struct{})}
	go f.run(ctx)
	t.Cleanup(f.stop)
	return f
}

func (f *sseFollower) stop() {
	f.cancel()
	<-f.done
}

func (f *sseFollower) problem(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.problems = append(f.problems, fmt.Sprintf(format, args...))
}

func (f *sseFollower) run(ctx context.Context) {
	defer close(f.done)
	for ctx.Err() == nil {
		f.mu.Lock()
		held := f.held
		f.mu.Unlock()
		if !held {
			f.connect(ctx)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// connect runs one connection until it ends.
func (f *sseFollower) connect(ctx context.Context) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
	if err != nil {
		f.problem("request: %v", err)
		return
	}
	req.Header.Set("Accept", "text/event-stream")
	f.mu.Lock()
	last := f.lastID
	first := f.connects == 0
	f.mu.Unlock()
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return // the server is down; try again
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		f.problem("connect with Last-Event-ID %q: %d %s", last, resp.StatusCode, b)
		return
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		f.problem("Content-Type %q", ct)
	}
	f.mu.Lock()
	f.connects++
	if last != "" {
		f.resumes = append(f.resumes, last)
	}
	f.mu.Unlock()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var id, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			f.dispatch(id, data, first)
			id, data = "", ""
		case strings.HasPrefix(line, ":"), strings.HasPrefix(line, "retry: "):
		case strings.HasPrefix(line, "id: "):
			id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			if data != "" {
				f.problem("an event with two data lines")
			}
			data = strings.TrimPrefix(line, "data: ")
		default:
			f.problem("unexpected SSE line %q", line)
		}
	}
}

// dispatch handles one SSE block.
func (f *sseFollower) dispatch(id, data string, first bool) {
	if id == "" && data == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if id != "" {
		f.lastID = id
	}
	if data == "" {
		if first && f.initial == 0 {
			f.initial, _ = strconv.ParseUint(id, 10, 64)
			f.initialN = len(f.events)
		}
		return
	}
	var env watchEnvelope
	if err := json.Unmarshal([]byte(data), &env); err != nil {
		f.problems = append(f.problems, fmt.Sprintf("event data: %v: %.200s", err, data))
		return
	}
	ev, err := env.event()
	if err != nil {
		f.problems = append(f.problems, err.Error())
		return
	}
	if strconv.FormatUint(ev.RV, 10) != id {
		f.problems = append(f.problems, fmt.Sprintf("event %s has id %q", ev, id))
	}
	f.events = append(f.events, ev)
}

// snapshot returns the events so far, the initial bookmark and the number
// of connections made.
func (f *sseFollower) snapshot() ([]sseEvent, uint64, int, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sseEvent(nil), f.events...), f.initial, f.connects, append([]string(nil), f.problems...)
}

// currentState returns the events of the first connection's current
// state, those before its bookmark, and the bookmark; live events may
// follow at once.
func (f *sseFollower) currentState() ([]sseEvent, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sseEvent(nil), f.events[:f.initialN]...), f.initial
}

// state replays events into the objects they leave: name -> last event.
func sseState(events []sseEvent) map[string]sseEvent {
	out := map[string]sseEvent{}
	for _, e := range events {
		if e.Type == "DELETED" {
			delete(out, e.Name)
			continue
		}
		out[e.Name] = e
	}
	return out
}

// machineVersions lists /api/v1/machines as name -> resourceVersion.
func (s *e2eServer) machineVersions() map[string]uint64 {
	s.t.Helper()
	out := map[string]uint64{}
	for _, m := range s.machines("") {
		rv, err := strconv.ParseUint(m.Metadata.ResourceVersion, 10, 64)
		if err != nil {
			s.t.Fatalf("machine %s: resourceVersion %q", m.Metadata.Name, m.Metadata.ResourceVersion)
		}
		out[m.Metadata.Name] = rv
	}
	return out
}

// watchJSONUntil reads the chunked-JSON watch at path until an event of
// resourceVersion last or later, and returns its events.
func (s *e2eServer) watchJSONUntil(path string, last uint64) []sseEvent {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		s.t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	var out []sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var env watchEnvelope
		if err := json.Unmarshal(sc.Bytes(), &env); err != nil {
			s.t.Fatalf("watch line: %v: %.200s", err, sc.Bytes())
		}
		if env.Type == "BOOKMARK" {
			continue
		}
		ev, err := env.event()
		if err != nil {
			s.t.Fatal(err)
		}
		out = append(out, ev)
		if ev.RV >= last {
			return out
		}
	}
	s.t.Fatalf("watch %s ended (%v) before resourceVersion %d; read %d events", path, sc.Err(), last, len(out))
	return nil
}

// TestWatchSSEAcrossRestart follows /api/v1/machines/events as Server-Sent
// Events through a scale-up, a SIGTERM, a push while the server is down
// (one machine fewer in production, one more in staging) and a start on
// the same data dir. The follower reconnects with Last-Event-ID, as a
// browser does, and must see every machine event exactly once and in
// order: ids strictly increasing, the same sequence a fresh watch from the
// same resourceVersion replays from the store's history, and the machines
// they leave equal to the API's list, resourceVersions included.
func TestWatchSSEAcrossRestart(t *testing.T) {
	e := newE2E(t, e2eOptions{})
	s := e.srv
	before := s.machineVersions()

	f := followSSE(t, s.URL()+"/api/v1/machines/events")
	s.WaitFor("the watch's current state", func() bool {
		_, initial, _, _ := f.snapshot()
		return initial != 0
	})
	evs, initial := f.currentState()
	if got := sseState(evs); len(got) != len(before) {
		t.Fatalf("the watch started with %d machines, the API lists %d", len(got), len(before))
	}
	for _, ev := range evs {
		if ev.Type != "ADDED" || ev.RV > initial {
			t.Fatalf("current state event %s after bookmark %d: want ADDED at or below it", ev, initial)
		}
	}

	e.setCount("production", "workers", 3)
	up := e.push("Scale production workers to 3")
	s.waitApplied(up)
	grown := s.machineVersions()
	added := e2eKeys(sseDiff(grown, before))
	if len(added) != 1 {
		t.Fatalf("machines added by the scale-up: %v, want one", added)
	}

	// The follower stays away across the restart and until the next commit
	// has been applied: it gets that commit's events only by resuming.
	f.hold(true)
	s.Stop()
	e.setCount("production", "workers", 2)
	e.setCount("staging", "workers", 2)
	down := e.push("Production back to 2 workers, staging to 2 while the server is down")
	s.Start()
	s.waitApplied(down)
	_, _, connected, _ := f.snapshot()
	f.hold(false)
	after := s.machineVersions()
	removed := e2eKeys(sseDiff(grown, after))
	addedLater := e2eKeys(sseDiff(after, grown))
	if len(removed) != 1 || len(addedLater) != 1 {
		t.Fatalf("after the restart: removed %v and added %v, want one each", removed, addedLater)
	}

	// The follower has caught up when the machines its events leave are
	// the API's list, resourceVersions included. Machines keep changing
	// (their observed stage), so compare the two until they agree.
	var final map[string]uint64
	s.WaitFor("the follower to catch up with the API", func() bool {
		final = s.machineVersions()
		evs, _, _, _ := f.snapshot()
		st := sseState(evs)
		if len(st) != len(final) {
			return false
		}
		for name, rv := range final {
			if st[name].RV != rv {
				return false
			}
		}
		return true
	})
	f.stop()
	evs, initial, connects, problems := f.snapshot()
	for _, p := range problems {
		t.Errorf("follower: %s", p)
	}
	if connects != connected+1 {
		t.Errorf("the follower connected %d times, %d before the restart: want one reconnect after it", connects, connected)
	}
	f.mu.Lock()
	resumes := append([]string(nil), f.resumes...)
	f.mu.Unlock()
	if len(resumes) != connects-1 {
		t.Errorf("Last-Event-ID sent by %d of %d reconnects", len(resumes), connects-1)
	}
	if len(resumes) > 0 {
		resumed, _ := strconv.ParseUint(resumes[len(resumes)-1], 10, 64)
		replayed := 0
		for _, ev := range evs {
			if ev.RV > resumed && (ev.Name == removed[0] || ev.Name == addedLater[0]) {
				replayed++
			}
		}
		if replayed == 0 {
			t.Errorf("no event of the machines the restart's commit removed and added came after Last-Event-ID %d", resumed)
		}
	}

	t.Run("ids strictly increase", func(t *testing.T) {
		for i := 1; i < len(evs); i++ {
			if evs[i].RV <= evs[i-1].RV {
				t.Errorf("event %d (%s) follows %s: duplicated or out of order", i, evs[i], evs[i-1])
			}
		}
	})
	t.Run("no gaps", func(t *testing.T) {
		var live []sseEvent
		for _, ev := range evs {
			if ev.RV > initial {
				live = append(live, ev)
			}
		}
		if len(live) == 0 {
			t.Fatal("the follower saw no events after its current state")
		}
		want := s.watchJSONUntil(fmt.Sprintf("/api/v1/machines?watch=true&resourceVersion=%d", initial), live[len(live)-1].RV)
		if got, want := sseLines(live), sseLines(want); got != want {
			t.Errorf("the follower's events differ from the history replayed from %d:\nfollower:\n%s\nhistory:\n%s", initial, got, want)
		}
		t.Logf("%d events after the current state, over %d connections", len(live), connects)
	})
	t.Run("every added and removed machine exactly once", func(t *testing.T) {
		count := func(typ, name string) int {
			n := 0
			for _, ev := range evs {
				if ev.Type == typ && ev.Name == name {
					n++
				}
			}
			return n
		}
		for _, name := range append(added, addedLater...) {
			if n := count("ADDED", name); n != 1 {
				t.Errorf("machine %s: %d ADDED events, want 1", name, n)
			}
		}
		for _, name := range removed {
			if n := count("DELETED", name); n != 1 {
				t.Errorf("machine %s: %d DELETED events, want 1", name, n)
			}
		}
		got := e2eKeys(sseState(evs))
		if want := e2eKeys(final); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("machines the events leave %v, the API lists %v", got, want)
		}
	})
}

// sseDiff returns the keys of a that b lacks.
func sseDiff(a, b map[string]uint64) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		if _, ok := b[k]; !ok {
			out[k] = true
		}
	}
	return out
}

// sseLines formats events one per line, in resourceVersion order.
func sseLines(evs []sseEvent) string {
	lines := make([]string, len(evs))
	for i, ev := range evs {
		lines[i] = ev.String()
	}
	if !sort.SliceIsSorted(evs, func(i, j int) bool { return evs[i].RV < evs[j].RV }) {
		lines = append(lines, "(not in resourceVersion order)")
	}
	return strings.Join(lines, "\n")
}
