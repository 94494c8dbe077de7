package backend

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/storetest"
)

// item is one thing a watch stream delivered: an event, a bookmark, or
// for SSE a frame without data (an id-only frame, a heartbeat comment or
// the retry field).
type item struct {
	Type string // ADDED, MODIFIED, DELETED, BOOKMARK; "" for a frame without data
	RV   uint64 // the object's metadata.resourceVersion
	Name string
	Obj  json.RawMessage
	// Annotations of the object's metadata (bookmarks carry one).
	Annotations map[string]string

	// SSE only.
	ID      string
	HasID   bool
	Comment string
	Retry   string
	Raw     string // the frame as sent

	At time.Time
}

// watcher reads one watch response on its own goroutine.
type watcher struct {
	resp  *http.Response
	sse   bool
	items chan item
	done  chan struct{}
	err   error // set before done closes: nil for a clean end
	stop  context.CancelFunc
	// idsOnly makes an SSE watcher skip decoding data, for tests that
	// time large events: items have only ID, RV, Raw and At.
	idsOnly bool
}

// idFrame is an SSE frame read without decoding its data: an event
// frame gets type EVENT and its id as RV.
func idFrame(lines []string) item {
	it := item{At: time.Now()}
	for _, l := range lines {
		if id, ok := strings.CutPrefix(l, "id: "); ok {
			it.ID, it.HasID = id, true
			it.RV, _ = strconv.ParseUint(id, 10, 64)
		}
		if strings.HasPrefix(l, "data: ") {
			it.Type = "EVENT"
		}
	}
	it.Raw = strings.Join(lines, "\n")
	return it
}

// openWatch starts a watch of path and checks it answers 200.
func openWatch(t *testing.T, ts *testServer, path string, header map[string]string) *watcher {
	t.Helper()
	w, code, body := tryWatch(t, ts, path, header)
	if code != http.StatusOK {
		t.Fatalf("watch %s: %d %s", path, code, body)
	}
	return w
}

// tryWatch starts a watch and returns the status and, when it is not 200,
// the body.
func tryWatch(t *testing.T, ts *testServer, path string, header map[string]string) (*watcher, int, []byte) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	hr, err := http.NewRequestWithContext(ctx, "GET", ts.URL()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	idsOnly := false
	for k, v := range header {
		switch k {
		case "token":
			hr.SetBasicAuth(v, ts.tokens[v])
			continue
		case "idsOnly":
			idsOnly = true
			continue
		}
		hr.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return nil, resp.StatusCode, b
	}
	w := &watcher{
		resp:  resp,
		sse:   strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"),
		items: make(chan item, 100000),
		done:  make(chan struct{}),
		stop:  cancel,

		idsOnly: idsOnly,
	}
	t.Cleanup(w.close)
	go w.read()
	return w, resp.StatusCode, nil
}

func (w *watcher) close() {
	w.stop()
	<-w.done
	w.resp.Body.Close()
}

func (w *watcher) read() {
	defer close(w.done)
	r := bufio.NewReaderSize(w.resp.Body, 1<<20)
	if !w.sse {
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				if !errors.Is(err, io.EOF) || len(line) > 0 {
					w.err = err
				}
				return
			}
			it, err := parseLine(line)
			if err != nil {
				w.err = err
				return
			}
			w.items <- it
		}
	}
	var frame []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if !errors.Is(err, io.EOF) || len(line) > 0 || len(frame) > 0 {
				w.err = err
			}
			return
		}
		line = strings.TrimSuffix(line, "\n")
		if line != "" {
			frame = append(frame, line)
			continue
		}
		if w.idsOnly {
			w.items <- idFrame(frame)
			frame = nil
			continue
		}
		it, err := parseFrame(frame)
		if err != nil {
			w.err = err
			return
		}
		frame = nil
		w.items <- it
	}
}

