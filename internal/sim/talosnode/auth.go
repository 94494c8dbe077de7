package talosnode

import (
	"context"
	"errors"
	"net/netip"
	"path"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// errNotAuthorized is Talos's answer to a client whose role may not call a
// method.
var errNotAuthorized = status.Error(codes.PermissionDenied, "not authorized")

var (
	readers   = role.MakeSet(role.Admin, role.Operator, role.Reader)
	operators = role.MakeSet(role.Admin, role.Operator)
	admins    = role.MakeSet(role.Admin)
)

// rules are the roles that may call each method, as Talos's machined
// authorizes them; methods not listed need os:admin.
var rules = map[string]role.Set{
	"/machine.MachineService/ApplyConfiguration":   admins,
	"/machine.MachineService/Bootstrap":            admins,
	"/machine.MachineService/Dmesg":                readers,
	"/machine.MachineService/EtcdLeaveCluster":     admins,
	"/machine.MachineService/EtcdMemberList":       readers,
	"/machine.MachineService/EtcdRemoveMemberByID": admins,
	"/machine.MachineService/EtcdSnapshot":         role.MakeSet(role.Admin, role.EtcdBackup),
	"/machine.MachineService/EtcdStatus":           readers,
	"/machine.MachineService/Events":               readers,
	"/machine.MachineService/LoadAvg":              readers,
	"/machine.MachineService/Logs":                 readers,
	"/machine.MachineService/Memory":               readers,
	"/machine.MachineService/Reboot":               operators,
	"/machine.MachineService/Reset":                admins,
	"/machine.MachineService/Rollback":             admins,
	"/machine.MachineService/ServiceList":          readers,
	"/machine.MachineService/ServiceRestart":       operators,
	"/machine.MachineService/Upgrade":              admins,
	"/machine.MachineService/Version":              readers,
	"/machine.LifecycleService/Upgrade":            admins,
	"/cosi.resource.State/Get":                     readers,
	"/cosi.resource.State/List":                    readers,
	"/cosi.resource.State/Watch":                   readers,
}

// inMaintenance are the methods the maintenance server has besides
// ApplyConfiguration; they need os:admin, which no maintenance client has.
var inMaintenance = map[string]bool{
	"/machine.MachineService/Version": true, "/machine.MachineService/Upgrade": true,
	"/machine.MachineService/Reset": true, "/machine.MachineService/MetaWrite": true,
	"/machine.MachineService/MetaDelete": true,
}

// call is what a handler gets to know about its request.
type call struct {
	n     *node
	roles role.Set
	// proxied is set when another node's apid forwarded the call to n
	// (its "node" header): the call's streams end when n goes down, as
	// apid's stream to n breaks, while the connection stays up.
	proxied bool
	// endWatch ends a COSI watch's stream with its cause, which the
	// stream then returns (see streamInterceptor); nil for other calls.
	endWatch context.CancelCauseFunc
	// targets are the nodes an events stream's "nodes" header names, as
	// apid fans it out to each of them; nil without the header.
	targets []eventTarget
}

// eventTarget is one node of a fanned-out events stream: the name the
// client gave it, which apid puts in each message's metadata, and the
// node, nil when no node has that name or address.
type eventTarget struct {
	name string
	n    *node
}

// watchMethod is the COSI method of every watch.
const watchMethod = "/cosi.resource.State/Watch"

// errWatchBroken ends the watches of a node whose fault breaks them.
var errWatchBroken = status.Error(codes.Unavailable, "connection error: watch stream reset by peer")

// errProxyBroken ends the watches that apid forwarded to a node that went
// down.
var errProxyBroken = status.Error(codes.Unavailable, "connection error: the forwarded stream to the node was reset: it went down")

type callKey struct{}

func callOf(ctx context.Context) *call { return ctx.Value(callKey{}).(*call) }

func (h *Host) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if resp, ok, err := h.fanOutUnary(ctx, req, info, handler); ok {
		return resp, err
	}
	return h.unaryOne(ctx, req, info, handler)
}

func (h *Host) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := h.authorize(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	if info.FullMethod != watchMethod {
		return handler(srv, &ctxStream{ServerStream: ss, ctx: ctx})
	}
	ctx, end := context.WithCancelCause(ctx)
	defer end(nil)
	callOf(ctx).endWatch = end
	err = handler(srv, &ctxStream{ServerStream: ss, ctx: ctx})
	if cause := context.Cause(ctx); errors.Is(cause, errWatchBroken) || errors.Is(cause, errProxyBroken) {
		return cause
	}
	return err
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }

