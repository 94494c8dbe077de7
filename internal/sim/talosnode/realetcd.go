package talosnode

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rezuscloud/rezuscloud/internal/sim/kubeapi"
)

// A cluster whose Kubernetes API the host runs (kube.go) has a real etcd
// behind it: its snapshots are that etcd's own, its wipe removes that
// etcd's data, and its recovery restores the snapshot with etcdutl. What
// this file does for it, etcd.go and etcddata.go do for the simulated
// etcd of the other clusters.

// realEtcd reports whether n's cluster has a real etcd. Called with h.mu
// held.
func (h *Host) realEtcd(n *node) bool {
	if h.opts.KubeBin == "" || n.cluster() == "" {
		return false
	}
	_, ok := h.wantsKube(n)
	return ok
}

// realSnapshot writes a snapshot of the real etcd of cluster.
func (h *Host) realSnapshot(cluster string) (func(context.Context, io.Writer) error, error) {
	cp := h.kube.running(cluster)
	if cp == nil {
		return nil, status.Error(codes.Unavailable, "failed reading etcd snapshot: etcd does not answer yet: connection refused")
	}
	return func(ctx context.Context, w io.Writer) error {
		rc, err := cp.Snapshot(ctx)
		if err != nil {
			return fmt.Errorf("failed reading etcd snapshot: %w", err)
		}
		defer rc.Close()
		_, err = io.Copy(w, rc)
		return err
	}, nil
}

// receiveRealSnapshot keeps an uploaded snapshot of a real etcd as
// dir/name, after checking that it is one: a bbolt database followed by
// its SHA-256, as etcd's Maintenance.Snapshot streams it.
func receiveRealSnapshot(r io.Reader, dir, name string) error {
	f, err := os.CreateTemp(dir, ".tmp-"+name+"-*")
	if err != nil {
		return fmt.Errorf("error creating etcd recovery snapshot: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = io.Copy(f, r)
	if err == nil {
		err = checkRealSnapshot(f)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("error writing snapshot: %w", cerr)
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(dir, name))
}

// bboltMagic is the magic number of a bbolt database's meta page, at
// offset 16 of the file.
const bboltMagic = 0xED0CDAED

func checkRealSnapshot(f *os.File) error {
	refuse := func(format string, args ...any) error {
		return status.Errorf(codes.InvalidArgument, "error verifying snapshot: "+format, args...)
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	head := make([]byte, 32)
	n, _ := f.ReadAt(head, 0)
	if bytes.HasPrefix(head[:n], []byte(snapshotMagic)) {
		return refuse("a snapshot of the simulated etcd, but this cluster runs a real etcd behind its Kubernetes API")
	}
	if size < 4096+sha256.Size {
		return refuse("%d bytes are not an etcd snapshot", size)
	}
	if binary.LittleEndian.Uint32(head[16:20]) != bboltMagic {
		return refuse("not an etcd snapshot: no bbolt database")
	}
	sum := sha256.New()
	if _, err := io.Copy(sum, io.NewSectionReader(f, 0, size-sha256.Size)); err != nil {
		return err
	}
	want := make([]byte, sha256.Size)
	if _, err := f.ReadAt(want, size-sha256.Size); err != nil {
		return err
	}
	if got := sum.Sum(nil); !bytes.Equal(got, want) {
		return refuse("snapshot file integrity check failed: sha256 %x, recorded %x", got, want)
	}
	return nil
}

// startRealEtcd stops the control plane of n's cluster, if one runs, and
// gives it an empty etcd, or with recover the snapshot uploaded to n,
// restored with etcdutl. Bootstrap then starts the control plane again.
func (h *Host) startRealEtcd(ctx context.Context, n *node, o kubeapi.Options, cluster string, recover bool) error {
	<-h.kube.halt(cluster, nil)
	if !recover {
		return kubeapi.WipeEtcd(o.Dir)
	}
	file := filepath.Join(n.dir, recoveryFile)
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		return errNoRecovery
	}
	if err := kubeapi.RestoreEtcd(ctx, o, file); err != nil {
		return status.Errorf(codes.Internal, "error recovering etcd from the snapshot: %v", err)
	}
	os.Remove(file)
	return nil
}

// realEtcdLost stops the control plane of n's cluster and removes its
// etcd data when no member of the cluster is left: a reset on every
// control plane lost the cluster's etcd. Called with h.mu held.
func (h *Host) realEtcdLost(n *node) {
	if !h.realEtcd(n) {
		return
	}
	for m := range h.clusters[n.cluster()] {
		if m.st.Etcd.Member {
			return
		}
	}
	h.kube.halt(n.cluster(), kubeapi.WipeEtcd)
}
