package backend

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/labels"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// Watches stream the changes of the resources one endpoint covers:
//
//	GET /api/v1/tenants/{name}/events                  the tenant, its node groups, patches and machines
//	GET /api/v1/tenants/{name}/node-groups/{ng}/events the node group and its machines
//	GET /api/v1/machines/events                        every machine
//	GET /api/v1/providers/{type}/events                that provider
//	GET /api/v1/commits/events                         every commit
//	GET <any list endpoint>?watch=true                 that list's kind and scope
//
// Watches need the view role and do not require the tenant they name to
// exist, so a client can see it appear and go. Query parameters:
//
//   - resourceVersion=N resumes after N: the stream starts with every kept
//     event above N, oldest first. Without it the stream starts with the
//     current state as ADDED events (in resourceVersion order) and a
//     BOOKMARK that marks its end.
//   - labelSelector filters every event by the labels of its object. An
//     object whose labels stop matching simply stops producing events; no
//     DELETED is made up for it.
//   - sse=true (or Accept: text/event-stream) selects Server-Sent Events;
//     the default is chunked JSON. offset and limit do not apply.
//
// Chunked JSON sends one event per line, {"type":"ADDED|MODIFIED|DELETED",
// "object":{…}}, with metadata.resourceVersion set in the object. A line
// {"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"N"}}} says the
// client has every event up to N; the server sends one when the current
// state has been sent (with the annotation rezuscloud.io/initial-events-end)
// and on an idle stream every heartbeat interval (15s by default).
//
// Server-Sent Events carry the same JSON line as `data:`, with `id:` set to
// the resourceVersion and no `event:` field, so that EventSource.onmessage
// gets every event; the stream starts with `retry:`. Heartbeats are a
// comment (": heartbeat") with an `id:` line and no data, which moves the
// browser's Last-Event-ID forward without firing an event; the end of the
// current state is such an `id:` line too. A reconnecting client sends
// Last-Event-ID, which takes precedence over resourceVersion in the URL.
//
// A resourceVersion older than the kept history (10,000 changes by
// default, across restarts) or newer than the store's answers 410 Gone:
// watch again without resourceVersion. A client that does not keep up is
// cut off and its stream ends; it reconnects and resumes. Each stream ends
// when the client goes away or the server shuts down.

// DefaultWatchHeartbeat is how often an idle watch gets a heartbeat
// unless Config.WatchHeartbeat says otherwise.
const DefaultWatchHeartbeat = 15 * time.Second

// AnnotationInitialEventsEnd marks the BOOKMARK that ends a watch's
// current state.
const AnnotationInitialEventsEnd = "rezuscloud.io/initial-events-end"

const (
	// watchWriteTimeout bounds one write to a watch client; a client that
	// takes longer has gone away.
	watchWriteTimeout = 10 * time.Second
	// watchRetry is the reconnection delay SSE clients are told to use.
	watchRetry = 2 * time.Second
)

// watchPart selects objects of one kind. Empty fields select everything.
type watchPart struct {
	kind      string
	key       string // store key
	tenant    string // the tenant the objects belong to
	nodeGroup string
}

func (p watchPart) matches(ev *Event) bool {
	return ev.Kind == p.kind &&
		(p.key == "" || ev.Name == p.key) &&
		(p.tenant == "" || ev.Tenant == p.tenant) &&
		(p.nodeGroup == "" || ev.NodeGroup == p.nodeGroup)
}

// watchScope is what one watch endpoint covers: the objects any part
// selects. Parts have distinct kinds.
type watchScope []watchPart

func (sc watchScope) matches(ev *Event) bool {
	for _, p := range sc {
		if p.matches(ev) {
			return true
		}
	}
	return false
}

func tenantScope(tenant string) watchScope {
	return watchScope{
		{kind: schema.KindTenant, key: tenant},
		{kind: schema.KindNodeGroup, tenant: tenant},
		{kind: schema.KindConfigPatch, tenant: tenant},
		{kind: schema.KindMachine, tenant: tenant},
	}
}

