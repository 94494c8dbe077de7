package talosnode

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/cosi-project/runtime/pkg/resource"
	cosistate "github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	machineryconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// cosiState is the COSI state of every node of a host, behind one COSI
// State server: resources are built from the node's state when asked for,
// so nodes keep no COSI state of their own. It serves MachineStatus
// (runtime namespace, id "machine") and the running MachineConfig (config
// namespace, id "v1alpha1"; sensitive: os:admin only).
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

// resource builds the resource ptr names for c's node, or nil when the
// node has none. The error is Talos's for what it does not serve.
func (s *cosiState) resource(c *call, ptr resource.Pointer) (resource.Resource, error) {
	h, n := s.h, c.n
	switch {
	case ptr.Namespace() == runtime.NamespaceName && ptr.Type() == runtime.MachineStatusType:
		h.mu.Lock()
		defer h.mu.Unlock()
		spec := h.machineStatus(n, h.now())
		if b, _ := json.Marshal(spec); string(b) != n.statusSpec {
			n.statusSpec = string(b)
			n.statusVersion++
		}
		if ptr.ID() != "" && ptr.ID() != runtime.MachineStatusID {
			return nil, nil
		}
		r := runtime.NewMachineStatus()
		*r.TypedSpec() = spec
		r.Metadata().SetVersion(version(n.statusVersion))
		return r, nil
	case ptr.Namespace() == config.NamespaceName && ptr.Type() == config.MachineConfigType:
		if !c.roles.Includes(role.Admin) {
			return nil, errNotAuthorized
		}
		h.mu.Lock()
		run, seq, dir := n.st.Running, n.seq, n.dir
		h.mu.Unlock()
		if run == nil || (ptr.ID() != "" && ptr.ID() != config.ActiveID) {
			return nil, nil
		}
		b, err := h.readConfig(dir, run.Hash)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		r := config.NewMachineConfig(rawConfig{b: b})
		r.Metadata().SetVersion(version(seq + 1))
		return r, nil
	}
	return nil, status.Errorf(codes.PermissionDenied, "resource type %q is not supported", ptr.Type())
}

func (s *cosiState) Get(ctx context.Context, ptr resource.Pointer, _ ...cosistate.GetOption) (resource.Resource, error) {
	r, err := s.resource(callOf(ctx), ptr)
	if err == nil && r == nil {
		err = inmem.ErrNotFound(ptr)
	}
	return r, err
}

func (s *cosiState) List(ctx context.Context, kind resource.Kind, _ ...cosistate.ListOption) (resource.List, error) {
	r, err := s.resource(callOf(ctx), resource.NewMetadata(kind.Namespace(), kind.Type(), "", resource.VersionUndefined))
	if err != nil || r == nil {
		return resource.List{}, err
	}
	return resource.List{Items: []resource.Resource{r}}, nil
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

// Watch sends the resource now and on every change, until ctx ends.
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

// WatchKind is Watch over the kind, whose one resource is the node's.
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
// wakes on every change of the node: Created (with initial, at once, and a
// Bootstrapped marker for kind watches), Updated when the resource's
// version moves, Destroyed when it goes.
func (s *cosiState) watch(ctx context.Context, ptr resource.Pointer, initial bool, send func([]cosistate.Event) bool) error {
	c := callOf(ctx)
	r, err := s.resource(c, ptr)
	if err != nil {
		return err
	}
	go func() {
		var evs []cosistate.Event
		if initial && r != nil {
			evs = append(evs, cosistate.Event{Type: cosistate.Created, Resource: r})
		}
		if initial && ptr.ID() == "" {
			evs = append(evs, cosistate.Event{Type: cosistate.Bootstrapped, Resource: resource.NewTombstone(resource.NewMetadata(ptr.Namespace(), ptr.Type(), "", resource.VersionUndefined))})
		}
		if len(evs) > 0 && !send(evs) {
			return
		}
		last := r
		for {
			s.h.mu.Lock()
			wait := c.n.changed
			s.h.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-wait:
			}
			cur, err := s.resource(c, ptr)
			var ev *cosistate.Event
			switch {
			case err != nil:
				ev = &cosistate.Event{Type: cosistate.Errored, Error: err}
			case cur == nil && last != nil:
				ev = &cosistate.Event{Type: cosistate.Destroyed, Resource: last}
			case cur != nil && last == nil:
				ev = &cosistate.Event{Type: cosistate.Created, Resource: cur}
			case cur != nil && !cur.Metadata().Version().Equal(last.Metadata().Version()):
				ev = &cosistate.Event{Type: cosistate.Updated, Resource: cur, Old: last}
			}
			if ev == nil {
				continue
			}
			last = cur
			if !send([]cosistate.Event{*ev}) || err != nil {
				return
			}
		}
	}()
	return nil
}