// authorize finds the node a request is for (the one whose address it
// reached, or the one its "node" header names, as apid proxies), and
// checks the client's role, from the Organization of its certificate.
func (h *Host) authorize(ctx context.Context, method string) (context.Context, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "no peer")
	}
	addr, _ := addrOf(p.LocalAddr)
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.byAddr[addr]
	if n == nil {
		return nil, status.Errorf(codes.Unavailable, "no machine at %s", addr)
	}
	reached := n
	var targets []eventTarget
	if method == eventsMethod && n.st.Running != nil {
		targets = h.fanOut(ctx, n)
	}
	n, err := h.proxied(ctx, n)
	if targets != nil {
		n, err = reached, nil
	}
	if err != nil {
		return nil, err
	}
	now := h.now()
	h.advance(n, now)
	if v := n.viewAt(now); v.Down || n.fault.Refuse {
		return nil, status.Errorf(codes.Unavailable, "connection error: dial tcp %s:50000: connect: connection refused", n.st.Address)
	}
	if method == watchMethod && n.fault.WatchBroken {
		return nil, errWatchBroken
	}
	roles := peerRoles(p)
	if n.st.Running == nil {
		switch {
		case method == "/machine.MachineService/ApplyConfiguration":
		case path.Dir(method) == "/cosi.resource.State":
			roles = role.MakeSet(role.Reader)
		case inMaintenance[method]:
			return nil, status.Error(codes.Unimplemented, "API is not implemented in maintenance mode")
		default:
			return nil, status.Errorf(codes.Unimplemented, "method %s not implemented", path.Base(method))
		}
	} else {
		need, ok := rules[method]
		if !ok {
			need = admins
		}
		if !roles.IncludesAny(need) {
			return nil, errNotAuthorized
		}
	}
	return context.WithValue(ctx, callKey{}, &call{n: n, roles: roles, proxied: n != reached, targets: targets}), nil
}

// eventsMethod is the machine API's events stream, which apid fans out
// to several nodes.
const eventsMethod = "/machine.MachineService/Events"

// fanOut returns the nodes of a request's "nodes" header, which apid
// fans an events stream out to; nil without the header. Called with h.mu
// held.
func (h *Host) fanOut(ctx context.Context, n *node) []eventTarget {
	md, _ := metadata.FromIncomingContext(ctx)
	names := md.Get("nodes")
	if len(names) == 0 {
		return nil
	}
	out := make([]eventTarget, 0, len(names))
	for _, name := range names {
		t := h.lookup(name)
		if t != nil && t.cluster() != n.cluster() {
			t = nil
		}
		out = append(out, eventTarget{name: name, n: t})
	}
	return out
}

// proxied returns the node a request's "node" header names, if another
// than the one it reached: apid forwards it there. Called with h.mu held.
func (h *Host) proxied(ctx context.Context, n *node) (*node, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	targets := md.Get("node")
	if len(targets) == 0 {
		targets = md.Get("nodes")
	}
	switch {
	case len(targets) == 0:
		return n, nil
	case len(targets) > 1:
		return nil, status.Error(codes.Unimplemented, "the simulated apid does not proxy to several nodes at once")
	case n.st.Running == nil:
		return n, nil // the maintenance server does not proxy
	}
	var t *node
	if a, err := netip.ParseAddr(targets[0]); err == nil {
		t = h.byAddr[a]
	} else {
		t = h.lookup(targets[0])
	}
	switch {
	case t == n:
		return n, nil
	case t == nil:
		return nil, status.Errorf(codes.Unavailable, "connection error: dial tcp %s:50000: connect: connection refused", targets[0])
	case t.cluster() != n.cluster():
		return nil, status.Error(codes.Unavailable, "connection error: remote error: tls: bad certificate")
	}
	return t, nil
}

// peerRoles returns the roles in the Organization of the client's
// verified certificate.
func peerRoles(p *peer.Peer) role.Set {
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return role.MakeSet()
	}
	roles, _ := role.Parse(info.State.VerifiedChains[0][0].Subject.Organization)
	return roles
}
