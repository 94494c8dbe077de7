package main

import (
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// inventoryRig is a real server with three machines of tenant shop: a
// medium one and a large one that told their inventory (the server's
// derived labels set from it, as the observer sets them), and one that
// has not answered yet.
func inventoryRig(t *testing.T) {
	t.Helper()
	isolate(t)
	srv := servertest.StartBackend(t, backend.Config{}, nil)
	t.Setenv(envServer, srv.URL())
	created := time.Now().Add(-time.Hour)
	machine := func(name string, h *schema.MachineHardware, s *schema.MachineSchematic) *schema.Machine {
		m := &schema.Machine{APIVersion: schema.APIVersion, Kind: schema.KindMachine,
			Metadata: schema.ObjectMeta{Name: name, CreatedAt: created, Labels: map[string]string{schema.LabelTenant: "shop", schema.LabelRole: schema.RoleWorker}},
			Spec:     schema.MachineSpec{Tenant: "shop", NodeGroup: "workers", Role: schema.RoleWorker, ManagementAddress: "127.0.9.1", Hostname: name},
			Status:   schema.MachineStatus{Stage: schema.StageReady, Connected: true, Hardware: h, Schematic: s}}
		schema.SetHardwareLabels(&m.Metadata, h)
		return m
	}
	medium := machine("shop-medium", &schema.MachineHardware{Arch: "amd64", CPUs: 4, MemoryMiB: 8192,
		Processors:    []schema.Processor{{Manufacturer: "RezusCloud", ProductName: "sim vCPU", CoreCount: 4, ThreadCount: 4, MaxSpeedMHz: 2400}},
		MemoryModules: []schema.MemoryModule{{SizeMiB: 4096}, {SizeMiB: 4096}},
		System:        &schema.SystemInformation{Manufacturer: "RezusCloud", ProductName: "sim medium", SerialNumber: "SIM-0001"},
		BlockDevices: []schema.BlockDevice{{Name: "vda", SizeBytes: 80e9, Model: "sim disk", Transport: "virtio", SystemDisk: true},
			{Name: "vdb", SizeBytes: 10 << 30, Transport: "virtio", Rotational: true}}},
		&schema.MachineSchematic{ID: "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba",
			Extensions: []schema.Extension{{Name: "iscsi-tools", Version: "v0.2.0"}, {Name: "qemu-guest-agent", Version: "10.0.2"}}})
	medium.Status.Network = &schema.MachineNetwork{Hostname: "shop-medium", Addresses: []string{"127.0.9.1/8"}, DefaultGateways: []string{"127.0.0.1"},
		Links: []schema.NetworkLink{{Name: "eth0", HardwareAddress: "02:00:7f:00:09:01", SpeedMbps: 10000, Up: true, OperationalState: "up"}}}
	large := machine("shop-large", &schema.MachineHardware{Arch: "amd64", CPUs: 8, MemoryMiB: 16384,
		BlockDevices: []schema.BlockDevice{{Name: "vda", SizeBytes: 160e9, SystemDisk: true}}}, nil)
	silent := machine("shop-silent", nil, nil)
	silent.Status = schema.MachineStatus{}
	err := srv.Store().Update(func(tx store.Tx) error {
		for _, m := range []*schema.Machine{medium, large, silent} {
			if _, err := tx.PutObject(schema.KindMachine, m.Metadata.Name, m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGetMachinesInventory: get machines -o wide has a machine's CPUs,
// memory, system disk and schematic (its ID cut short); label selectors
// select machines by the derived hardware labels, also by comparison.
func TestGetMachinesInventory(t *testing.T) {
	inventoryRig(t)
	code, out, errOut := runCLI(t, "get", "machines", "-o", "wide")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d stderr %q", code, errOut)
	}
	for _, re := range []string{
		`(?m)^NAME +TENANT +NODEGROUP +ROLE +STAGE +ADDRESS +HOSTNAME +SHAPE +TALOS +CONFIG +NODE +CPU +MEMORY +DISK +SCHEMATIC +AGE$`,
		`(?m)^shop-large +shop +workers +worker +ready +127\.0\.9\.1 +shop-large +<none> +<none> +outdated +<none> +8 +16Gi +149Gi +<none> +\S+$`,
		`(?m)^shop-medium +shop +.* +4 +8Gi +74Gi +37656798 +\S+$`,
		`(?m)^shop-silent +shop +.* +<none> +<none> +<none> +<none> +\S+$`,
	} {
		if !matches(re, out) {
			t.Errorf("get machines -o wide lacks %s:\n%s", re, out)
		}
	}
	for sel, want := range map[string]string{
		"hardware.rezuscloud.io/cpus=4":                                                "machine/shop-medium\n",
		"hardware.rezuscloud.io/memory-gib>8":                                          "machine/shop-large\n",
		"hardware.rezuscloud.io/arch=amd64,hardware.rezuscloud.io/system-disk-gib<100": "machine/shop-medium\n",
		"!hardware.rezuscloud.io/cpus":                                                 "machine/shop-silent\n",
	} {
		code, out, errOut := runCLI(t, "get", "machines", "-l", sel, "-o", "name")
		if code != 0 || out != want {
			t.Errorf("get machines -l %s: code %d, %q (stderr %q), want %q", sel, code, out, errOut, want)
		}
	}
}

// TestDescribeMachineInventory: describe machine prints the machine's
// hardware (its system disk marked), network and schematic, and <none>
// for a machine that has told nothing.
func TestDescribeMachineInventory(t *testing.T) {
	inventoryRig(t)
	code, out, errOut := runCLI(t, "describe", "machine", "shop-medium")
	if code != 0 {
		t.Fatalf("code %d stderr %q", code, errOut)
	}
	for _, re := range []string{
		`(?m)^  Maintenance: +false$`, `(?m)^  Hardware:$`, `(?m)^    Arch: +amd64$`, `(?m)^    CPUs: +4$`,
		`(?m)^      Processor: +RezusCloud sim vCPU, 4 cores, 4 threads, 2400 MHz$`,
		`(?m)^    Memory: +8\.0 GiB$`, `(?m)^      Module: +4\.0 GiB$`, `(?m)^    System: +RezusCloud sim medium$`, `(?m)^      Serial: +SIM-0001$`,
		`(?m)^    Disks:$`, `(?m)^      NAME +SIZE +MODEL +TRANSPORT +SYSTEM$`, `(?m)^      vda +74 GiB +sim disk +virtio +yes$`,
		`(?m)^      vdb +10 GiB +<none> +virtio,rotational +<none>$`,
		`(?m)^  Network:$`, `(?m)^    Hostname: +shop-medium$`, `(?m)^    Addresses: +127\.0\.9\.1/8$`, `(?m)^    Default Gateways: +127\.0\.0\.1$`,
		`(?m)^    Link eth0: +up, 02:00:7f:00:09:01, 10000 Mb/s$`,
		`(?m)^  Schematic:$`, `(?m)^    ID: +376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba$`,
		`(?m)^    Extensions: +iscsi-tools v0\.2\.0, qemu-guest-agent 10\.0\.2$`,
	} {
		if !matches(re, out) {
			t.Errorf("describe machine lacks %s:\n%s", re, out)
		}
	}
	_, out, _ = runCLI(t, "describe", "machine", "shop-silent")
	for _, key := range []string{"Hardware", "Network", "Schematic"} {
		if !matches(`(?m)^  `+key+`: +<none>$`, out) {
			t.Errorf("describe machine of a silent machine lacks %s <none>:\n%s", key, out)
		}
	}
	if strings.Contains(out, "Disks") {
		t.Errorf("a silent machine has disks:\n%s", out)
	}
}