func nodeGroupScope(tenant, ng string) watchScope {
	return watchScope{
		{kind: schema.KindNodeGroup, key: tenant + "/" + ng},
		{kind: schema.KindMachine, tenant: tenant, nodeGroup: ng},
	}
}

// listScope is what a list endpoint's ?watch=true covers.
func listScope(spec listSpec) watchScope {
	return watchScope{{kind: spec.kind, tenant: spec.tenant}}
}

// watchQuery is the parsed query of a watch.
type watchQuery struct {
	sse    bool
	resume bool
	after  uint64
	sel    labels.Selector
}

func parseWatchQuery(r *http.Request) (watchQuery, error) {
	var wq watchQuery
	q := r.URL.Query()
	if s, ok := first(q, "sse"); ok {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return wq, api.Errorf(http.StatusBadRequest, "sse %q: want true or false", s)
		}
		wq.sse = b
	}
	for _, a := range r.Header.Values("Accept") {
		if strings.Contains(a, "text/event-stream") {
			wq.sse = true
		}
	}
	rv, from := r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	if rv == "" {
		rv, _ = first(q, "resourceVersion")
		from = "resourceVersion"
	}
	if rv != "" {
		n, err := strconv.ParseUint(rv, 10, 64)
		if err != nil {
			return wq, api.Errorf(http.StatusBadRequest, "%s %q: want a resourceVersion, a whole number 0 or more", from, rv)
		}
		wq.resume, wq.after = true, n
	}
	if s, ok := first(q, "labelSelector"); ok {
		sel, err := labels.Parse(s)
		if err != nil {
			return wq, api.Errorf(http.StatusBadRequest, "labelSelector: %v", err)
		}
		wq.sel = sel
	}
	return wq, nil
}

// wantsWatch reads a list's watch parameter.
func wantsWatch(q url.Values) (bool, error) {
	s, ok := first(q, "watch")
	if !ok {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, api.Errorf(http.StatusBadRequest, "watch %q: want true or false", s)
	}
	return b, nil
}

// watchRoute serves a watch of the scope made from the route's params.
func (a *resourceAPI) watchRoute(scope func(httprouter.Params) watchScope) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		a.serveWatch(w, r, scope(p))
	}
}

// eventsOr serves the watch of scope when the route's name is "events",
// and get otherwise: the router cannot route /KIND/events beside
// /KIND/:name, so no object of such a kind can be named "events".
func (a *resourceAPI) eventsOr(scope watchScope, get httprouter.Handle) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		if p.ByName("name") == "events" {
			a.serveWatch(w, r, scope)
			return
		}
		get(w, r, p)
	}
}

// serveWatch streams the events of scope: from the current state, or
// resumed after a resourceVersion, until the client goes, the subscription
// is cut off or the server shuts down.
func (a *resourceAPI) serveWatch(w http.ResponseWriter, r *http.Request, scope watchScope) {
	wq, err := parseWatchQuery(r)
	if err == nil && wq.resume {
		err = a.checkResume(wq.after)
	}
	if err != nil {
		a.writeResult(w, r, nil, err)
		return
	}
	st := &watchStream{w: w, rc: http.NewResponseController(w), sse: wq.sse, pos: wq.after}
	sub, replay, err := a.subscribe(scope, wq, st)
	if err != nil {
		a.writeResult(w, r, nil, err)
		return
	}
	// The subscription ends before the stream clears its write deadline.
	defer st.finish()
	defer sub.Close()
	var snapRV uint64
	if !wq.resume {
		replay, snapRV, err = a.snapshot(scope, wq.sel)
		if err != nil {
			a.internal(w, r, err)
			return
		}
	}
	st.header(wq.sse)
	if isHead(r.Context()) {
		return
	}
	if st.start(wq, replay, snapRV) != nil {
		return
	}
	st.follow(r.Context(), sub, a.hub, a.heartbeat)
}

