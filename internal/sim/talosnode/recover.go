package talosnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rezuscloud/rezuscloud/internal/sim/kubeapi"
)

// Files of a control plane's disk that hold an etcd snapshot uploaded by
// EtcdRecover for the next Bootstrap with RecoverEtcd, as Talos keeps it
// in /var/lib/etcd.snapshot on EPHEMERAL: a real etcd's snapshot as it
// came, or a simulated one's data, decoded.
const (
	recoveryFile    = "etcd.snapshot"
	recoverySimFile = "etcd.snapshot.json"
)

// errNoRecovery is Bootstrap's answer to RecoverEtcd when no snapshot was
// uploaded: Talos's etcd fails to read the file.
var errNoRecovery = status.Error(codes.FailedPrecondition, "error verifying snapshot: open /var/lib/etcd.snapshot: no such file or directory: upload one with EtcdRecover first")

// dropRecovery removes n's uploaded snapshot, if any.
func (h *Host) dropRecovery(n *node) {
	for _, f := range []string{recoveryFile, recoverySimFile} {
		os.Remove(filepath.Join(n.dir, f))
	}
}

// EtcdRecover receives an etcd snapshot on a running control plane and
// keeps it for the next Bootstrap with RecoverEtcd. Unlike Talos, which
// checks it only then, the node checks it as it comes: a stream that is
// not a whole snapshot of its cluster's kind of etcd (simulated, or real
// for a cluster with a Kubernetes API) is refused, and nothing is kept.
func (a *machineAPI) EtcdRecover(srv machine.MachineService_EtcdRecoverServer) error {
	h, n := a.h, callOf(srv.Context()).n
	h.mu.Lock()
	e := a.begin(n, "EtcdRecover")
	var err error
	if !n.running(h.now()) {
		err = status.Error(codes.FailedPrecondition, "etcd service is not ready for recovery yet")
	} else {
		err = onlyControlPlane(n, "etcd recover")
	}
	real := h.realEtcd(n)
	h.mu.Unlock()
	if err == nil {
		e.Size, err = h.receiveRecovery(n, &dataReceiver{srv: srv}, real)
	}
	a.journal(n, e, err)
	if err != nil {
		return err
	}
	return srv.SendAndClose(&machine.EtcdRecoverResponse{Messages: []*machine.EtcdRecover{{Metadata: meta(n)}}})
}

// receiveRecovery reads and checks an uploaded snapshot and keeps it on
// n's disk, in place of any former one; it returns the bytes read.
func (h *Host) receiveRecovery(n *node, r io.Reader, real bool) (int64, error) {
	h.dropRecovery(n)
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return 0, fmt.Errorf("error creating etcd recovery snapshot: %w", err)
	}
	cr := &countingReader{r: r}
	if real {
		err := receiveRealSnapshot(cr, n.dir, recoveryFile)
		return cr.n, err
	}
	d, err := readSnapshot(cr)
	if err != nil {
		return cr.n, status.Errorf(codes.InvalidArgument, "error verifying snapshot: %v", err)
	}
	b, err := json.Marshal(d)
	if err == nil {
		err = writeFile(n.dir, recoverySimFile, b)
	}
	if err != nil {
		return cr.n, fmt.Errorf("error writing snapshot: %w", err)
	}
	return cr.n, nil
}

// recovered returns the etcd data of the simulated snapshot uploaded to
// n.
func (h *Host) recovered(n *node) (*etcdData, error) {
	p := filepath.Join(n.dir, recoverySimFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNoRecovery
	}
	d := &etcdData{}
	if err == nil {
		err = json.Unmarshal(b, d)
	}
	if err != nil {
		return nil, fmt.Errorf("error verifying snapshot: %w", err)
	}
	return d, nil
}

// startEtcd gives the cluster of n, which n is bootstrapping, its etcd
// data: none, or with recover the snapshot uploaded to n. With ko, the
// cluster's etcd is the real one of its Kubernetes API.
func (h *Host) startEtcd(ctx context.Context, n *node, cluster string, recover bool, ko *kubeapi.Options) error {
	if ko != nil {
		return h.startRealEtcd(ctx, n, *ko, cluster, recover)
	}
	d := &etcdData{}
	if recover {
		var err error
		if d, err = h.recovered(n); err != nil {
			return err
		}
	}
	h.etcd.mu.Lock()
	err := h.etcd.put(cluster, d)
	h.etcd.mu.Unlock()
	if err != nil || !recover {
		return err
	}
	os.Remove(filepath.Join(n.dir, recoverySimFile)) // used: the cluster's etcd holds it now
	return nil
}

// dataReceiver reads the data of an EtcdRecover stream.
type dataReceiver struct {
	srv machine.MachineService_EtcdRecoverServer
	buf []byte
}

func (r *dataReceiver) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		m, err := r.srv.Recv()
		if err != nil {
			return 0, err
		}
		r.buf = m.GetBytes()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n += int64(n)
	return n, err
}
