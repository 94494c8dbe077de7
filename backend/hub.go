package backend

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// Errors a Subscription or Hub.Subscribe reports, besides store.ErrGone
// for a resourceVersion older than the events the hub keeps (the client
// must list, or watch without a resourceVersion, again).
var (
	// ErrSlowSubscriber ends a subscription whose buffer was full when an
	// event came: it fell behind, and the hub does not wait for anyone.
	ErrSlowSubscriber = errors.New("subscriber fell behind and was cut off")
	// ErrHubClosed ends every subscription when the hub closes, and
	// refuses new ones after.
	ErrHubClosed = errors.New("event hub closed")
)

// goneError is the store.ErrGone of one resourceVersion.
type goneError struct{ after, floor uint64 }

func (e *goneError) Error() string {
	return fmt.Sprintf("resourceVersion %d is older than the kept event history, which starts after %d", e.after, e.floor)
}

func (e *goneError) Is(target error) bool { return target == store.ErrGone }

// DefaultWatchBuffer is how many commits' events a subscriber may have
// waiting unless HubOptions.Buffer says otherwise.
const DefaultWatchBuffer = 256

// DefaultHistoryBytes bounds the frames the hub keeps in memory unless
// HubOptions.HistoryBytes says otherwise: enough for thousands of Machine
// and Tenant changes, or a few dozen Commits of a thousand tenants.
const DefaultHistoryBytes = 8 << 20

// servedKind reports whether the API serves kind; every other kind is an
// internal record and never becomes an event.
func servedKind(kind string) bool {
	_, ok := schema.LookupKind(kind)
	return ok
}

// HubOptions tunes NewHub. The zero value selects the defaults.
type HubOptions struct {
	// History is how many of the latest events the hub keeps in memory,
	// so that a watch resumes from a recent resourceVersion without a
	// store read. Default store.DefaultEventHistory.
	History int
	// HistoryBytes bounds the encoded size of those events: the oldest
	// go first beyond it. Default DefaultHistoryBytes. A watch resuming
	// from before them is replayed from the store's event log.
	HistoryBytes int
	// Buffer is how many commits' events one subscriber may have waiting
	// before the hub cuts it off. Default DefaultWatchBuffer.
	Buffer int
	// Logger receives events the hub had to drop because their stored
	// object could not be served. Default: none.
	Logger *slog.Logger
}

// Event is one change of a served resource, encoded once for every
// subscriber. It must not be modified.
type Event struct {
	Type store.EventType
	Kind string
	// Name is the store key: NAME, or TENANT/NAME for node groups and
	// config patches.
	Name            string
	ResourceVersion uint64
	// Labels are the object's metadata.labels.
	Labels map[string]string
	// Tenant is the tenant the object belongs to, as schema.TenantOf
	// says: a tenant's own name, or "" for kinds outside tenants.
	Tenant string
	// NodeGroup is the node group of a node group (its name) or machine
	// (its schema.LabelNodeGroup label).
	NodeGroup string

	// frame is the event as a Server-Sent Events frame; frame[data:] is
	// the JSON line, newline included, that chunked watches send.
	frame []byte
	data  int
}

// JSON returns the event as one line of a chunked watch:
// {"type":"ADDED","object":{…}} and a newline. The object is as stored,
// with its metadata.resourceVersion.
func (e *Event) JSON() []byte { return e.frame[e.data : len(e.frame)-1] }

// SSE returns the event as a Server-Sent Events frame: an `id:` line with
// the resourceVersion and a `data:` line with the same JSON as JSON.
func (e *Event) SSE() []byte { return e.frame }

// newEvent encodes a change of a served kind. The change's object may
// point into a transaction; the event does not keep it.
func newEvent(c store.Change) (*Event, error) {
	r := c.Resource
	var head store.MetaHead
	if err := r.DecodeMeta(&head); err != nil {
		return nil, err
	}
	m := head.Meta()
	ev := &Event{Type: c.Type, Kind: r.Kind, Name: r.Name, ResourceVersion: r.ResourceVersion,
		Labels: m.Labels, Tenant: schema.TenantOf(r.Kind, &m)}
	switch r.Kind {
	case schema.KindNodeGroup:
		ev.NodeGroup = m.Name
	case schema.KindMachine:
		ev.NodeGroup = m.Labels[schema.LabelNodeGroup]
	}
	ev.frame, ev.data = encodeFrame(strconv.FormatUint(r.ResourceVersion, 10), string(c.Type), r.Object)
	return ev, nil
}

// encodeFrame builds `id: ID\ndata: {"type":TYPE,"object":OBJ}\n\n` and
// returns where the JSON starts.
func encodeFrame(id, typ string, obj []byte) ([]byte, int) {
	const head, mid = `{"type":"`, `","object":`
	b := make([]byte, 0, len("id: \ndata: \n\n}")+len(id)+len(head)+len(typ)+len(mid)+len(obj))
	b = append(b, "id: "...)
	b = append(b, id...)
	b = append(b, "\ndata: "...)
	data := len(b)
	b = append(b, head...)
	b = append(b, typ...)
	b = append(b, mid...)
	b = append(b, obj...)
	b = append(b, "}\n\n"...)
	return b, data
}

