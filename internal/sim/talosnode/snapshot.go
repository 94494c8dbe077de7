package talosnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rezuscloud/rezuscloud/internal/sim/kubeapi"
)

// snapshotChunk is the size of the messages of a snapshot stream: 1 MiB
// messages cost both ends about a fifth less CPU than 64 KiB ones
// (BenchmarkEtcdSnapshot).
const snapshotChunk = 1 << 20

// hangAfter is how much of a snapshot a node under the SnapshotHang fault
// sends before it hangs.
const hangAfter = 64 << 10

// EtcdSnapshot streams a snapshot of the cluster's etcd from the node's
// member, which must run and be healthy in a cluster with quorum. Under
// the SnapshotHang fault the stream stops after its first 64 KiB (a
// shorter snapshot before its end) until the call's context ends.
func (a *machineAPI) EtcdSnapshot(_ *machine.EtcdSnapshotRequest, srv machine.MachineService_EtcdSnapshotServer) error {
	h, n := a.h, callOf(srv.Context()).n
	ctx := srv.Context()
	write, hang, err := h.snapshotOf(n)
	if err != nil {
		return err
	}
	var out io.Writer = &dataSender{srv: srv}
	if hang {
		out = &hangingWriter{ctx: ctx, w: out, after: hangAfter}
	}
	bw := bufio.NewWriterSize(out, snapshotChunk)
	if err := write(ctx, bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil || !hang {
		return err
	}
	<-ctx.Done() // a snapshot shorter than hangAfter hangs before its end
	return status.FromContextError(ctx.Err()).Err()
}

// snapshotOf checks that n may give a snapshot and returns what writes
// it, and whether n hangs in the middle.
func (h *Host) snapshotOf(n *node) (func(context.Context, io.Writer) error, bool, error) {
	h.etcd.mu.Lock()
	defer h.etcd.mu.Unlock()
	h.mu.Lock()
	hang := n.fault.SnapshotHang
	cluster, err := h.snapshotCheck(n)
	real := err == nil && h.realEtcd(n)
	h.mu.Unlock()
	if err != nil {
		return nil, false, err
	}
	if real {
		write, err := h.realSnapshot(cluster)
		return write, hang, err
	}
	d, err := h.etcd.get(cluster)
	if err != nil {
		return nil, false, status.Error(codes.Internal, err.Error())
	}
	// d is never changed in place: a write replaces it.
	return func(_ context.Context, w io.Writer) error { return writeSnapshot(w, d) }, hang, nil
}

// snapshotCheck is the member check of EtcdSnapshot. Called with h.mu
// held.
func (h *Host) snapshotCheck(n *node) (string, error) {
	if err := onlyControlPlane(n, "etcd snapshot"); err != nil {
		return "", err
	}
	now := h.now()
	ms := h.members(n.cluster(), now)
	ok, _ := quorum(ms)
	switch {
	case !n.st.Etcd.Member || !n.running(now):
		return "", status.Error(codes.Unavailable, "failed reading etcd snapshot: etcd is not running on this node: dial tcp 127.0.0.1:2379: connect: connection refused")
	case n.fault.Unhealthy == "etcd":
		return "", errors.New("failed reading etcd snapshot: etcdserver: request timed out")
	case !ok:
		return "", errors.New("failed reading etcd snapshot: etcdserver: no leader")
	}
	return n.cluster(), nil
}

// dataSender sends what is written to it as common.Data messages.
type dataSender struct {
	srv machine.MachineService_EtcdSnapshotServer
}

func (s *dataSender) Write(p []byte) (int, error) {
	if err := s.srv.Send(&common.Data{Bytes: p}); err != nil {
		return 0, err
	}
	return len(p), nil
}

// hangingWriter passes on the first after bytes, then blocks until ctx
// ends, as a node whose disk stopped answering.
type hangingWriter struct {
	ctx   context.Context
	w     io.Writer
	after int
}

func (w *hangingWriter) Write(p []byte) (int, error) {
	if w.after <= 0 {
		<-w.ctx.Done()
		return 0, status.FromContextError(w.ctx.Err()).Err()
	}
	n := min(len(p), w.after)
	m, err := w.w.Write(p[:n])
	w.after -= m
	if err != nil || m == len(p) {
		return m, err
	}
	_, err = w.Write(p[m:])
	return m, err
}

// etcdCluster returns the cluster of the machine with key, and checks
// that its etcd has quorum, as a client of it needs. Called with h.mu
// held.
func (h *Host) etcdCluster(key string) (string, error) {
	n := h.lookup(key)
	switch {
	case n == nil:
		return "", fmt.Errorf("etcd: no machine %q", key)
	case n.cluster() == "":
		return "", fmt.Errorf("etcd: machine %s has no config, so no cluster", key)
	case h.realEtcd(n):
		return "", fmt.Errorf("etcd: the cluster of %s runs a real etcd behind its Kubernetes API: write to it and read it through that API", key)
	}
	ms := h.members(n.cluster(), h.now())
	if len(ms) == 0 {
		return "", fmt.Errorf("etcd of the cluster of %s: no member: it is not bootstrapped, or it lost its etcd", key)
	}
	if ok, _ := quorum(ms); !ok {
		return "", fmt.Errorf("etcd of the cluster of %s: etcdserver: no leader", key)
	}
	return n.cluster(), nil
}

// update changes the etcd data of machine key's cluster through change,
// on a copy, as a write to that etcd.
func (h *Host) update(key string, change func(*etcdData)) error {
	h.etcd.mu.Lock()
	defer h.etcd.mu.Unlock()
	h.mu.Lock()
	cluster, err := h.etcdCluster(key)
	h.mu.Unlock()
	if err != nil {
		return err
	}
	d, err := h.etcd.get(cluster)
	if err != nil {
		return err
	}
	next := &etcdData{Revision: d.Revision + 1, Filler: d.Filler, KV: maps.Clone(d.KV)}
	if next.KV == nil {
		next.KV = map[string][]byte{}
	}
	change(next)
	return h.etcd.put(cluster, next)
}

// EtcdPut writes key in the etcd of the cluster of the machine (by id,
// name, host name or address), which must have quorum. It is a hook for
// tests and benchmarks, not part of the Talos API.
func (h *Host) EtcdPut(machineID, key string, value []byte) error {
	if key == "" || len(key) > maxSnapshotEntry || len(value) > maxSnapshotEntry {
		return fmt.Errorf("etcd put: a key of 1 to %d bytes and a value of at most as many", maxSnapshotEntry)
	}
	return h.update(machineID, func(d *etcdData) { d.KV[key] = append([]byte(nil), value...) })
}

// SetEtcdFiller makes the etcd of the machine's cluster n bytes larger
// than its keys and values: its snapshots carry n generated bytes, which
// the host never holds. A hook for benchmarks, as EtcdPut.
func (h *Host) SetEtcdFiller(machineID string, n int64) error {
	if n < 0 {
		return fmt.Errorf("etcd filler: %d bytes", n)
	}
	return h.update(machineID, func(d *etcdData) { d.Filler = n })
}

// EtcdGet reads key from the etcd of the cluster of the machine, which
// must have quorum. A hook for tests, as EtcdPut.
func (h *Host) EtcdGet(machineID, key string) ([]byte, bool, error) {
	h.etcd.mu.Lock()
	defer h.etcd.mu.Unlock()
	h.mu.Lock()
	cluster, err := h.etcdCluster(machineID)
	h.mu.Unlock()
	if err != nil {
		return nil, false, err
	}
	d, err := h.etcd.get(cluster)
	if err != nil {
		return nil, false, err
	}
	v, ok := d.KV[key]
	return append([]byte(nil), v...), ok, nil
}

// WipeEtcd makes every control plane of the cluster of the machine (by
// id, name, host name or address) lose its etcd data and membership, and
// an etcd snapshot uploaded for recovery, as after losing all control
// planes' disks: the cluster's etcd has no quorum, and no data, until a
// bootstrap. The nodes keep running their configs. A cluster's Kubernetes
// API stops, and its etcd data go, before WipeEtcd returns. A hook for
// tests, as EtcdPut.
func (h *Host) WipeEtcd(machineID string) error {
	h.mu.Lock()
	n := h.lookup(machineID)
	if n == nil || n.cluster() == "" {
		h.mu.Unlock()
		return fmt.Errorf("wipe etcd: no machine %q with a config", machineID)
	}
	cluster := n.cluster()
	h.mu.Unlock()
	defer h.etcd.lock(cluster)()
	h.mu.Lock()
	now, real := h.now(), h.realEtcd(n)
	var saves []func() error
	for m := range h.clusters[cluster] {
		h.advance(m, now)
		if !m.controlPlane() {
			continue
		}
		h.wipeData(m)
		saves = append(saves, h.changed(m))
	}
	h.mu.Unlock()
	var errs []error
	for _, save := range saves {
		errs = append(errs, save())
	}
	h.etcd.mu.Lock()
	errs = append(errs, h.etcd.drop(cluster))
	h.etcd.mu.Unlock()
	if real {
		<-h.kube.halt(cluster, kubeapi.WipeEtcd)
	}
	return errors.Join(errs...)
}
