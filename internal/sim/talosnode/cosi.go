package talosnode

import (
	"context"
	"sort"
	"strconv"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	cosistate "github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	machineryconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// cosiState is the COSI state of every node of a host, behind one COSI
// State server: resources are built from the node's state when asked for,
// so nodes keep no COSI state of their own. It serves the kinds of
// servedKinds (resources.go), with their definitions, and answers reads
// of anything else as Talos's resource API does.
type cosiState struct {
	h *Host
}

var _ cosistate.CoreState = (*cosiState)(nil)

// rawConfig is a running config as the node's disk holds it, which the
// node loaded and validated when it got it. The COSI server needs only its
// bytes (the MachineConfig resource's MarshalProto and MarshalYAML call
// Bytes), so a read of the config parses nothing: the observer reads every
// machine's config at every probe. Any other method of config.Provider
// would panic on the nil Provider; nothing on the server calls one.
type rawConfig struct {
	machineryconfig.Provider
	b []byte
}

func (c rawConfig) Bytes() ([]byte, error) { return c.b, nil }
func (c rawConfig) Readonly() bool         { return true }

func version(v uint64) resource.Version {
	ver, _ := resource.ParseVersion(strconv.FormatUint(v, 10))
	return ver
}

// list returns the resources of ptr's kind that c's node has, only the one
// of ptr's ID when it names one. The error is Talos's for a read it
// refuses.
func (s *cosiState) list(c *call, ptr resource.Pointer) ([]resource.Resource, error) {
	k, err := access(c, ptr.Namespace(), ptr.Type())
	if err != nil || k == nil {
		return nil, err
	}
	rs, err := k.list(s.h, c)
	if err != nil || ptr.ID() == "" {
		return rs, err
	}
	for _, r := range rs {
		if r.Metadata().ID() == ptr.ID() {
			return []resource.Resource{r}, nil
		}
	}
	return nil, nil
}

func (s *cosiState) Get(ctx context.Context, ptr resource.Pointer, _ ...cosistate.GetOption) (resource.Resource, error) {
	c := callOf(ctx)
	rs, err := s.list(c, ptr)
	if err != nil {
		return nil, err
	}
	if ptr.Type() == runtime.MachineStatusType {
		if err := s.statusDelay(ctx, c.n); err != nil {
			return nil, err
		}
	}
	if len(rs) == 0 {
		return nil, inmem.ErrNotFound(ptr)
	}
	return rs[0], nil
}

// statusDelay holds a read of n's MachineStatus for its fault's
// StatusDelay, or until ctx ends.
func (s *cosiState) statusDelay(ctx context.Context, n *node) error {
	s.h.mu.Lock()
	delay := n.fault.StatusDelay
	s.h.mu.Unlock()
	if delay <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-time.After(delay):
		return nil
	}
}

func (s *cosiState) List(ctx context.Context, kind resource.Kind, _ ...cosistate.ListOption) (resource.List, error) {
	rs, err := s.list(callOf(ctx), resource.NewMetadata(kind.Namespace(), kind.Type(), "", resource.VersionUndefined))
	if err != nil {
		return resource.List{}, err
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Metadata().ID() < rs[j].Metadata().ID() })
	return resource.List{Items: rs}, nil
}

func errReadOnly(context.Context) error {
	return status.Error(codes.PermissionDenied, "write access requires os:admin role")
}

func (s *cosiState) Create(ctx context.Context, _ resource.Resource, _ ...cosistate.CreateOption) error {
	return errReadOnly(ctx)
}

func (s *cosiState) Update(ctx context.Context, _ resource.Resource, _ ...cosistate.UpdateOption) error {
	return errReadOnly(ctx)
}

func (s *cosiState) Destroy(ctx context.Context, _ resource.Pointer, _ ...cosistate.DestroyOption) error {
	return errReadOnly(ctx)
}

// Watch sends the resource now (Created, or Destroyed when there is
// none) and on every change, until ctx ends.
func (s *cosiState) Watch(ctx context.Context, ptr resource.Pointer, ch chan<- cosistate.Event, _ ...cosistate.WatchOption) error {
	return s.watch(ctx, ptr, true, func(evs []cosistate.Event) bool {
		for _, ev := range evs {
			select {
			case ch <- ev:
			case <-ctx.Done():
				return false
			}
		}
		return true
	})
}

// WatchKind is Watch over every resource of the kind, which sends what
// there is first only with the BootstrapContents option, then a
// Bootstrapped marker.
func (s *cosiState) WatchKind(ctx context.Context, kind resource.Kind, ch chan<- cosistate.Event, opts ...cosistate.WatchKindOption) error {
	var o cosistate.WatchKindOptions
	for _, opt := range opts {
		opt(&o)
	}
	ptr := resource.NewMetadata(kind.Namespace(), kind.Type(), "", resource.VersionUndefined)
	return s.watch(ctx, ptr, o.BootstrapContents, func(evs []cosistate.Event) bool {
		for _, ev := range evs {
			select {
			case ch <- ev:
			case <-ctx.Done():
				return false
			}
		}
		return true
	})
}