// Hub fans resource events out to subscribers. The store's commit hook
// publishes each commit's changes of served kinds as one batch, encoded
// once; every subscriber gets the batches it matches through a bounded
// buffer. Publishing never waits for a subscriber: one whose buffer is
// full is cut off (ErrSlowSubscriber) and must resume with a new
// subscription. The hub keeps the latest History events in a ring, so a
// subscriber can resume from a resourceVersion without loss or repetition:
// from the ring's latest History events (at most HistoryBytes of frames)
// or, further back, from the event log of the store it is attached to
// (Config.EventHistory changes, kept across restarts). A Hub is safe
// for concurrent use; it must not be used to write the store.
type Hub struct {
	log      *slog.Logger
	buffer   int
	maxBytes int
	// store is the store Attach attached, whose event log replays what
	// the ring no longer holds; nil before.
	store store.Store

	mu sync.Mutex
	// ring holds the latest events in resourceVersion order, from
	// ring[start] on, n of them.
	ring     []*Event
	start, n int
	bytes    int // the frames' lengths in the ring
	// floor is the resourceVersion above which the ring holds every
	// event.
	floor  uint64
	subs   map[*Subscription]struct{}
	closed bool

	// last is the latest resourceVersion published; every matching
	// event up to it is in its subscribers' buffers.
	last    atomic.Uint64
	cutOffs atomic.Uint64
}

// NewHub returns an empty hub. Attach it to a store to fill it.
func NewHub(opts HubOptions) *Hub {
	if opts.History <= 0 {
		opts.History = store.DefaultEventHistory
	}
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultWatchBuffer
	}
	if opts.HistoryBytes <= 0 {
		opts.HistoryBytes = DefaultHistoryBytes
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Hub{
		log:      log,
		buffer:   opts.Buffer,
		maxBytes: opts.HistoryBytes,
		ring:     make([]*Event, opts.History),
		subs:     map[*Subscription]struct{}{},
	}
}

// Attach registers Publish as the store's commit hook and makes the
// store's event log the hub's history beyond its ring, so that watches
// resume from resourceVersions given out before the store was last
// opened. Nothing of the log is read until a watch resumes from it.
func (h *Hub) Attach(s store.Store) error {
	s.OnCommit(h.Publish)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.store = s
	return s.View(func(tx store.Tx) error {
		rv := tx.ResourceVersion()
		if h.n == 0 {
			h.floor = max(h.floor, rv)
		} else {
			// Commits published before this lock: the ring holds every
			// event from its first on.
			h.floor = max(h.floor, h.at(0).ResourceVersion-1)
		}
		if rv > h.last.Load() {
			h.last.Store(rv)
		}
		return nil
	})
}

// Publish sends the changes of one commit, in order, to the subscribers
// they match and keeps them for resuming. Changes of internal kinds are
// left out, and so are changes at or below the latest resourceVersion
// published. It never blocks on a subscriber.
func (h *Hub) Publish(changes []store.Change) {
	var batch []*Event
	top := uint64(0)
	for _, c := range changes {
		top = max(top, c.Resource.ResourceVersion)
		if !servedKind(c.Resource.Kind) {
			continue
		}
		ev, err := newEvent(c)
		if err != nil {
			h.log.Error("event hub: dropping an event that cannot be served", "err", err)
			continue
		}
		batch = append(batch, ev)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	last := h.last.Load()
	if top <= last {
		return
	}
	for len(batch) > 0 && batch[0].ResourceVersion <= last {
		batch = batch[1:]
	}
	if len(batch) > 0 {
		for _, ev := range batch {
			h.push(ev)
		}
		for sub := range h.subs {
			if !sub.wants(batch) {
				continue
			}
			select {
			case sub.ch <- batch:
			default:
				h.cutOff(sub)
			}
		}
	}
	h.last.Store(top)
}

// push appends ev to the ring, dropping the oldest events while it holds
// more than History events or HistoryBytes of frames (the newest event
// stays, however large). The caller holds h.mu.
func (h *Hub) push(ev *Event) {
	if h.n == len(h.ring) {
		h.dropOldest()
	}
	h.ring[(h.start+h.n)%len(h.ring)] = ev
	h.n++
	h.bytes += len(ev.frame)
	for h.bytes > h.maxBytes && h.n > 1 {
		h.dropOldest()
	}
}

// dropOldest removes the ring's oldest event. The caller holds h.mu.
func (h *Hub) dropOldest() {
	old := h.ring[h.start]
	h.floor = old.ResourceVersion
	h.bytes -= len(old.frame)
	h.ring[h.start] = nil
	h.start = (h.start + 1) % len(h.ring)
	h.n--
}

func (h *Hub) at(i int) *Event { return h.ring[(h.start+i)%len(h.ring)] }

// SubscribeOptions says what a subscription receives.
type SubscribeOptions struct {
	// Match selects the events the subscriber gets; nil selects all.
	Match func(*Event) bool
	// Resume asks Subscribe for the kept events after the resourceVersion
	// After, or ErrGone when some of them are no longer kept.
	Resume bool
	After  uint64
	// OnEnd, when set, is called once when the hub ends the subscription,
	// with ErrSlowSubscriber or ErrHubClosed. It runs with the hub's lock
	// held and must return at once; it is not called after Close.
	OnEnd func(error)
}

// Subscribe registers a subscriber. With opts.Resume it also returns the
// kept events after opts.After that match, oldest first; live batches on
// Events follow them without a gap or a repeat.
func (h *Hub) Subscribe(opts SubscribeOptions) (*Subscription, []*Event, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, nil, ErrHubClosed
	}
	sub := &Subscription{
		hub:   h,
		ch:    make(chan []*Event, h.buffer),
		done:  make(chan struct{}),
		match: opts.Match,
		onEnd: opts.OnEnd,
	}
	var replay []*Event
	switch {
	case !opts.Resume:
	case opts.After < h.floor:
		var err error
		if replay, err = h.replayLog(sub, opts.After); err != nil {
			return nil, nil, err
		}
	default:
		i := sort.Search(h.n, func(i int) bool { return h.at(i).ResourceVersion > opts.After })
		for ; i < h.n; i++ {
			if ev := h.at(i); sub.Matches(ev) {
				replay = append(replay, ev)
			}
		}
	}
	h.subs[sub] = struct{}{}
	return sub, replay, nil
}

