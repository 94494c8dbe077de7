package talosnode

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/rezuscloud/rezuscloud/internal/sim"
)

func parsedBy(h *Host) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.parsed
}

// TestReopenedHostBootsFromCheckedConfigs: a host opened again on a sim
// dir boots its records' machines from the configs checked before,
// without parsing them, and they serve the configs they were given; an
// invalid config still keeps its machine from booting. A file of checked
// configs written by other machinery is not trusted.
func TestReopenedHostBootsFromCheckedConfigs(t *testing.T) {
	dir := t.TempDir()
	h := openHost(t, dir)
	st, err := sim.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	secrets := bundle(t, "a")
	bad := []byte(strings.Replace(string(machineConfig(t, secrets, "worker", false)), "type: worker", "type: nonsense", 1))
	var recs []sim.Record
	for i, ud := range [][]byte{machineConfig(t, secrets, "controlplane", false), machineConfig(t, secrets, "worker", false), bad} {
		rec, err := st.Create(sim.Spec{Name: "acme-" + string(rune('a'+i)), Tenant: "acme", NodeGroup: "g", Role: "worker", Shape: "small",
			Image: "talos-1.12.6", UserData: ud}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	for _, rec := range recs[:2] {
		waitRunning(t, h, rec.ID)
	}
	eventually(t, "the invalid config refused", func() bool { i, _ := h.Node(recs[2].ID); return i.BootError != "" })
	wantErr := func() string { i, _ := h.Node(recs[2].ID); return i.BootError }()
	if got := parsedBy(h); got != 3 {
		t.Fatalf("the first host parsed %d configs, want 3", got)
	}
	h.Close()

	reopen := func(wantParsed int) {
		t.Helper()
		h := openHost(t, dir)
		if got := parsedBy(h); got != wantParsed {
			t.Fatalf("the host opened again parsed %d configs, want %d", got, wantParsed)
		}
		ctx := ctxT(t)
		for i, rec := range recs[:2] {
			ud, err := st.UserData(rec.ID)
			if err != nil {
				t.Fatal(err)
			}
			info := waitRunning(t, h, rec.ID)
			if info.ConfigSHA256 != hashHex(ud) || info.ControlPlane != (i == 0) {
				t.Fatalf("%s after opening again: %+v", rec.Name, info)
			}
			got, _ := runningConfig(t, ctx, adminClient(t, secrets, rec.Address))
			if !bytes.Equal(got, ud) {
				t.Fatalf("%s serves another config than its user data", rec.Name)
			}
		}
		info, _ := h.Node(recs[2].ID)
		if info.BootError != wantErr || info.Reachable || info.Stage != runtime.MachineStageBooting {
			t.Fatalf("the invalid config's machine after opening again: %+v, want boot error %q", info, wantErr)
		}
		h.Close()
	}
	reopen(0)

	path := filepath.Join(dir, checkedFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte(checkedSelf.Talos), []byte("v0.0.1-other"), 1)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	reopen(3)
	reopen(0)
}

// TestIndexFollowsTheRunningConfig: a node is filed under the cluster of
// its running config only, and leaves it when its config changes or goes.
func TestIndexFollowsTheRunningConfig(t *testing.T) {
	h := &Host{clusters: map[string]map[*node]struct{}{}, trustd: map[string][]byte{}}
	n := newNode(state{ID: "vm-1", Address: "127.9.0.1"})
	m := newNode(state{ID: "vm-2", Address: "127.9.0.2", Running: &configRef{Summary: summary{Cluster: "a"}}})
	h.index(m)
	check := func(want map[string]int) {
		t.Helper()
		got := map[string]int{}
		for k, set := range h.clusters {
			got[k] = len(set)
		}
		if len(got) != len(want) {
			t.Fatalf("clusters %v, want %v", got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("clusters %v, want %v", got, want)
			}
		}
	}
	h.index(n)
	check(map[string]int{"a": 1})
	n.st.Running = &configRef{Summary: summary{Cluster: "a"}}
	h.index(n)
	check(map[string]int{"a": 2})
	n.st.Running = &configRef{Summary: summary{Cluster: "b"}}
	h.index(n)
	check(map[string]int{"a": 1, "b": 1})
	n.st.Running = nil
	h.index(n)
	check(map[string]int{"a": 1})
	m.gone.Store(true)
	h.index(m)
	check(map[string]int{})
}

// TestBackgroundOpenBootsEveryMachine: a host opened with Background
// returns before its machines power on and serves every one of them once
// Booted is closed: the records' machines with their configs, and a
// machine booted by another cloud with the state it had (BootMachine
// after the restart waits for the restore and changes nothing). A host
// closed while it boots stops serving.
func TestBackgroundOpenBootsEveryMachine(t *testing.T) {
	dir := t.TempDir()
	h := openHost(t, dir)
	st, err := sim.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	secrets := bundle(t, "a")
	var recs []sim.Record
	for i := range 20 {
		rec, err := st.Create(sim.Spec{Name: "acme-" + string(rune('a'+i)), Tenant: "acme", NodeGroup: "g", Role: "worker", Shape: "small",
			Image: "talos-1.12.6", UserData: machineConfig(t, secrets, "worker", false)}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	vm := addr(h, 250)
	if err := h.Boot("vm-1", vm, machineConfig(t, secrets, "controlplane", false)); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h, "vm-1")
	labels := machineConfig(t, secrets, "controlplane", false, labelPatch)
	ctx := ctxT(t)
	if _, err := adminClient(t, secrets, vm).ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: labels, Mode: machine.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		waitRunning(t, h, rec.ID)
	}
	h.Close()

	h2, err := Open(Options{Dir: dir, Timings: testTimings, PollInterval: time.Hour, Background: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := h2.BootMachine(Machine{ID: "vm-1", Address: vm, UserData: machineConfig(t, secrets, "controlplane", false)}); err != nil {
		t.Fatalf("boot the restored machine again: %v", err)
	}
	select {
	case <-h2.Booted():
	case <-time.After(30 * time.Second):
		t.Fatal("the machines did not boot")
	}
	if info := waitRunning(t, h2, "vm-1"); info.ConfigSHA256 != hashHex(labels) {
		t.Fatalf("the restored machine lost its applied config: %+v", info)
	}
	for _, rec := range recs {
		ud, _ := st.UserData(rec.ID)
		if info := waitRunning(t, h2, rec.ID); info.ConfigSHA256 != hashHex(ud) {
			t.Fatalf("%s: %+v", rec.Name, info)
		}
		if _, err := adminClient(t, secrets, rec.Address).Version(ctx); err != nil {
			t.Fatalf("%s after a background open: %v", rec.Name, err)
		}
	}
	h2.Close()

	h3, err := Open(Options{Dir: dir, Timings: testTimings, PollInterval: time.Hour, Background: true})
	if err != nil {
		t.Fatal(err)
	}
	h3.Close()
	for _, rec := range recs {
		if !refused(rec.Address) {
			t.Fatalf("%s answers after its host closed", rec.Name)
		}
	}
}