// checkResume refuses to resume after a resourceVersion the server has not
// reached.
func (a *resourceAPI) checkResume(after uint64) error {
	var latest uint64
	if err := a.store.View(func(tx store.Tx) error { latest = tx.ResourceVersion(); return nil }); err != nil {
		return err
	}
	if after > latest {
		return api.Errorf(http.StatusGone, "resourceVersion %d is newer than the server's latest, %d; watch again without resourceVersion to get the current state", after, latest)
	}
	return nil
}

// subscribe subscribes st to the hub's events of scope that the query
// selects; replay holds the events a resumed watch missed.
func (a *resourceAPI) subscribe(scope watchScope, wq watchQuery, st *watchStream) (*Subscription, []*Event, error) {
	sub, replay, err := a.hub.Subscribe(SubscribeOptions{
		Match:  func(ev *Event) bool { return scope.matches(ev) && wq.sel.Matches(ev.Labels) },
		Resume: wq.resume,
		After:  wq.after,
		OnEnd:  st.ended,
	})
	switch {
	case errors.Is(err, store.ErrGone):
		return nil, nil, api.Errorf(http.StatusGone, "%v; watch again without resourceVersion to get the current state", err)
	case errors.Is(err, ErrHubClosed):
		return nil, nil, api.Errorf(http.StatusServiceUnavailable, "the server is shutting down")
	}
	return sub, replay, err
}

// header writes the stream's response header.
func (st *watchStream) header(sse bool) {
	h := st.w.Header()
	if sse {
		h.Set("Content-Type", "text/event-stream")
	} else {
		h.Set("Content-Type", "application/json")
	}
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Accel-Buffering", "no")
	st.w.WriteHeader(http.StatusOK)
}

// start sends what comes before the live events: SSE's retry hint, the
// replayed (or current) objects and, for a new watch, the bookmark of the
// state they are at.
func (st *watchStream) start(wq watchQuery, replay []*Event, snapRV uint64) error {
	if wq.sse {
		if err := st.write([]byte("retry: " + strconv.FormatInt(watchRetry.Milliseconds(), 10) + "\n\n")); err != nil {
			return err
		}
	}
	for _, ev := range replay {
		if err := st.event(ev); err != nil {
			return err
		}
	}
	if !wq.resume {
		st.pos = snapRV
		if err := st.bookmark(true); err != nil {
			return err
		}
	}
	return st.flush()
}

// follow sends the subscription's events as they come, and a bookmark in
// every heartbeat that had none, until ctx ends, the subscription ends or
// a write fails.
func (st *watchStream) follow(ctx context.Context, sub *Subscription, hub *Hub, heartbeat time.Duration) {
	ticker := time.NewTicker(heartbeat)
	defer ticker.Stop()
	idle := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.Done():
			return
		case batch := <-sub.Events():
			if st.batches(sub, batch) != nil {
				return
			}
			idle = false
		case <-ticker.C:
			if !idle {
				idle = true
				continue
			}
			// Every matching event up to last is in the buffer; with the
			// buffer empty, all of them have been sent.
			if last := hub.Last(); sub.Pending() == 0 && last > st.pos {
				st.pos = last
			}
			if st.bookmark(false) != nil || st.flush() != nil {
				return
			}
		}
	}
}

// batches sends batch and the batches already waiting behind it, in one
// flush.
func (st *watchStream) batches(sub *Subscription, batch []*Event) error {
	for more := true; more; {
		select {
		case <-sub.Done():
			return errWatchEnded
		default:
		}
		for _, ev := range batch {
			if ev.ResourceVersion <= st.pos || !sub.Matches(ev) {
				continue
			}
			if err := st.event(ev); err != nil {
				return err
			}
		}
		select {
		case batch = <-sub.Events():
		default:
			more = false
		}
	}
	return st.flush()
}

// errWatchEnded stops a stream whose subscription ended.
var errWatchEnded = errors.New("watch ended")

