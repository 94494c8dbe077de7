package talosnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
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
	if st, err := adminClient(t, c.secrets, c.cps[0]).EtcdStatus(ctxT(t)); err != nil || st.Messages[0].MemberStatus.DbSize != int64(len(b)) {
		t.Fatalf("EtcdStatus after the writes: %v %v; want a database of the snapshot's %d bytes", st, err, len(b))
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

// resetEphemeral resets the node at a as the restore of a cluster does:
// EPHEMERAL only, not gracefully, with a reboot.
func (c *etcdCluster) resetEphemeral(t *testing.T, a string) {
	t.Helper()
	err := adminClient(t, c.secrets, a).ResetGeneric(ctxT(t), &machine.ResetRequest{
		Graceful: false, Reboot: true,
		SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "EPHEMERAL", Wipe: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestResetEphemeralKeepsTheConfig: a reset of EPHEMERAL only brings a
// control plane back running the same config, without etcd data; one
// reset while the others run rejoins them and the data are there, and
// when all are reset the cluster's etcd is gone: EtcdGet fails and a
// bootstrap starts it empty. A partition other than STATE and EPHEMERAL
// is refused.
func TestResetEphemeralKeepsTheConfig(t *testing.T) {
	h := openHost(t, "")
	c := bootstrapped(t, h, 3, 0)
	if err := h.EtcdPut(c.cpIDs[0], "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// A config applied in place differs from the user data the machine
	// booted with, which a wipe of the whole disk would bring back.
	_, err := adminClient(t, c.secrets, c.cps[2]).ApplyConfiguration(ctxT(t), &machine.ApplyConfigurationRequest{
		Data: machineConfig(t, c.secrets, "controlplane", false, labelPatch), Mode: machine.ApplyConfigurationRequest_NO_REBOOT})
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]NodeInfo{}
	for _, id := range c.cpIDs {
		before[id], _ = h.Node(id)
	}
	c.resetEphemeral(t, c.cps[1])
	eventually(t, c.cpIDs[1]+" resetting", func() bool { i, _ := h.Node(c.cpIDs[1]); return !i.EtcdMember })
	waitRunning(t, h, c.cpIDs[1])
	c.waitMembers(t, c.cpIDs...)
	if v, ok, err := h.EtcdGet(c.cpIDs[1], "k"); err != nil || !ok || string(v) != "v" {
		t.Fatalf("after one control plane's reset: %q %v %v", v, ok, err)
	}

	for _, a := range c.cps {
		c.resetEphemeral(t, a)
	}
	for _, id := range c.cpIDs {
		info := waitRunning(t, h, id)
		if info.ConfigSHA256 != before[id].ConfigSHA256 || info.EtcdMember {
			t.Fatalf("%s after the reset of EPHEMERAL: config %s (was %s), etcd member %v", id, info.ConfigSHA256, before[id].ConfigSHA256, info.EtcdMember)
		}
	}
	if _, _, err := h.EtcdGet(c.cpIDs[0], "k"); err == nil || !strings.Contains(err.Error(), "no member") {
		t.Fatalf("EtcdGet after every control plane's reset: %v", err)
	}
	j, _ := h.Journal(c.cpIDs[2])
	if last := j[len(j)-1]; last.Call != "Reset" || !slices.Equal(last.Wipe, []string{"EPHEMERAL"}) || last.Graceful || !last.Reboot {
		t.Fatalf("journal: %+v", last)
	}
	if err := adminClient(t, c.secrets, c.cps[2]).Bootstrap(ctxT(t), &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}
	c.waitMembers(t, c.cpIDs...)
	if _, ok, err := h.EtcdGet(c.cpIDs[0], "k"); err != nil || ok {
		t.Fatalf("a new etcd holds the old data: %v %v", ok, err)
	}

	err = adminClient(t, c.secrets, c.cps[0]).ResetGeneric(ctxT(t), &machine.ResetRequest{
		SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "META", Wipe: true}},
	})
	wantCode(t, "reset of META", err, codes.InvalidArgument, `partition "META" cannot be wiped`)
}

// TestWipeEtcdLosesQuorum: after WipeEtcd no control plane is a member:
// the member list, snapshots and the hooks fail, and the nodes run their
// configs, not ready, until a bootstrap.
func TestWipeEtcdLosesQuorum(t *testing.T) {
	h := openHost(t, "")
	c := bootstrapped(t, h, 3, 1)
	if err := h.EtcdPut(c.cpIDs[0], "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := h.WipeEtcd(c.wIDs[0]); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	for i, id := range c.cpIDs {
		if info, _ := h.Node(id); info.EtcdMember || info.Stage != runtime.MachineStageRunning {
			t.Fatalf("%s after WipeEtcd: %+v", id, info)
		}
		cl := adminClient(t, c.secrets, c.cps[i])
		if _, err := cl.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{}); err == nil || !strings.Contains(err.Error(), "no controlplane endpoints discovered yet") {
			t.Fatalf("member list after WipeEtcd: %v", err)
		}
		_, err := readAll(cl.EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{}))
		wantCode(t, "snapshot after WipeEtcd", err, codes.Unavailable, "etcd is not running on this node")
		if ms, err := machineStatus(ctx, cl); err != nil || ms.Status.Ready {
			t.Fatalf("MachineStatus after WipeEtcd: %+v %v", ms, err)
		}
	}
	if _, _, err := h.EtcdGet(c.cpIDs[0], "k"); err == nil {
		t.Fatal("EtcdGet after WipeEtcd")
	}
	if err := h.EtcdPut(c.cpIDs[0], "k", nil); err == nil {
		t.Fatal("EtcdPut after WipeEtcd")
	}
	if err := h.WipeEtcd("vm-99"); err == nil {
		t.Fatal("WipeEtcd of an unknown machine")
	}
}

