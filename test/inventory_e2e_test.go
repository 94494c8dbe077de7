package test

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/schema"
)

// The status plane end to end: the real server binary observes the
// simulated Talos nodes it hosts with COSI watches, and the API serves
// their inventory and their history.

// inventoryArgs are planeArgs with a probe TTL of an hour: what the API
// shows of a machine after its first look comes from its watches, or
// from the fallback probes of a machine whose watch broke.
func inventoryArgs() []string {
	return append(planeArgs(), "--probe-ttl", "1h")
}

// inventoryMachine returns a machine of the tenant as the API serves it.
func inventoryMachine(t *testing.T, e *e2e, tenant, id string) schema.Machine {
	t.Helper()
	for _, m := range e.srv.tenantMachines(tenant) {
		if m.Metadata.Name == id {
			return m
		}
	}
	t.Fatalf("%s has no machine %s", tenant, id)
	return schema.Machine{}
}

// inventoryWatched is what the server's metrics say of its watched
// machines.
func inventoryWatched(t *testing.T, e *e2e) int {
	t.Helper()
	return metricInt(t, e, "rezuscloud_talos_watched_machines")
}

// metricInt is the value of the server's metric name, one without labels.
func metricInt(t *testing.T, e *e2e, name string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\d+)$`).FindStringSubmatch(metricsText(t, e))
	if m == nil {
		t.Fatalf("/metrics has no %s", name)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// inventoryDisk is the machine's disk of the name, if it has one.
func inventoryDisk(m schema.Machine, name string) (schema.BlockDevice, bool) {
	if m.Status.Hardware == nil {
		return schema.BlockDevice{}, false
	}
	for _, d := range m.Status.Hardware.BlockDevices {
		if d.Name == name {
			return d, true
		}
	}
	return schema.BlockDevice{}, false
}

// inventoryChange writes faults and returns how long the API took to show
// what seen looks for.
func inventoryChange(t *testing.T, e *e2e, faults talosnode.Faults, what string, seen func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	if err := talosnode.WriteFaults(e.data+"-sim", faults); err != nil {
		t.Fatal(err)
	}
	e.srv.WaitFor(what, seen)
	return time.Since(start)
}

// TestInventoryFromTheNodes: every machine's inventory comes from its
// node, sized as its shape; derived labels select machines by it; a
// swapped disk and a new address show within 2 s with no probe due; with
// the node's watches broken, fallback probes keep the status fresh, and
// the watches come back when they work again.
func TestInventoryFromTheNodes(t *testing.T) {
	e := newE2E(t, e2eOptions{args: inventoryArgs()})
	planeWaitReady(t, e, "production")
	ms := e.srv.tenantMachines("production")
	e.srv.WaitFor("every machine's inventory", func() bool {
		ms = e.srv.tenantMachines("production")
		for _, m := range ms {
			if m.Status.Hardware == nil || m.Status.Network == nil || m.Status.Schematic == nil {
				return false
			}
		}
		return true
	})
	// production: control planes medium (4 threads, 8 GiB, 80 GiB),
	// workers large (8, 16 GiB, 160 GiB).
	var worker schema.Machine
	for _, m := range ms {
		cpus, mem, disk := 4, 8<<10, uint64(80)<<30
		if m.Spec.Role == schema.RoleWorker {
			cpus, mem, disk = 8, 16<<10, uint64(160)<<30
			worker = m
		}
		hw, net, sc := m.Status.Hardware, m.Status.Network, m.Status.Schematic
		if hw.CPUs != cpus || hw.MemoryMiB != mem {
			t.Errorf("%s: %d CPUs and %d MiB, want %d and %d", m.Spec.TFAddress, hw.CPUs, hw.MemoryMiB, cpus, mem)
		}
		if d, ok := inventoryDisk(m, "vda"); !ok || !d.SystemDisk || d.SizeBytes != disk {
			t.Errorf("%s: disks %+v, want the system disk vda of %d bytes", m.Spec.TFAddress, hw.BlockDevices, disk)
		}
		if !slices.Contains(net.Addresses, m.Spec.ManagementAddress+"/8") || len(net.Links) != 1 || net.Links[0].HardwareAddress == "" {
			t.Errorf("%s: network %+v, want %s/8 and one link with a MAC", m.Spec.TFAddress, net, m.Spec.ManagementAddress)
		}
		for _, gw := range net.DefaultGateways {
			if !strings.HasPrefix(gw, "127.") {
				t.Errorf("%s: default gateway %s is not on loopback", m.Spec.TFAddress, gw)
			}
		}
		if len(sc.ID) != 64 || len(sc.Extensions) == 0 {
			t.Errorf("%s: schematic %+v, want a 64-digit ID and its extensions", m.Spec.TFAddress, sc)
		}
		if got := m.Metadata.Labels[schema.LabelHardwareCPUs]; got != strconv.Itoa(cpus) {
			t.Errorf("%s: label %s=%q, want %d", m.Spec.TFAddress, schema.LabelHardwareCPUs, got, cpus)
		}
	}
	big := e.srv.machines(schema.LabelHardwareCPUs + "=8," + schema.LabelTenant + "=production")
	if len(big) != 2 {
		t.Errorf("%d production machines with 8 CPUs, want the 2 workers", len(big))
	}
	if n := inventoryWatched(t, e); n < len(ms) {
		t.Fatalf("%d machines watched, want at least production's %d", n, len(ms))
	}
	if n := metricInt(t, e, "rezuscloud_talos_probe_slots"); n < 4 || n > 32 {
		t.Errorf("%d probe slots, want from 4 to --probe-concurrency's 32", n)
	}

	// A swapped disk and a new address, with no probe due for an hour.
	swapped := talosnode.Disk{Name: "vda", SizeBytes: 320 << 30, Model: "QEMU HARDDISK", Transport: "virtio"}
	took := inventoryChange(t, e, talosnode.Faults{worker.Metadata.Name: {Disks: []talosnode.Disk{swapped}}}, "the swapped disk", func() bool {
		d, ok := inventoryDisk(inventoryMachine(t, e, "production", worker.Metadata.Name), "vda")
		return ok && d.SizeBytes == swapped.SizeBytes
	})
	if took > 2*time.Second {
		t.Errorf("the swapped disk showed after %v, want within 2 s", took)
	}
	extra := "127.253.200.9/8"
	took = inventoryChange(t, e, talosnode.Faults{worker.Metadata.Name: {Disks: []talosnode.Disk{swapped}, Addresses: []string{worker.Spec.ManagementAddress + "/8", extra}}}, "the new address", func() bool {
		n := inventoryMachine(t, e, "production", worker.Metadata.Name).Status.Network
		return n != nil && slices.Contains(n.Addresses, extra)
	})
	if took > 2*time.Second {
		t.Errorf("the new address showed after %v, want within 2 s", took)
	}

	// Watches broken: the fallback probe sees a second disk. Every
	// machine is watched first, so that the count the test compares with
	// is the whole fleet's and not a moment's in which one watch was
	// still opening.
	watched := len(e.srv.machines(""))
	e.srv.WaitFor("every machine to be watched", func() bool { return inventoryWatched(t, e) == watched })
	data := talosnode.Disk{Name: "vdb", SizeBytes: 64 << 30, Model: "QEMU HARDDISK", Transport: "virtio"}
	took = inventoryChange(t, e, talosnode.Faults{worker.Metadata.Name: {WatchBroken: true, Disks: []talosnode.Disk{swapped, data}}}, "the second disk through probes", func() bool {
		_, ok := inventoryDisk(inventoryMachine(t, e, "production", worker.Metadata.Name), "vdb")
		return ok
	})
	t.Logf("with its watches broken, the second disk showed after %v", took)
	if n := inventoryWatched(t, e); n != watched-1 {
		t.Errorf("%d machines watched with one machine's watches broken, want %d", n, watched-1)
	}
	// Still broken, a later change comes with the next probe, on the
	// watch's backoff.
	moved := "127.253.200.10/8"
	took = inventoryChange(t, e, talosnode.Faults{worker.Metadata.Name: {WatchBroken: true, Disks: []talosnode.Disk{swapped, data}, Addresses: []string{worker.Spec.ManagementAddress + "/8", moved}}}, "the moved address through probes", func() bool {
		n := inventoryMachine(t, e, "production", worker.Metadata.Name).Status.Network
		return n != nil && slices.Contains(n.Addresses, moved)
	})
	t.Logf("with its watches still broken, the moved address showed after %v", took)
	// Mended: the watches come back, and a change shows within 2 s again.
	if err := talosnode.WriteFaults(e.data+"-sim", talosnode.Faults{worker.Metadata.Name: {Disks: []talosnode.Disk{swapped, data}}}); err != nil {
		t.Fatal(err)
	}
	e.srv.WaitFor("the watches to come back", func() bool { return inventoryWatched(t, e) == watched })
	took = inventoryChange(t, e, talosnode.Faults{worker.Metadata.Name: {Disks: []talosnode.Disk{swapped}}}, "the removed disk", func() bool {
		_, ok := inventoryDisk(inventoryMachine(t, e, "production", worker.Metadata.Name), "vdb")
		return !ok
	})
	if took > 2*time.Second {
		t.Errorf("after the watches came back, the removed disk showed after %v, want within 2 s", took)
	}
}
