package talosnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
)

// etcdCluster is a bootstrapped cluster of a host for the etcd tests.
type etcdCluster struct {
	h           *Host
	secrets     []byte
	cps, wks    []string // addresses
	cpIDs, wIDs []string // machine ids
}

// bootstrapped boots cps control planes and workers workers, bootstraps
// the first control plane and waits until every control plane is a member.
func bootstrapped(t *testing.T, h *Host, cps, workers int) *etcdCluster {
	t.Helper()
	c := &etcdCluster{h: h, secrets: bundle(t, "a")}
	c.cps, c.wks = bootCluster(t, h, c.secrets, cps, workers)
	for i := range cps + workers {
		id := fmt.Sprintf("vm-%d", i)
		if i < cps {
			c.cpIDs = append(c.cpIDs, id)
		} else {
			c.wIDs = append(c.wIDs, id)
		}
		waitRunning(t, h, id)
	}
	if err := adminClient(t, c.secrets, c.cps[0]).Bootstrap(ctxT(t), &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}
	c.waitMembers(t, c.cpIDs...)
	return c
}

// waitMembers waits until exactly the machines ids are etcd members.
func (c *etcdCluster) waitMembers(t *testing.T, ids ...string) {
	t.Helper()
	eventually(t, fmt.Sprintf("etcd members %v", ids), func() bool {
		for _, id := range c.cpIDs {
			info, _ := c.h.Node(id)
			if info.EtcdMember != slices.Contains(ids, id) {
				return false
			}
		}
		return true
	})
}

// snapshot takes a snapshot from the control plane at address a, and
// reads it as the simulated etcd's format.
func (c *etcdCluster) snapshot(t *testing.T, a string) ([]byte, *etcdData) {
	t.Helper()
	rc, err := adminClient(t, c.secrets, a).EtcdSnapshot(ctxT(t), &machine.EtcdSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("snapshot from %s: %v", a, err)
	}
	d, err := readSnapshot(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("snapshot from %s: %v", a, err)
	}
	return b, d
}

// TestEtcdSnapshotOfWrittenData: a snapshot from any member holds what was
// written to the cluster's etcd, in a format whose SHA-256 covers it, and
// its filler; a worker and a control plane that is not a member refuse.
func TestEtcdSnapshotOfWrittenData(t *testing.T) {
	h := openHost(t, "")
	c := bootstrapped(t, h, 3, 1)
	for k, v := range map[string]string{"/registry/configmaps/default/a": "alpha", "/registry/secrets/b": "beta"} {
		if err := h.EtcdPut(c.cpIDs[1], k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.SetEtcdFiller(c.cpIDs[0], 300<<10); err != nil {
		t.Fatal(err)
	}
	b, d := c.snapshot(t, c.cps[2])
	if string(d.KV["/registry/configmaps/default/a"]) != "alpha" || string(d.KV["/registry/secrets/b"]) != "beta" || len(d.KV) != 2 || d.Filler != 300<<10 || d.Revision != 3 {
		t.Fatalf("snapshot holds %+v", d)
	}
	if int64(len(b)) != d.size() || len(b) < 300<<10 {
		t.Fatalf("snapshot of %d bytes, size %d", len(b), d.size())
	}
	if v, ok, err := h.EtcdGet(c.cpIDs[0], "/registry/secrets/b"); err != nil || !ok || string(v) != "beta" {
		t.Fatalf("EtcdGet: %q %v %v", v, ok, err)
	}
	// One byte changed anywhere is caught.
	for _, i := range []int{len(snapshotMagic) + 5, len(b) / 2, len(b) - 1} {
		bad := bytes.Clone(b)
		bad[i] ^= 1
		if _, err := readSnapshot(bytes.NewReader(bad)); err == nil {
			t.Errorf("a snapshot with byte %d changed reads", i)
		}
	}
	if _, err := readSnapshot(bytes.NewReader(b[:len(b)-1])); err == nil {
		t.Error("a truncated snapshot reads")
	}

	ctx := ctxT(t)
	_, err := readAll(adminClient(t, c.secrets, c.wks[0]).EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{}))
	wantCode(t, "snapshot on a worker", err, codes.Unimplemented, "etcd snapshot is only available on control plane nodes")
	if err := adminClient(t, c.secrets, c.cps[1]).EtcdLeaveCluster(ctx, &machine.EtcdLeaveClusterRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err = readAll(adminClient(t, c.secrets, c.cps[1]).EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{}))
	wantCode(t, "snapshot on a control plane that left etcd", err, codes.Unavailable, "etcd is not running on this node")
}

func readAll(rc io.ReadCloser, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// TestEtcdSnapshotHangs: under the snapshot-hang fault a node sends the
// beginning of a snapshot and then nothing; the client's context cuts the
// stream off. Without the fault the same node streams it whole.
func TestEtcdSnapshotHangs(t *testing.T) {
	h := openHost(t, "")
	c := bootstrapped(t, h, 1, 0)
	if err := h.SetEtcdFiller(c.cpIDs[0], 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := h.SetFault(c.cpIDs[0], Fault{SnapshotHang: true}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	rc, err := adminClient(t, c.secrets, c.cps[0]).EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err == nil || len(b) == 0 || len(b) >= 1<<20 || time.Since(start) < 400*time.Millisecond {
		t.Fatalf("a hanging snapshot: %d bytes, %v after %s; want some bytes, then the deadline's error", len(b), err, time.Since(start))
	}
	if !strings.Contains(err.Error(), "DeadlineExceeded") && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a hanging snapshot ended with %v", err)
	}
	if err := h.SetFault(c.cpIDs[0], Fault{}); err != nil {
		t.Fatal(err)
	}
	if _, d := c.snapshot(t, c.cps[0]); d.Filler != 1<<20 {
		t.Fatalf("snapshot after the fault: %+v", d)
	}
}
