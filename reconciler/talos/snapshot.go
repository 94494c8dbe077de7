package talos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// SnapshotInfo is what the plane knows of a snapshot it streams.
type SnapshotInfo struct {
	// Machine is the label of the control plane the snapshot comes from.
	Machine string
	// RaftIndex and DBSizeBytes are what that member's EtcdStatus said
	// just before the snapshot began.
	RaftIndex   uint64
	DBSizeBytes int64
}

// Snapshot streams an etcd snapshot of the tenant's cluster from the first
// control plane by stable order (Order) whose etcd member is healthy: it
// answers EtcdStatus without errors, knows its cluster's leader, and its
// etcd service runs and passes its health check. The caller reads the
// stream to its end and closes it. ctx bounds the whole stream, and a
// stream that brings no byte for Options.SnapshotIdle fails with an error
// that says so. The stream runs on a connection of its own, closed by
// Close.
//
// Snapshot asks each control plane once, and gives a *WaitingError that
// says what is wrong with each when none can give a snapshot.
func (pl *Plane) Snapshot(ctx context.Context, tenant string, bundle []byte, ms []Machine) (io.ReadCloser, SnapshotInfo, error) {
	cps := controlPlanes(ms)
	if len(cps) == 0 {
		return nil, SnapshotInfo{}, &WaitingError{Tenant: tenant, Reason: "a control plane to take an etcd snapshot from: the tenant has none"}
	}
	var problems []string
	for _, m := range cps {
		s := memberHealth{problem: "no answer"}
		_ = pl.withClient(ctx, tenant, bundle, m, func(ctx context.Context, c *client.Client) error {
			s = etcdStatusOf(ctx, c)
			return nil
		})
		if s.problem != "" {
			problems = append(problems, m.label()+": "+s.problem)
			continue
		}
		r, err := pl.openSnapshot(ctx, tenant, bundle, m)
		if err != nil {
			problems = append(problems, err.Error()) // it names the machine
			continue
		}
		pl.log.Info("etcd snapshot", "tenant", tenant, "machine", m.ID, "raftIndex", s.raftIndex, "dbSize", s.dbSize)
		return r, SnapshotInfo{Machine: m.label(), RaftIndex: s.raftIndex, DBSizeBytes: s.dbSize}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, SnapshotInfo{}, err
	}
	return nil, SnapshotInfo{}, &WaitingError{Tenant: tenant,
		Reason: "a control plane whose etcd member is healthy, to take a snapshot from: " + strings.Join(problems, "; ")}
}

// openSnapshot starts the EtcdSnapshot stream of m and reads its first
// message, so that a machine that refuses the call is known here.
func (pl *Plane) openSnapshot(ctx context.Context, tenant string, bundle []byte, m Machine) (*snapshotStream, error) {
	c, closeConn, err := pl.pool.Admin(tenant, bundle, m.Address)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.label(), err)
	}
	sctx, cancel := context.WithCancelCause(ctx)
	s := &snapshotStream{ctx: sctx, cancel: cancel, closeConn: closeConn, machine: m.label(), idle: pl.opts.SnapshotIdle}
	s.stalled = fmt.Errorf("snapshot stream from %s stalled for %s", s.machine, s.idle)
	s.timer = time.AfterFunc(s.idle, func() { cancel(s.stalled) })
	s.timer.Stop()
	s.stream, err = c.MachineClient.EtcdSnapshot(sctx, &machine.EtcdSnapshotRequest{})
	if err == nil {
		s.buf, err = s.recv()
	}
	if err != nil && !errors.Is(err, io.EOF) {
		s.Close()
		return nil, err
	}
	s.err = err
	return s, nil
}

// snapshotStream is an EtcdSnapshot stream as an io.ReadCloser, cut off
// when a message does not come within idle.
type snapshotStream struct {
	ctx       context.Context
	cancel    context.CancelCauseFunc
	closeConn func()
	stream    machine.MachineService_EtcdSnapshotClient
	machine   string
	idle      time.Duration
	timer     *time.Timer
	stalled   error // the cause of a cut-off for idleness

	buf []byte
	err error // once set, every further Read returns it

	closeOnce sync.Once
}

// errSnapshotClosed is the cause of a stream's end by Close.
var errSnapshotClosed = errors.New("snapshot stream closed")

func (s *snapshotStream) Read(p []byte) (int, error) {
	for len(s.buf) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		s.buf, s.err = s.recv()
	}
	n := copy(p, s.buf)
	s.buf = s.buf[n:]
	return n, nil
}

// recv waits for the next message, for idle at most: the idle timer runs
// only while the stream is waited for, not while the reader works.
func (s *snapshotStream) recv() ([]byte, error) {
	s.timer.Reset(s.idle)
	data, err := s.stream.Recv()
	s.timer.Stop()
	if err != nil {
		return nil, s.ended(err)
	}
	if e := data.GetMetadata().GetError(); e != "" { //nolint:staticcheck // how Talos reports an error inside a stream
		return nil, fmt.Errorf("etcd snapshot from %s: %s", s.machine, e)
	}
	return data.GetBytes(), nil
}

// ended is the error a Read returns for a stream that ended with err.
func (s *snapshotStream) ended(err error) error {
	cause := context.Cause(s.ctx)
	if d, ok := s.ctx.Deadline(); ok && cause == nil && status.Code(err) == codes.DeadlineExceeded && !time.Now().Before(d) {
		cause = context.DeadlineExceeded // the deadline passed; ctx has not seen it yet
	}
	switch {
	case errors.Is(err, io.EOF):
		return io.EOF
	case errors.Is(cause, s.stalled):
		return cause
	case cause != nil:
		return fmt.Errorf("etcd snapshot from %s: %w", s.machine, cause)
	}
	return fmt.Errorf("etcd snapshot from %s: %s", s.machine, callError("EtcdSnapshot", err))
}

// Close ends the stream and closes its connection.
func (s *snapshotStream) Close() error {
	s.closeOnce.Do(func() {
		s.timer.Stop()
		s.cancel(errSnapshotClosed)
		s.closeConn()
	})
	return nil
}
