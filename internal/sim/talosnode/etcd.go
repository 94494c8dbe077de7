package talosnode

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// member is an etcd member of a cluster at one instant.
type member struct {
	n       *node
	healthy bool
}

// members returns the etcd members of a cluster, oldest first. A member
// is healthy while its node runs and its etcd is not faulted. Called with
// h.mu held.
func (h *Host) members(cluster string, now time.Time) []member {
	if cluster == "" {
		return nil
	}
	nodes := make([]*node, 0, len(h.clusters[cluster]))
	for m := range h.clusters[cluster] {
		if m.controlPlane() {
			nodes = append(nodes, m)
		}
	}
	for _, m := range nodes {
		h.advance(m, now)
	}
	var out []member
	for _, m := range nodes {
		if m.st.Etcd.Member && m.cluster() == cluster {
			v := m.viewAt(now)
			out = append(out, member{n: m, healthy: m.running(now) && !v.Down && m.fault.Unhealthy != "etcd"})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].n.st.Etcd, out[j].n.st.Etcd
		if !a.JoinedAt.Equal(b.JoinedAt) {
			return a.JoinedAt.Before(b.JoinedAt)
		}
		return out[i].n.st.ID < out[j].n.st.ID
	})
	return out
}

// quorum reports whether more than half of the members are healthy, and
// the leader: the oldest healthy member.
func quorum(ms []member) (bool, *node) {
	healthy := 0
	var leader *node
	for _, m := range ms {
		if m.healthy {
			healthy++
			if leader == nil {
				leader = m.n
			}
		}
	}
	return len(ms) > 0 && 2*healthy > len(ms), leader
}

// notifyCluster wakes the streams of every node of n's cluster: their
// etcd and API server states follow the cluster's. Called with h.mu held.
func (h *Host) notifyCluster(n *node) {
	for m := range h.clusters[n.cluster()] {
		if m != n {
			h.notify(m)
		}
	}
}

func onlyControlPlane(n *node, api string) error {
	if n.controlPlane() {
		return nil
	}
	return status.Errorf(codes.Unimplemented, "%s is only available on control plane nodes", api)
}

// EtcdMemberList lists the members of the node's etcd cluster.
func (a *machineAPI) EtcdMemberList(ctx context.Context, in *machine.EtcdMemberListRequest) (*machine.EtcdMemberListResponse, error) {
	h, n := a.h, callOf(ctx).n
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := onlyControlPlane(n, "member list"); err != nil {
		return nil, err
	}
	ms := h.members(n.cluster(), h.now())
	switch ok, _ := quorum(ms); {
	case len(ms) == 0:
		return nil, errors.New("no controlplane endpoints discovered yet")
	case in.QueryLocal && !n.st.Etcd.Member:
		return nil, status.Error(codes.Unavailable, "etcd is not running on this node: dial tcp 127.0.0.1:2379: connect: connection refused")
	case !ok:
		return nil, errors.New("etcdserver: no leader")
	}
	msg := &machine.EtcdMembers{Metadata: meta(n)}
	for _, m := range ms {
		msg.LegacyMembers = append(msg.LegacyMembers, m.n.hostname())
		msg.Members = append(msg.Members, &machine.EtcdMember{
			Id: m.n.st.Etcd.ID, Hostname: m.n.hostname(),
			PeerUrls:   []string{fmt.Sprintf("https://%s:2380", m.n.st.Address)},
			ClientUrls: []string{fmt.Sprintf("https://%s:2379", m.n.st.Address)},
		})
	}
	return &machine.EtcdMemberListResponse{Messages: []*machine.EtcdMembers{msg}}, nil
}

// EtcdStatus is the status of the node's own etcd member. The database
// size of a simulated etcd is the size of its snapshot, and its raft index
// grows with time and with every write; a real etcd reports its own.
func (a *machineAPI) EtcdStatus(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdStatusResponse, error) {
	h, n := a.h, callOf(ctx).n
	st, realCluster, err := h.etcdStatus(n)
	if err != nil {
		return nil, err
	}
	if cp := h.kube.running(realCluster); realCluster != "" && cp != nil {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if rs, err := cp.EtcdStatus(sctx); err == nil {
			st.DbSize, st.DbSizeInUse, st.RaftIndex, st.RaftAppliedIndex = rs.DBSize, rs.DBSizeInUse, rs.RaftIndex, rs.RaftIndex
		}
	}
	return &machine.EtcdStatusResponse{Messages: []*machine.EtcdStatus{{Metadata: meta(n), MemberStatus: st}}}, nil
}

