package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdDataDir is where the control plane's etcd keeps its data.
func etcdDataDir(dir string) string { return filepath.Join(dir, "etcd") }

// etcdClient is a client of the control plane's etcd.
func (c *ControlPlane) etcdClient(ctx context.Context) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{c.opts.url(EtcdClientPort, "http")}, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop(), Context: ctx,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd on %s: %w", c.opts.Address, err)
	}
	return cli, nil
}

// EtcdStatus is what the control plane's etcd member says of itself.
type EtcdStatus struct {
	DBSize, DBSizeInUse int64
	RaftIndex, RaftTerm uint64
	Revision            int64
}

// EtcdStatus asks the control plane's etcd for its status.
func (c *ControlPlane) EtcdStatus(ctx context.Context) (EtcdStatus, error) {
	cli, err := c.etcdClient(ctx)
	if err != nil {
		return EtcdStatus{}, err
	}
	defer cli.Close()
	r, err := cli.Status(ctx, c.opts.url(EtcdClientPort, "http"))
	if err != nil {
		return EtcdStatus{}, fmt.Errorf("etcd status on %s: %w", c.opts.Address, err)
	}
	return EtcdStatus{DBSize: r.DbSize, DBSizeInUse: r.DbSizeInUse, RaftIndex: r.RaftIndex, RaftTerm: r.RaftTerm, Revision: r.Header.GetRevision()}, nil
}

// Snapshot streams a snapshot of the control plane's etcd, as
// etcdctl snapshot save takes it (etcd's Maintenance.Snapshot): the bbolt
// database followed by its SHA-256. The caller reads it to the end and
// closes it; ctx bounds the whole stream.
func (c *ControlPlane) Snapshot(ctx context.Context) (io.ReadCloser, error) {
	cli, err := c.etcdClient(ctx)
	if err != nil {
		return nil, err
	}
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd snapshot on %s: %w", c.opts.Address, err)
	}
	return &closeBoth{ReadCloser: rc, also: cli.Close}, nil
}

type closeBoth struct {
	io.ReadCloser
	also func() error
}

func (c *closeBoth) Close() error { return errors.Join(c.ReadCloser.Close(), c.also()) }

// WipeEtcd removes the etcd data in dir, a control plane's directory that
// no control plane runs on: a start there begins with an empty etcd.
func WipeEtcd(dir string) error {
	if err := os.RemoveAll(etcdDataDir(dir)); err != nil {
		return fmt.Errorf("kubeapi: wipe etcd: %w", err)
	}
	return nil
}

// RestoreEtcd replaces the etcd data of o.Dir, where no control plane
// runs, by the snapshot in the file snapshot, with etcdutl snapshot
// restore (from o.Bin), which checks the snapshot's SHA-256: a new etcd
// cluster of one member, the one Start runs, holding the snapshot's
// keys. On an error the former data are gone all the same.
func RestoreEtcd(ctx context.Context, o Options, snapshot string) error {
	if err := o.defaults(); err != nil {
		return err
	}
	if err := WipeEtcd(o.Dir); err != nil {
		return err
	}
	tmp := etcdDataDir(o.Dir) + ".restore"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	peer := o.url(EtcdPeerPort, "http")
	cmd := exec.CommandContext(ctx, filepath.Join(o.Bin, "etcdutl"), "snapshot", "restore", snapshot,
		"--data-dir="+tmp, "--name="+etcdName, "--initial-cluster="+etcdName+"="+peer, "--initial-advertise-peer-urls="+peer)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("kubeapi: etcdutl snapshot restore: %w: %s", err, lastBytes(out, 2048))
	}
	return os.Rename(tmp, etcdDataDir(o.Dir))
}

// lastBytes is the last n bytes of b, as a string.
func lastBytes(b []byte, n int) string { return string(b[max(0, len(b)-n):]) }