// errReplayed stops the walk of the event log at the latest published
// change.
var errReplayed = errors.New("replayed up to the latest published change")

// replayLog returns the events after after up to Last that sub matches,
// from the store's event log, or ErrGone when the log no longer holds
// them all (or the hub has no store). The caller holds h.mu, so nothing
// is published meanwhile; later changes come through sub's buffer.
func (h *Hub) replayLog(sub *Subscription, after uint64) ([]*Event, error) {
	if h.store == nil {
		return nil, &goneError{after: after, floor: h.floor}
	}
	last := h.last.Load()
	var replay []*Event
	err := h.store.View(func(tx store.Tx) error {
		if from := tx.EventsFrom(); after < from {
			return &goneError{after: after, floor: min(from, h.floor)}
		}
		return tx.Events(after, func(c store.Change) error {
			if c.Resource.ResourceVersion > last {
				return errReplayed
			}
			if !servedKind(c.Resource.Kind) {
				return nil
			}
			ev, err := newEvent(c)
			if err != nil {
				h.log.Error("event log: dropping an event that cannot be served", "err", err)
				return nil
			}
			if sub.Matches(ev) {
				replay = append(replay, ev)
			}
			return nil
		})
	})
	if err != nil && !errors.Is(err, errReplayed) {
		return nil, err
	}
	return replay, nil
}

// cutOff ends sub because its buffer is full. The caller holds h.mu.
func (h *Hub) cutOff(sub *Subscription) {
	h.cutOffs.Add(1)
	h.end(sub, ErrSlowSubscriber)
}

// end removes sub with err. The caller holds h.mu.
func (h *Hub) end(sub *Subscription, err error) {
	if _, ok := h.subs[sub]; !ok {
		return
	}
	delete(h.subs, sub)
	sub.err = err
	close(sub.done)
	if sub.onEnd != nil && err != nil {
		sub.onEnd(err)
	}
}

// Last returns the latest resourceVersion the hub has published or
// loaded. Once a subscriber has taken every batch from its buffer, it has
// seen every matching event up to Last as read before it looked.
func (h *Hub) Last() uint64 { return h.last.Load() }

// Subscribers returns how many subscriptions are open.
func (h *Hub) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// CutOffs returns how many subscribers have been cut off for falling
// behind since the hub started.
func (h *Hub) CutOffs() uint64 { return h.cutOffs.Load() }

// Close ends every subscription with ErrHubClosed and refuses new ones.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for sub := range h.subs {
		h.end(sub, ErrHubClosed)
	}
}

// Subscription is one subscriber of a Hub.
type Subscription struct {
	hub   *Hub
	ch    chan []*Event
	done  chan struct{}
	match func(*Event) bool
	onEnd func(error)
	err   error // set before done closes
}

// Events delivers the batches (one per commit) that have at least one
// matching event; a batch may hold events that do not match, and the
// receiver filters with Matches. Stop reading when Done closes.
func (s *Subscription) Events() <-chan []*Event { return s.ch }

// Done is closed when the hub ends the subscription or Close is called.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Err says why the subscription ended, after Done is closed: nil after
// Close, ErrSlowSubscriber or ErrHubClosed.
func (s *Subscription) Err() error {
	<-s.done
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.err
}

// Pending returns how many batches wait in the buffer.
func (s *Subscription) Pending() int { return len(s.ch) }

// Matches reports whether the subscriber wants ev.
func (s *Subscription) Matches(ev *Event) bool { return s.match == nil || s.match(ev) }

func (s *Subscription) wants(batch []*Event) bool {
	for _, ev := range batch {
		if s.Matches(ev) {
			return true
		}
	}
	return false
}

// Close ends the subscription. It is safe to call more than once.
func (s *Subscription) Close() {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	s.hub.end(s, nil)
}