// WatchKindAggregated is WatchKind with events sent in batches.
func (s *cosiState) WatchKindAggregated(ctx context.Context, kind resource.Kind, ch chan<- []cosistate.Event, opts ...cosistate.WatchKindOption) error {
	var o cosistate.WatchKindOptions
	for _, opt := range opts {
		opt(&o)
	}
	ptr := resource.NewMetadata(kind.Namespace(), kind.Type(), "", resource.VersionUndefined)
	return s.watch(ctx, ptr, o.BootstrapContents, func(evs []cosistate.Event) bool {
		select {
		case ch <- evs:
			return true
		case <-ctx.Done():
			return false
		}
	})
}

// watch checks the first read, then sends events from a goroutine that
// wakes on every change of the node (and of its cluster's members), and
// ends the watch's stream when a fault breaks the node's watches: with
// initial, what there is at once (a watch of one resource gets a Destroyed
// tombstone when it does not exist; a kind watch gets a Bootstrapped
// marker), then Created, Updated when a resource's version moves, and
// Destroyed when it goes.
func (s *cosiState) watch(ctx context.Context, ptr resource.Pointer, initial bool, send func([]cosistate.Event) bool) error {
	c := callOf(ctx)
	// The node's change channel is taken before each read, so that a
	// change made after the read always wakes the next one.
	wait, broken := s.wake(c)
	rs, err := s.list(c, ptr)
	if err != nil {
		return err
	}
	go func() {
		last := map[resource.ID]resource.Resource{}
		var evs []cosistate.Event
		for _, r := range rs {
			last[r.Metadata().ID()] = r
			evs = append(evs, cosistate.Event{Type: cosistate.Created, Resource: r})
		}
		switch {
		case !initial:
			evs = nil
		case ptr.ID() != "" && len(rs) == 0:
			evs = append(evs, cosistate.Event{Type: cosistate.Destroyed, Resource: resource.NewTombstone(resource.NewMetadata(ptr.Namespace(), ptr.Type(), ptr.ID(), resource.VersionUndefined))})
		case ptr.ID() == "":
			evs = append(evs, cosistate.Event{Type: cosistate.Bootstrapped, Resource: resource.NewTombstone(resource.NewMetadata(ptr.Namespace(), ptr.Type(), "", resource.VersionUndefined))})
		}
		if len(evs) > 0 && !send(evs) {
			return
		}
		for {
			if broken != nil && c.endWatch != nil {
				c.endWatch(broken)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-wait:
			}
			wait, broken = s.wake(c)
			cur, err := s.list(c, ptr)
			if err != nil {
				send([]cosistate.Event{{Type: cosistate.Errored, Error: err}})
				return
			}
			if evs := changes(last, cur); len(evs) > 0 && !send(evs) {
				return
			}
		}
	}()
	return nil
}

// wake is the channel that closes on the next change of the call's node,
// and the error that ends its watches now, if any: a fault that breaks
// them, or, for a call that apid forwarded, the node gone down.
func (s *cosiState) wake(c *call) (<-chan struct{}, error) {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	switch {
	case c.n.fault.WatchBroken:
		return c.n.changed, errWatchBroken
	case c.proxied && (c.n.gone.Load() || c.n.fault.Refuse || c.n.viewAt(s.h.now()).Down):
		return c.n.changed, errProxyBroken
	}
	return c.n.changed, nil
}

// changes returns the events that turn last into cur, and makes last cur.
func changes(last map[resource.ID]resource.Resource, cur []resource.Resource) []cosistate.Event {
	var evs []cosistate.Event
	seen := map[resource.ID]bool{}
	for _, r := range cur {
		id := r.Metadata().ID()
		seen[id] = true
		switch old, ok := last[id]; {
		case !ok:
			evs = append(evs, cosistate.Event{Type: cosistate.Created, Resource: r})
		case !r.Metadata().Version().Equal(old.Metadata().Version()):
			evs = append(evs, cosistate.Event{Type: cosistate.Updated, Resource: r, Old: old})
		default:
			continue
		}
		last[id] = r
	}
	var gone []resource.ID
	for id := range last {
		if !seen[id] {
			gone = append(gone, id)
		}
	}
	sort.Strings(gone)
	for _, id := range gone {
		evs = append(evs, cosistate.Event{Type: cosistate.Destroyed, Resource: last[id]})
		delete(last, id)
	}
	return evs
}