// snapshot returns the current objects of scope that sel matches as ADDED
// events in resourceVersion order, and the store's resourceVersion they
// are the state at.
func (a *resourceAPI) snapshot(scope watchScope, sel labels.Selector) ([]*Event, uint64, error) {
	var evs []*Event
	var rv uint64
	err := a.store.View(func(tx store.Tx) error {
		rv = tx.ResourceVersion()
		for _, p := range scope {
			add := func(r store.Resource) error {
				ev, err := newEvent(store.Change{Type: store.Added, Resource: r})
				if err != nil {
					return err
				}
				if p.matches(ev) && sel.Matches(ev.Labels) {
					evs = append(evs, ev)
				}
				return nil
			}
			var err error
			switch {
			case p.key != "":
				var r store.Resource
				if r, err = tx.Get(p.kind, p.key); err == nil {
					err = add(r)
				} else if errors.Is(err, store.ErrNotFound) {
					err = nil
				}
			case p.tenant != "":
				err = tx.TenantObjects(p.tenant, p.kind, add)
			default:
				err = tx.Scan(p.kind, "", add)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	slices.SortFunc(evs, func(x, y *Event) int { return cmp.Compare(x.ResourceVersion, y.ResourceVersion) })
	return evs, rv, err
}

// watchStream writes one watch response. The hub may cut it off from its
// own goroutine: ended then sets a past write deadline, so that a write
// blocked on a client that stopped reading returns at once.
type watchStream struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	sse bool
	// pos is the resourceVersion up to which the client has every event
	// of the stream.
	pos uint64

	// armed is when the write deadline was last moved.
	armed time.Time

	// mu orders setting the write deadline against cutting off.
	mu  sync.Mutex
	cut atomic.Bool
}

// ended is the subscription's OnEnd.
func (st *watchStream) ended(err error) {
	if !errors.Is(err, ErrSlowSubscriber) {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.cut.Store(true)
	st.rc.SetWriteDeadline(time.Now())
}

// finish clears the write deadline of a stream that was not cut off, so
// that the connection can serve further requests.
func (st *watchStream) finish() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.cut.Load() {
		st.rc.SetWriteDeadline(time.Time{})
	}
}

// write writes b, first moving the write deadline watchWriteTimeout ahead
// when it was last moved more than a second ago.
func (st *watchStream) write(b []byte) error {
	if st.cut.Load() {
		return ErrSlowSubscriber
	}
	if now := time.Now(); now.Sub(st.armed) >= time.Second {
		st.mu.Lock()
		if st.cut.Load() {
			st.mu.Unlock()
			return ErrSlowSubscriber
		}
		st.rc.SetWriteDeadline(now.Add(watchWriteTimeout))
		st.mu.Unlock()
		st.armed = now
	}
	_, err := st.w.Write(b)
	return err
}

func (st *watchStream) flush() error { return st.rc.Flush() }

func (st *watchStream) event(ev *Event) error {
	st.pos = ev.ResourceVersion
	if st.sse {
		return st.write(ev.SSE())
	}
	return st.write(ev.JSON())
}

// bookmark tells the client it has every event up to st.pos: a BOOKMARK
// line, or for SSE an `id:` line without data (with a heartbeat comment
// unless it ends the current state).
func (st *watchStream) bookmark(initialEnd bool) error {
	rv := strconv.FormatUint(st.pos, 10)
	switch {
	case st.sse && initialEnd:
		return st.write([]byte("id: " + rv + "\n\n"))
	case st.sse:
		return st.write([]byte(": heartbeat\nid: " + rv + "\n\n"))
	case initialEnd:
		return st.write([]byte(`{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"` + rv + `","annotations":{"` + AnnotationInitialEventsEnd + `":"true"}}}}` + "\n"))
	}
	return st.write([]byte(`{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"` + rv + `"}}}` + "\n"))
}

type headRequestKey struct{}

// withHead marks a request that arrived as HEAD and is routed as GET.
func withHead(ctx context.Context) context.Context {
	return context.WithValue(ctx, headRequestKey{}, true)
}

func isHead(ctx context.Context) bool {
	v, _ := ctx.Value(headRequestKey{}).(bool)
	return v
}