func parseLine(line []byte) (item, error) {
	var e struct {
		Type   string          `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	dec := json.NewDecoder(strings.NewReader(string(line)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return item{}, fmt.Errorf("line %q: %w", line, err)
	}
	it := item{Type: e.Type, Obj: e.Object, At: time.Now()}
	var o struct {
		Metadata struct {
			Name            string            `json:"name"`
			ResourceVersion string            `json:"resourceVersion"`
			Annotations     map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(e.Object, &o); err != nil {
		return item{}, fmt.Errorf("line %q: object: %w", line, err)
	}
	rv, err := strconv.ParseUint(o.Metadata.ResourceVersion, 10, 64)
	if err != nil {
		return item{}, fmt.Errorf("line %q: resourceVersion: %w", line, err)
	}
	it.RV, it.Name, it.Annotations = rv, o.Metadata.Name, o.Metadata.Annotations
	return it, nil
}

func parseFrame(lines []string) (item, error) {
	var it item
	var data []string
	for _, l := range lines {
		field, value, _ := strings.Cut(l, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "":
			it.Comment = value
		case "id":
			it.ID, it.HasID = value, true
		case "data":
			data = append(data, value)
		case "retry":
			it.Retry = value
		default:
			return it, fmt.Errorf("frame %q: unexpected field %q", lines, field)
		}
	}
	it.Raw = strings.Join(lines, "\n")
	if len(data) > 0 {
		if len(data) > 1 {
			return it, fmt.Errorf("frame %q: %d data lines, want one", lines, len(data))
		}
		ev, err := parseLine([]byte(data[0] + "\n"))
		if err != nil {
			return it, err
		}
		ev.ID, ev.HasID, ev.Comment, ev.Retry, ev.Raw = it.ID, it.HasID, it.Comment, it.Retry, it.Raw
		it = ev
	}
	it.At = time.Now()
	return it, nil
}

// next returns the next item, failing the test after timeout.
func (w *watcher) next(t *testing.T, timeout time.Duration) item {
	t.Helper()
	select {
	case it := <-w.items:
		return it
	case <-w.done:
		select {
		case it := <-w.items:
			return it
		default:
		}
		t.Fatalf("watch ended (err %v) while an item was expected", w.err)
	case <-time.After(timeout):
		t.Fatalf("no item within %v", timeout)
	}
	return item{}
}

// nextEvent skips frames without data and heartbeat bookmarks.
func (w *watcher) nextEvent(t *testing.T, timeout time.Duration) item {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		it := w.next(t, time.Until(deadline))
		if it.Type != "" && it.Type != "BOOKMARK" {
			return it
		}
	}
}

// events reads n events.
func (w *watcher) events(t *testing.T, n int, timeout time.Duration) []item {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var out []item
	for len(out) < n {
		out = append(out, w.nextEvent(t, time.Until(deadline)))
	}
	return out
}

// quiet checks that no event arrives within d.
func (w *watcher) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case it := <-w.items:
			if it.Type != "" && it.Type != "BOOKMARK" {
				t.Fatalf("unexpected event %s %s rv %d", it.Type, it.Name, it.RV)
			}
		case <-deadline:
			return
		}
	}
}

// initial reads the current state a watch without resourceVersion starts
// with, up to and including the bookmark (or SSE id frame) that ends it,
// and returns the events and the bookmark's resourceVersion.
func (w *watcher) initial(t *testing.T) ([]item, uint64) {
	t.Helper()
	var evs []item
	for {
		it := w.next(t, 5*time.Second)
		switch {
		case it.Retry != "":
		case it.Type == "BOOKMARK":
			if it.Annotations[AnnotationInitialEventsEnd] != "true" {
				t.Fatalf("bookmark %+v before the end of the current state lacks %s", it, AnnotationInitialEventsEnd)
			}
			return evs, it.RV
		case it.Type == "" && it.HasID:
			rv, err := strconv.ParseUint(it.ID, 10, 64)
			if err != nil {
				t.Fatalf("id frame %q: %v", it.Raw, err)
			}
			return evs, rv
		case it.Type == "ADDED":
			evs = append(evs, it)
		default:
			t.Fatalf("unexpected item %+v in the current state", it)
		}
	}
}

func itemNames(its []item) []string {
	out := []string{}
	for _, it := range its {
		out = append(out, it.Type+" "+it.Name)
	}
	return out
}

// putObj stores obj and returns its resourceVersion.
func putObj(t testing.TB, s store.Store, kind, key string, obj any) uint64 {
	t.Helper()
	var rv uint64
	if err := s.Update(func(tx store.Tx) (err error) { rv, err = txPut(tx, kind, key, obj); return err }); err != nil {
		t.Fatal(err)
	}
	return rv
}

func deleteObj(t testing.TB, s store.Store, kind, key string) uint64 {
	t.Helper()
	var rv uint64
	if err := s.Update(func(tx store.Tx) (err error) { rv, err = tx.Delete(kind, key); return err }); err != nil {
		t.Fatal(err)
	}
	return rv
}

func TestWatchChunked(t *testing.T) {
	ts := startServer(t, Config{}, false)
	sd := seedResources(t, ts.Store())
	w := openWatch(t, ts, "/api/v1/tenants?watch=true", nil)
	if ct := w.resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	evs, rv := w.initial(t)
	if diff := cmp.Diff([]string{"ADDED alpha", "ADDED beta"}, itemNames(evs)); diff != "" {
		t.Fatalf("current state (-want +got):\n%s", diff)
	}
	// The objects are served as GET serves them.
	for _, ev := range evs {
		if got, want := string(ev.Obj), sd.served(t, schema.KindTenant, ev.Name); got != want {
			t.Errorf("ADDED %s:\n got %s\nwant %s", ev.Name, got, want)
		}
	}
	var latest uint64
	ts.Store().View(func(tx store.Tx) error { latest = tx.ResourceVersion(); return nil })
	if rv != latest {
		t.Errorf("current state ends at resourceVersion %d, want the store's %d", rv, latest)
	}

	// Changes arrive in order, one event each, internal kinds never.
	gamma := storetest.Tenant("gamma", "dev", 20)
	rvAdd := putObj(t, ts.Store(), schema.KindTenant, "gamma", gamma)
	putObj(t, ts.Store(), applied, "gamma", map[string]any{"metadata": map[string]any{"name": "gamma"}})
	putObj(t, ts.Store(), schema.KindTenant, "gamma", gamma) // same bytes: no event
	gamma.Metadata.Labels["env"] = "prod"
	rvMod := putObj(t, ts.Store(), schema.KindTenant, "gamma", gamma)
	putObj(t, ts.Store(), schema.KindMachine, "sim-g0", storetest.Machine("sim-g0", "gamma", "cp", schema.RoleControlPlane, "small", 21))
	rvDel := deleteObj(t, ts.Store(), schema.KindTenant, "gamma")
	got := w.events(t, 3, 5*time.Second)
	if diff := cmp.Diff([]string{"ADDED gamma", "MODIFIED gamma", "DELETED gamma"}, itemNames(got)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	if rvs := []uint64{got[0].RV, got[1].RV, got[2].RV}; !slices.Equal(rvs, []uint64{rvAdd, rvMod, rvDel}) {
		t.Errorf("resourceVersions %v, want %v (strictly increasing, as the store gave them)", rvs, []uint64{rvAdd, rvMod, rvDel})
	}
	var mod schema.Tenant
	if err := json.Unmarshal(got[1].Obj, &mod); err != nil || mod.Metadata.Labels["env"] != "prod" {
		t.Errorf("MODIFIED object: %v, labels %v, want env=prod", err, mod.Metadata.Labels)
	}
	// DELETED carries the object as it was, with the delete's version.
	var del schema.Tenant
	if err := json.Unmarshal(got[2].Obj, &del); err != nil || del.Spec.ControlPlaneEndpoint != gamma.Spec.ControlPlaneEndpoint {
		t.Errorf("DELETED object: %v, %s", err, got[2].Obj)
	}
	w.quiet(t, 100*time.Millisecond)
}

func TestWatchSSE(t *testing.T) {
	ts := startServer(t, Config{}, false)
	seedResources(t, ts.Store())
	for _, tc := range []struct {
		name   string
		path   string
		header map[string]string
	}{
		{"sse=true", "/api/v1/machines/events?sse=true", nil},
		{"Accept", "/api/v1/machines/events", map[string]string{"Accept": "text/event-stream"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := openWatch(t, ts, tc.path, tc.header)
			if ct := w.resp.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Fatalf("Content-Type %q, want text/event-stream", ct)
			}
			if cc := w.resp.Header.Get("Cache-Control"); cc != "no-cache" {
				t.Errorf("Cache-Control %q, want no-cache", cc)
			}
			first := w.next(t, 5*time.Second)
			if first.Raw != "retry: 2000" {
				t.Errorf("first frame %q, want the retry field", first.Raw)
			}
			evs, end := w.initial(t)
			if diff := cmp.Diff([]string{"ADDED sim-a0", "ADDED sim-a1", "ADDED sim-a2", "ADDED sim-b0"}, itemNames(evs)); diff != "" {
				t.Fatalf("current state (-want +got):\n%s", diff)
			}
			for _, ev := range evs {
				// One id line (the resourceVersion) and one data line; no
				// event field, so EventSource.onmessage gets them all.
				want := fmt.Sprintf("id: %d\ndata: {\"type\":\"ADDED\",\"object\":%s}", ev.RV, ev.Obj)
				if ev.Raw != want {
					t.Errorf("frame:\n got %q\nwant %q", ev.Raw, want)
				}
				if ev.RV > end {
					t.Errorf("ADDED %s at %d is past the end of the current state, %d", ev.Name, ev.RV, end)
				}
			}
			rv := putObj(t, ts.Store(), schema.KindMachine, "sim-b1", storetest.Machine("sim-b1", "beta", "cp", schema.RoleControlPlane, "small", 30))
			ev := w.nextEvent(t, 5*time.Second)
			if ev.Type != "ADDED" || ev.Name != "sim-b1" || ev.ID != fmt.Sprint(rv) || ev.RV != rv {
				t.Errorf("event %+v, want ADDED sim-b1 with id %d", ev, rv)
			}
			deleteObj(t, ts.Store(), schema.KindMachine, "sim-b1")
			if ev := w.nextEvent(t, 5*time.Second); ev.Type != "DELETED" || ev.Name != "sim-b1" {
				t.Errorf("event %+v, want DELETED sim-b1", ev)
			}
		})
	}
}

func TestWatchScopes(t *testing.T) {
	ts := startServer(t, Config{}, false)
	seedResources(t, ts.Store())
	gen := 0
	for _, tc := range []struct {
		path    string
		initial []string
		// changes made after the current state, and the events the watch
		// must see of them
		want []string
	}{
		{
			"/api/v1/tenants/alpha/events",
			[]string{"Tenant alpha", "NodeGroup alpha/cp", "NodeGroup alpha/workers", "ConfigPatch alpha/ntp", "Machine sim-a0", "Machine sim-a1", "Machine sim-a2"},
			[]string{"ADDED Machine sim-x1", "ADDED NodeGroup alpha/big", "MODIFIED Tenant alpha", "DELETED Machine sim-x1"},
		},
		{
			"/api/v1/tenants/alpha/node-groups/workers/events",
			[]string{"NodeGroup alpha/workers", "Machine sim-a1", "Machine sim-a2"},
			[]string{"ADDED Machine sim-x1", "DELETED Machine sim-x1"},
		},
		{
			"/api/v1/tenants/alpha/node-groups?watch=true",
			[]string{"NodeGroup alpha/cp", "NodeGroup alpha/workers"},
			[]string{"ADDED NodeGroup alpha/big"},
		},
		{
			"/api/v1/tenants/alpha/machines?watch=true",
			[]string{"Machine sim-a0", "Machine sim-a1", "Machine sim-a2"},
			[]string{"ADDED Machine sim-x1", "DELETED Machine sim-x1"},
		},
		{
			"/api/v1/tenants/beta/patches?watch=true",
			[]string{"ConfigPatch beta/ntp"},
			[]string{"ADDED ConfigPatch beta/more"},
		},
		{
			"/api/v1/machines/events",
			[]string{"Machine sim-a0", "Machine sim-a1", "Machine sim-a2", "Machine sim-b0"},
			[]string{"ADDED Machine sim-x1", "ADDED Machine sim-y1", "ADDED Machine sim-z1", "DELETED Machine sim-x1"},
		},
		{
			"/api/v1/providers/sim/events",
			[]string{"Provider sim"},
			[]string{"MODIFIED Provider sim"},
		},
		{
			"/api/v1/providers?watch=true",
			[]string{"Provider sim"},
			[]string{"ADDED Provider metal", "MODIFIED Provider sim"},
		},
		{
			"/api/v1/commits/events",
			[]string{"Commit " + revOld, "Commit " + revMid, "Commit " + keyDir, "Commit " + revNew, "Commit " + revTwin},
			[]string{"ADDED Commit " + revNext},
		},
	} {
		gen++
		t.Run(tc.path, func(t *testing.T) {
			w := openWatch(t, ts, tc.path, nil)
			evs, _ := w.initial(t)
			var got []string
			for _, ev := range evs {
				got = append(got, kindOf(t, ev)+" "+keyOf(t, ev))
			}
			if diff := cmp.Diff(tc.initial, got); diff != "" {
				t.Fatalf("current state (-want +got):\n%s", diff)
			}
			changeEverything(t, ts.Store(), gen)
			got = nil
			for _, ev := range w.events(t, len(tc.want), 5*time.Second) {
				got = append(got, ev.Type+" "+kindOf(t, ev)+" "+keyOf(t, ev))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("events (-want +got):\n%s", diff)
			}
			w.quiet(t, 100*time.Millisecond)
			undoEverything(t, ts.Store())
		})
	}
}

const revNext = "fedcba9876543210fedcba9876543210fedcba98"

// changeEverything changes something of every kind and scope, in this
// order, and undoEverything takes back what it added. Each gen changes
// the tenant and the provider anew.
func changeEverything(t *testing.T, s store.Store, gen int) {
	putObj(t, s, schema.KindMachine, "sim-x1", storetest.Machine("sim-x1", "alpha", "workers", schema.RoleWorker, "large", 40))
	putObj(t, s, schema.KindMachine, "sim-y1", storetest.Machine("sim-y1", "beta", "cp", schema.RoleControlPlane, "small", 41))
	putObj(t, s, schema.KindMachine, "sim-z1", storetest.Machine("sim-z1", "alphabet", "workers", schema.RoleWorker, "small", 41))
	putObj(t, s, schema.KindNodeGroup, "alpha/big", storetest.NodeGroup("alpha", "big", schema.RoleWorker, 5, 42))
	putObj(t, s, schema.KindNodeGroup, "alphabet/workers", storetest.NodeGroup("alphabet", "workers", schema.RoleWorker, 5, 42))
	putObj(t, s, schema.KindConfigPatch, "beta/more", storetest.Patch("beta", "more", 43))
	putObj(t, s, applied, "alpha", map[string]any{"metadata": map[string]any{"name": "alpha"}, "changed": true})
	putObj(t, s, schema.KindTenant, "alpha", storetest.Tenant("alpha", fmt.Sprint("staging", gen), 1))
	putObj(t, s, schema.KindTenant, "alphabet", storetest.Tenant("alphabet", "dev", 44))
	putObj(t, s, schema.KindProvider, "metal", &schema.Provider{APIVersion: schema.APIVersion, Kind: schema.KindProvider, Metadata: storetest.Meta("metal", 45, nil)})
	putObj(t, s, schema.KindProvider, "sim", &schema.Provider{APIVersion: schema.APIVersion, Kind: schema.KindProvider, Metadata: storetest.Meta("sim", 46, nil),
		Spec: schema.ProviderSpec{Version: fmt.Sprint(gen)}})
	putObj(t, s, schema.KindCommit, revNext, storetest.Commit(revNext, storetest.SeedTime.Add(5*time.Hour), schema.CommitSucceeded))
	deleteObj(t, s, schema.KindMachine, "sim-x1")
}

func undoEverything(t *testing.T, s store.Store) {
	for _, k := range []struct{ kind, key string }{
		{schema.KindMachine, "sim-y1"}, {schema.KindMachine, "sim-z1"},
		{schema.KindNodeGroup, "alpha/big"}, {schema.KindNodeGroup, "alphabet/workers"},
		{schema.KindConfigPatch, "beta/more"}, {schema.KindTenant, "alphabet"},
		{schema.KindProvider, "metal"}, {schema.KindCommit, revNext},
	} {
		deleteObj(t, s, k.kind, k.key)
	}
}

func kindOf(t *testing.T, it item) string {
	t.Helper()
	var o struct{ Kind string }
	if err := json.Unmarshal(it.Obj, &o); err != nil {
		t.Fatal(err)
	}
	return o.Kind
}

// keyOf returns the store key of an event's object: TENANT/NAME for node
// groups and patches.
func keyOf(t *testing.T, it item) string {
	t.Helper()
	var o struct {
		Kind     string
		Metadata schema.ObjectMeta
	}
	if err := json.Unmarshal(it.Obj, &o); err != nil {
		t.Fatal(err)
	}
	if o.Kind == schema.KindNodeGroup || o.Kind == schema.KindConfigPatch {
		return o.Metadata.Labels[schema.LabelTenant] + "/" + o.Metadata.Name
	}
	return o.Metadata.Name
}

func TestWatchLabelSelector(t *testing.T) {
	ts := startServer(t, Config{}, false)
	seedResources(t, ts.Store())
	w := openWatch(t, ts, "/api/v1/machines?watch=true&labelSelector=shape+in+(large,huge),rezuscloud.io/tenant=alpha", nil)
	evs, _ := w.initial(t)
	if diff := cmp.Diff([]string{"ADDED sim-a1"}, itemNames(evs)); diff != "" {
		t.Fatalf("current state (-want +got):\n%s", diff)
	}
	for i, shape := range []string{"small", "huge", "large", "medium", "huge"} {
		tenant := "alpha"
		if i == 4 {
			tenant = "beta"
		}
		id := fmt.Sprintf("sim-l%d", i)
		putObj(t, ts.Store(), schema.KindMachine, id, storetest.Machine(id, tenant, "workers", schema.RoleWorker, shape, 50+i))
	}
	// sim-a1 leaves the selection: its MODIFIED does not match any more.
	putObj(t, ts.Store(), schema.KindMachine, "sim-a1", storetest.Machine("sim-a1", "alpha", "workers", schema.RoleWorker, "small", 9))
	got := w.events(t, 2, 5*time.Second)
	if diff := cmp.Diff([]string{"ADDED sim-l1", "ADDED sim-l2"}, itemNames(got)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	w.quiet(t, 100*time.Millisecond)

	_, code, body := tryWatch(t, ts, "/api/v1/machines/events?labelSelector=a%20in%20b", nil)
	wantRefused(t, code, body, http.StatusBadRequest, "labelSelector")
}

// wantRefused checks a refused watch: its code, the error shape and the
// message.
func wantRefused(t *testing.T, code int, body []byte, wantCode int, inMessage string) {
	t.Helper()
	if code != wantCode {
		t.Fatalf("status %d, want %d: %s", code, wantCode, body)
	}
	wantAPIError(t, body, wantCode, api.ReasonFor(wantCode), inMessage)
}

func TestWatchBadRequests(t *testing.T) {
	ts := startServer(t, Config{EventHistory: 10}, false)
	for i := range 30 {
		putObj(t, ts.Store(), schema.KindMachine, fmt.Sprintf("m%d", i), storetest.Machine(fmt.Sprintf("m%d", i), "alpha", "w", schema.RoleWorker, "small", i))
	}
	for _, tc := range []struct {
		path   string
		header map[string]string
		code   int
		msg    string
	}{
		{"/api/v1/machines/events?resourceVersion=5", nil, http.StatusGone, "resourceVersion 5"},
		{"/api/v1/machines/events?resourceVersion=0", nil, http.StatusGone, "without resourceVersion"},
		{"/api/v1/machines/events", map[string]string{"Last-Event-ID": "19"}, http.StatusGone, "history, which starts after 20"},
		{"/api/v1/machines/events?resourceVersion=31", nil, http.StatusGone, "newer than the server's latest, 30"},
		{"/api/v1/machines/events?resourceVersion=abc", nil, http.StatusBadRequest, `resourceVersion "abc"`},
		{"/api/v1/machines/events?resourceVersion=-1", nil, http.StatusBadRequest, `resourceVersion "-1"`},
		{"/api/v1/machines/events", map[string]string{"Last-Event-ID": "x"}, http.StatusBadRequest, `Last-Event-ID "x"`},
		{"/api/v1/machines?watch=maybe", nil, http.StatusBadRequest, `watch "maybe"`},
		{"/api/v1/machines/events?sse=maybe", nil, http.StatusBadRequest, `sse "maybe"`},
	} {
		_, code, body := tryWatch(t, ts, tc.path, tc.header)
		wantRefused(t, code, body, tc.code, tc.msg)
	}
	// The oldest version still kept resumes.
	w := openWatch(t, ts, "/api/v1/machines/events?resourceVersion=20", nil)
	got := w.events(t, 10, 5*time.Second)
	if got[0].RV != 21 || got[9].RV != 30 {
		t.Errorf("resumed from 20: %d..%d, want 21..30", got[0].RV, got[9].RV)
	}
	// ?watch=false is a list.
	l := getList(t, ts, "/api/v1/machines?watch=false&limit=2")
	if l.Total != 30 || len(l.Items) != 2 {
		t.Errorf("?watch=false: %d items of %d, want a list of 2 of 30", len(l.Items), l.Total)
	}
	// A HEAD answers with the headers and ends.
	resp := ts.doResp(t, req{method: "HEAD", path: "/api/v1/machines/events"})
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("HEAD: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	// A machine named "events" cannot be fetched, but other names can.
	if code, body := ts.do(t, req{method: "GET", path: "/api/v1/machines/m3"}); code != http.StatusOK {
		t.Errorf("GET m3: %d %s", code, body)
	}
}

// TestWatchResume resumes chunked and SSE watches, by resourceVersion and
// by Last-Event-ID, many times while a writer keeps changing machines:
// every change arrives exactly once, in order.
func TestWatchResume(t *testing.T) {
	ts := startServer(t, Config{}, false)
	seedResources(t, ts.Store())
	var start uint64
	ts.Store().View(func(tx store.Tx) error { start = tx.ResourceVersion(); return nil })

	const writes = 400
	var mu sync.Mutex
	var want []uint64 // resourceVersions of the changes of alpha's machines
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for i := range writes {
			id := fmt.Sprintf("sim-r%d", i%7)
			tenant := []string{"alpha", "beta"}[i%2]
			var rv uint64
			err := ts.Store().Update(func(tx store.Tx) (err error) {
				if i%5 == 4 {
					if rv, err = tx.Delete(schema.KindMachine, id); errors.Is(err, store.ErrNotFound) {
						err = nil
					}
					return err
				}
				m := storetest.Machine(id, tenant, "workers", schema.RoleWorker, fmt.Sprint(i), 60+i)
				rv, err = txPut(tx, schema.KindMachine, id, m)
				if err == nil {
					_, err = txPut(tx, applied, id, m)
				}
				return err
			})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			if rv != 0 {
				want = append(want, rv)
			}
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()

	// All written and all received: the writer is done and the client
	// has its last change.
	complete := func(last uint64) bool {
		select {
		case <-writerDone:
		default:
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		return len(want) > 0 && last >= want[len(want)-1]
	}
	t.Run("clients", func(t *testing.T) {
		for _, mode := range []string{"resourceVersion", "Last-Event-ID"} {
			t.Run(mode, func(t *testing.T) {
				t.Parallel()
				var got []uint64
				last := start
				for round := 0; !complete(last); round++ {
					path := "/api/v1/machines/events?sse=true"
					var header map[string]string
					if mode == "resourceVersion" {
						path = fmt.Sprintf("/api/v1/machines?watch=true&resourceVersion=%d", last)
					} else {
						// The URL keeps the first version, as EventSource
						// does; Last-Event-ID wins.
						path += fmt.Sprintf("&resourceVersion=%d", start)
						header = map[string]string{"Last-Event-ID": fmt.Sprint(last)}
					}
					w := openWatch(t, ts, path, header)
					// Take a few events, then drop the connection.
					for n := 0; n < 1+round%9 && !complete(last); {
						var it item
						select {
						case it = <-w.items:
						case <-w.done:
							t.Fatalf("round %d: watch ended: %v", round, w.err)
						case <-time.After(50 * time.Millisecond):
							continue
						}
						if it.Type == "" || it.Type == "BOOKMARK" {
							continue
						}
						if it.RV <= last {
							t.Fatalf("round %d: event at %d repeats (resumed after %d)", round, it.RV, last)
						}
						if mode == "Last-Event-ID" && it.ID != fmt.Sprint(it.RV) {
							t.Fatalf("SSE id %q for resourceVersion %d", it.ID, it.RV)
						}
						got = append(got, it.RV)
						last = it.RV
						n++
					}
					w.close()
				}
				checkExactlyOnce(t, got, &mu, &want)
			})
		}
	})
	<-writerDone
}

func checkExactlyOnce(t *testing.T, got []uint64, mu *sync.Mutex, want *[]uint64) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(*want, got); diff != "" {
		t.Fatalf("resumed events (-want +got):\n%s", diff)
	}
	if len(got) < 300 {
		t.Fatalf("only %d events", len(got))
	}
}

// TestWatchSlowClient stops reading one watch while another keeps up:
// the slow one is cut off and its stream ends, the other keeps getting
// every event quickly.
func TestWatchSlowClient(t *testing.T) {
	ts := startServer(t, Config{WatchBuffer: 4}, false)
	putObj(t, ts.Store(), schema.KindTenant, "alpha", storetest.Tenant("alpha", "prod", 1))

	// The slow client has a small receive buffer and reads nothing.
	d := net.Dialer{Control: func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		return errors.Join(err, serr)
	}}
	slow, err := d.Dial("tcp", ts.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "GET /api/v1/machines/events?sse=true HTTP/1.1\r\nHost: %s\r\n\r\n", ts.Addr())

	fast := openWatch(t, ts, "/api/v1/machines/events?sse=true", map[string]string{"idsOnly": "yes"})
	fast.next(t, 5*time.Second) // retry
	fast.next(t, 5*time.Second) // end of the current state
	waitFor(t, "two subscribers", func() bool { return ts.Hub().Subscribers() == 2 })

	// Each machine carries 32 KiB of padding, so that the slow client's
	// socket buffers fill.
	pad := strings.Repeat("x", 32<<10)
	const n = 400
	var latencies []time.Duration
	cutAt := -1
	for i := range n {
		m := storetest.Machine(fmt.Sprintf("sim-%d", i), "alpha", "workers", schema.RoleWorker, "small", i)
		m.Metadata.Annotations = map[string]string{"pad": pad}
		rv := putObj(t, ts.Store(), schema.KindMachine, m.Metadata.Name, m)
		// Timed from the end of the commit (the event is published just
		// before it), so that the disk's fsync does not count.
		committed := time.Now()
		ev := fast.nextEvent(t, 5*time.Second)
		if ev.RV != rv {
			t.Fatalf("fast client got %q, want the event of %d", ev.Raw, rv)
		}
		latencies = append(latencies, max(0, ev.At.Sub(committed)))
		if cutAt < 0 && ts.Hub().Subscribers() == 1 {
			cutAt = i
		}
	}
	if cutAt < 0 || ts.Hub().CutOffs() != 1 {
		t.Fatalf("slow client not cut off after %d events (%d cut off, %d subscribers)", n, ts.Hub().CutOffs(), ts.Hub().Subscribers())
	}
	slices.Sort(latencies)
	p99, worst := latencies[len(latencies)*99/100], latencies[len(latencies)-1]
	t.Logf("slow client cut off after event %d; fast client latency p50 %v p99 %v max %v", cutAt, latencies[len(latencies)/2], p99, worst)
	// A publisher held up by the slow client would stall the fast one for
	// seconds; the bound leaves room for a loaded machine. Delivery
	// latency itself is measured by bench/watch.
	if p99 > time.Second {
		t.Errorf("fast client p99 latency %v while another client stalled, want under 1s", p99)
	}

	// The slow client's stream has ended: draining it reaches the end
	// without every event.
	slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(slow)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("slow client's stream did not end: %v after %d bytes", err, len(b))
	}
	if got := strings.Count(string(b), "\ndata: "); got >= n {
		t.Errorf("slow client read %d events of %d; want its stream cut short", got, n)
	}
	if !strings.Contains(ts.logs.String(), "path=/api/v1/machines/events") {
		t.Errorf("the cut off watch was not logged")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWatchRestart resumes a watch across a server restart on the same
// data dir: exactly the missed events arrive, also those from before the
// restart.
func TestWatchRestart(t *testing.T) {
	dir := t.TempDir() + "/data"
	ts := startServer(t, Config{DataDir: dir}, false)
	seedResources(t, ts.Store())
	w := openWatch(t, ts, "/api/v1/tenants/alpha/events", nil)
	_, last := w.initial(t)
	var want []string
	for i := range 3 {
		putObj(t, ts.Store(), schema.KindMachine, fmt.Sprintf("sim-p%d", i), storetest.Machine(fmt.Sprintf("sim-p%d", i), "alpha", "cp", schema.RoleControlPlane, "small", 70+i))
	}
	for _, ev := range w.events(t, 3, 5*time.Second) {
		last = ev.RV
	}
	w.close()
	// Missed while the client was away, before the restart.
	putObj(t, ts.Store(), schema.KindMachine, "sim-p3", storetest.Machine("sim-p3", "alpha", "cp", schema.RoleControlPlane, "small", 73))
	putObj(t, ts.Store(), schema.KindMachine, "sim-q0", storetest.Machine("sim-q0", "beta", "cp", schema.RoleControlPlane, "small", 74))
	deleteObj(t, ts.Store(), schema.KindMachine, "sim-p0")
	want = append(want, "ADDED sim-p3", "DELETED sim-p0")
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}

	ts2 := startServer(t, Config{DataDir: dir}, false)
	// Missed after the restart.
	putObj(t, ts2.Store(), schema.KindTenant, "alpha", storetest.Tenant("alpha", "staging", 1))
	want = append(want, "MODIFIED alpha")
	w2 := openWatch(t, ts2, fmt.Sprintf("/api/v1/tenants/alpha/events?resourceVersion=%d", last), nil)
	got := w2.events(t, len(want), 5*time.Second)
	if diff := cmp.Diff(want, itemNames(got)); diff != "" {
		t.Fatalf("resumed after restart (-want +got):\n%s", diff)
	}
	for i := 1; i < len(got); i++ {
		if got[i].RV <= got[i-1].RV || got[0].RV <= last {
			t.Fatalf("resourceVersions not increasing from %d: %d, %d", last, got[i-1].RV, got[i].RV)
		}
	}
	w2.quiet(t, 100*time.Millisecond)
	// And it goes on live.
	putObj(t, ts2.Store(), schema.KindMachine, "sim-p4", storetest.Machine("sim-p4", "alpha", "cp", schema.RoleControlPlane, "small", 75))
	if ev := w2.nextEvent(t, 5*time.Second); ev.Type != "ADDED" || ev.Name != "sim-p4" {
		t.Fatalf("live after resume: %+v", ev)
	}
}

func TestWatchHeartbeat(t *testing.T) {
	ts := startServer(t, Config{WatchHeartbeat: 30 * time.Millisecond}, false)
	seedResources(t, ts.Store())

	chunked := openWatch(t, ts, "/api/v1/tenants/beta/events", nil)
	_, end := chunked.initial(t)
	hb := chunked.next(t, time.Second)
	if hb.Type != "BOOKMARK" || hb.RV != end || hb.Name != "" || len(hb.Annotations) != 0 {
		t.Fatalf("idle chunked stream: %+v, want a BOOKMARK at %d", hb, end)
	}
	sse := openWatch(t, ts, "/api/v1/tenants/beta/events?sse=true", nil)
	sse.next(t, time.Second) // retry
	sse.initial(t)
	hb = sse.next(t, time.Second)
	if hb.Raw != fmt.Sprintf(": heartbeat\nid: %d", end) {
		t.Fatalf("idle SSE stream: %q, want a heartbeat comment and id %d", hb.Raw, end)
	}

	// Changes outside the watch move the bookmark forward.
	rv := putObj(t, ts.Store(), applied, "beta", map[string]any{"metadata": map[string]any{"name": "beta"}, "n": 2})
	for _, w := range []*watcher{chunked, sse} {
		deadline := time.Now().Add(2 * time.Second)
		for {
			it := w.next(t, time.Until(deadline))
			if it.Type != "" && it.Type != "BOOKMARK" {
				t.Fatalf("unexpected event %+v", it)
			}
			if it.RV == rv || it.ID == fmt.Sprint(rv) {
				break
			}
		}
	}
}

func TestWatchShutdown(t *testing.T) {
	ts := startServer(t, Config{}, false)
	seedResources(t, ts.Store())
	var ws []*watcher
	for _, p := range []string{"/api/v1/machines/events", "/api/v1/commits/events?sse=true", "/api/v1/tenants?watch=true", "/api/v1/tenants/alpha/events?sse=true"} {
		w := openWatch(t, ts, p, nil)
		w.initial(t)
		ws = append(ws, w)
	}
	waitFor(t, "four subscribers", func() bool { return ts.WatchSubscribers() == 4 })
	start := time.Now()
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("shutdown with open watches took %v", d)
	}
	for _, w := range ws {
		select {
		case <-w.done:
			if w.err != nil {
				t.Errorf("stream ended with %v, want a clean end", w.err)
			}
		case <-time.After(2 * time.Second):
			t.Errorf("stream still open after shutdown")
		}
	}
}

func TestWatchAuth(t *testing.T) {
	ts := startServer(t, Config{}, true)
	seedResources(t, ts.Store())
	_, code, body := tryWatch(t, ts, "/api/v1/machines/events", nil)
	wantRefused(t, code, body, http.StatusUnauthorized, "token")
	w := openWatch(t, ts, "/api/v1/machines/events", map[string]string{"token": "viewer"})
	if evs, _ := w.initial(t); len(evs) != 4 {
		t.Errorf("viewer's watch: %d machines, want 4", len(evs))
	}
}