// TestEtcdDataSurviveARestart: the etcd data of a cluster, and a
// snapshot uploaded for recovery, are on disk: a host opened again over
// the sim dir serves the same snapshot, and recovers from the upload.
func TestEtcdDataSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	h, err := Open(Options{Dir: dir, Timings: testTimings, PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := bootstrapped(t, h, 2, 0)
	if err := h.EtcdPut(c.cpIDs[0], "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := h.SetEtcdFiller(c.cpIDs[0], 100<<10); err != nil {
		t.Fatal(err)
	}
	before, _ := c.snapshot(t, c.cps[1])
	h.Close()

	h = openHost(t, dir)
	c.h = h
	if after, _ := c.snapshot(t, c.cps[1]); !bytes.Equal(after, before) {
		t.Fatal("the snapshot after a restart of the host differs")
	}
	if err := h.WipeEtcd(c.cpIDs[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := adminClient(t, c.secrets, c.cps[1]).EtcdRecover(ctxT(t), bytes.NewReader(before)); err != nil {
		t.Fatal(err)
	}
	h.Close()

	h = openHost(t, dir)
	c.h = h
	waitRunning(t, h, c.cpIDs[1])
	if err := adminClient(t, c.secrets, c.cps[1]).Bootstrap(ctxT(t), &machine.BootstrapRequest{RecoverEtcd: true}); err != nil {
		t.Fatal(err)
	}
	c.waitMembers(t, c.cpIDs...)
	if v, ok, err := h.EtcdGet(c.cpIDs[0], "k"); err != nil || !ok || string(v) != "v" {
		t.Fatalf("after a recovery from an upload before a restart: %q %v %v", v, ok, err)
	}
}

// TestEtcdDataGoWithTheCluster: the simulated etcd data of a cluster
// stay while a machine of it is left, and go with the last one.
func TestEtcdDataGoWithTheCluster(t *testing.T) {
	h := openHost(t, "")
	c := bootstrapped(t, h, 2, 0)
	if err := h.EtcdPut(c.cpIDs[0], "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	file := h.etcd.path(h.byID[c.cpIDs[0]].cluster())
	h.mu.Unlock()
	for i, id := range c.cpIDs {
		if _, err := os.Stat(file); err != nil {
			t.Fatalf("etcd data with %d machines of the cluster left: %v", len(c.cpIDs)-i, err)
		}
		if err := h.Remove(id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("etcd data after the cluster's last machine went: %v", err)
	}
}