// etcdStatus is EtcdStatus as the host knows it, and n's cluster if it
// has a real etcd.
func (h *Host) etcdStatus(n *node) (*machine.EtcdMemberStatus, string, error) {
	h.etcd.mu.Lock()
	defer h.etcd.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := onlyControlPlane(n, "etcd status"); err != nil {
		return nil, "", err
	}
	now := h.now()
	ms := h.members(n.cluster(), now)
	if !n.st.Etcd.Member {
		return nil, "", errors.New("failed to query etcd status: context deadline exceeded")
	}
	ok, leader := quorum(ms)
	st := &machine.EtcdMemberStatus{
		MemberId: n.st.Etcd.ID, ProtocolVersion: "3.6.5", StorageVersion: "3.6.0",
		DbSize: 4 << 20, DbSizeInUse: 2 << 20,
		RaftTerm: uint64(2 + len(ms)), RaftIndex: uint64(now.Sub(n.st.Etcd.JoinedAt) / time.Second * 10),
	}
	var realCluster string
	if h.realEtcd(n) {
		realCluster = n.cluster()
	} else {
		if d, err := h.etcd.get(n.cluster()); err == nil {
			st.DbSize, st.DbSizeInUse = d.size(), d.size()
			st.RaftIndex += uint64(d.Revision)
		}
	}
	st.RaftAppliedIndex = st.RaftIndex
	if ok && leader != nil {
		st.Leader = leader.st.Etcd.ID
	}
	if n.fault.Unhealthy == "etcd" {
		st.Errors = []string{"etcdserver: request timed out"}
	}
	return st, realCluster, nil
}

// EtcdLeaveCluster removes the node's own member from its cluster.
func (a *machineAPI) EtcdLeaveCluster(ctx context.Context, _ *machine.EtcdLeaveClusterRequest) (*machine.EtcdLeaveClusterResponse, error) {
	h, n := a.h, callOf(ctx).n
	h.mu.Lock()
	e := a.begin(n, "EtcdLeaveCluster")
	err := onlyControlPlane(n, "etcd leave")
	if err == nil {
		ms := h.members(n.cluster(), h.now())
		switch {
		case !n.st.Etcd.Member:
			err = errors.New("failed to leave cluster: etcdserver: member not found")
		case len(ms) == 1:
			err = errors.New("failed to leave cluster: etcdserver: re-configuration failed due to not enough started members")
		}
	}
	if err != nil {
		h.mu.Unlock()
		a.journal(n, e, err)
		return nil, err
	}
	n.st.Etcd.Member, n.st.Etcd.LeftAt = false, h.now()
	save := h.changed(n)
	h.notifyCluster(n)
	h.mu.Unlock()
	err = save()
	a.journal(n, e, err)
	if err != nil {
		return nil, err
	}
	return &machine.EtcdLeaveClusterResponse{Messages: []*machine.EtcdLeaveCluster{{Metadata: meta(n)}}}, nil
}

// EtcdRemoveMemberByID removes another member from the node's cluster.
func (a *machineAPI) EtcdRemoveMemberByID(ctx context.Context, in *machine.EtcdRemoveMemberByIDRequest) (*machine.EtcdRemoveMemberByIDResponse, error) {
	h, n := a.h, callOf(ctx).n
	h.mu.Lock()
	e := a.begin(n, "EtcdRemoveMemberByID")
	e.MemberID = in.MemberId
	var target *node
	err := onlyControlPlane(n, "etcd remove member")
	if err == nil {
		for _, m := range h.members(n.cluster(), h.now()) {
			if m.n.st.Etcd.ID == in.MemberId {
				target = m.n
			}
		}
		if target == nil {
			err = status.Error(codes.NotFound, "etcdserver: member not found")
		}
	}
	if err != nil {
		h.mu.Unlock()
		a.journal(n, e, err)
		return nil, err
	}
	target.st.Etcd.Member, target.st.Etcd.LeftAt = false, h.now()
	saveTarget := h.changed(target)
	h.notifyCluster(n)
	h.mu.Unlock()
	err = saveTarget()
	a.journal(n, e, err)
	if err != nil {
		return nil, err
	}
	return &machine.EtcdRemoveMemberByIDResponse{Messages: []*machine.EtcdRemoveMemberByID{{Metadata: meta(n)}}}, nil
}
