package talos

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/container"

	"github.com/rezuscloud/rezuscloud/internal/manifestfleet"
)

// resetShapes forgets every kept shape.
func resetShapes() {
	shapes.mu.Lock()
	shapes.m = nil
	shapes.mu.Unlock()
}

// shapeTenants have names and endpoints that patches can test, copy,
// remove, repeat or collide with: hosts and IPs, a host that is part of
// another's, the same host on another port, names YAML would read as other
// types, a path, a scheme Talos takes but RezusCloud refuses, and a
// one-letter name that occurs in many other strings of a config.
var shapeTenants = [][2]string{
	{"t0001", "https://t0001.example.internal:6443"},
	{"t0002", "https://t0002.example.internal:6443"},
	{"alpha", "https://127.0.0.10:6443"},
	{"beta", "https://127.0.0.11:6443"},
	{"six", "https://[fd00::1]:6443"},
	{"yes", "https://yes.example:6443"},
	{"null", "https://null:6443"},
	{"123", "https://123.example:443"},
	{"port", "https://t0001.example.internal:7443"},
	{"short", "https://example.internal:6443"},
	{"Upper", "https://UPPER.example.internal:6443"},
	{"path", "https://p.example:6443/k8s"},
	{"plain", "http://plain.example:6443"},
	{"a", "https://a:6443"},
	{"bad name", "https://bad.example:6443"},
}

// shapePatches are patch sets that touch what differs between tenants:
// strategic merges that set, add to or repeat the name, the endpoint, the
// certificate SANs and the install disk, and JSON 6902 operations that
// test, remove, copy and move them; and ones that fail in each way, also
// by changing what the secrets bundle owns.
var shapePatches = map[string][]string{
	"none":           nil,
	"sysctl":         {"machine:\n  sysctls:\n    net.core.somaxconn: \"1024\"\n"},
	"set name":       {"cluster:\n  clusterName: fixed\n"},
	"set endpoint":   {"cluster:\n  controlPlane:\n    endpoint: https://fixed.example:6443\n"},
	"machine sans":   {"machine:\n  certSANs: [t0001.example.internal, 127.0.0.10, extra.example]\n"},
	"api sans":       {"cluster:\n  apiServer:\n    certSANs: [t0001.example.internal, \"fd00::1\"]\n"},
	"label t0001":    {"machine:\n  nodeLabels:\n    owner: t0001\n"},
	"label key":      {"machine:\n  nodeLabels:\n    t0001: owner\n"},
	"test name":      {`[{"op": "test", "path": "/cluster/clusterName", "value": "t0001"}, {"op": "add", "path": "/machine/nodeLabels/tested", "value": "yes"}]`},
	"test endpoint":  {`[{"op": "test", "path": "/cluster/controlPlane/endpoint", "value": "https://127.0.0.10:6443"}]`},
	"remove name":    {`[{"op": "remove", "path": "/cluster/clusterName"}]`},
	"remove ep":      {`[{"op": "remove", "path": "/cluster/controlPlane/endpoint"}]`},
	"remove sans":    {`[{"op": "remove", "path": "/cluster/apiServer/certSANs/0"}]`},
	"copy name":      {`[{"op": "copy", "from": "/cluster/clusterName", "path": "/machine/nodeLabels/cluster"}]`},
	"copy endpoint":  {`[{"op": "copy", "from": "/cluster/controlPlane/endpoint", "path": "/machine/nodeLabels/endpoint"}]`},
	"move name":      {`[{"op": "move", "from": "/cluster/clusterName", "path": "/machine/nodeAnnotations"}]`},
	"copy to sans":   {`[{"op": "copy", "from": "/cluster/clusterName", "path": "/machine/certSANs/-"}]`},
	"name to host":   {`[{"op": "copy", "from": "/cluster/clusterName", "path": "/machine/network/hostname"}]`},
	"install disk":   {`[{"op": "add", "path": "/machine/install/disk", "value": "/dev/sdb"}]`},
	"replace disk":   {`[{"op": "replace", "path": "/machine/install/disk", "value": "/dev/nvme0n1"}]`},
	"disk selector":  {"machine:\n  install:\n    diskSelector:\n      size: '>= 100GB'\n"},
	"unknown field":  {"machine:\n  nosuchfield: 1\n"},
	"bad subnet":     {"cluster:\n  network:\n    podSubnets: [not-a-cidr]\n"},
	"fixed then bad": {"cluster:\n  clusterName: fixed\n", "cluster:\n  network:\n    serviceSubnets: [nope]\n", "cluster:\n  network:\n    serviceSubnets: [10.96.0.0/12]\n"},
	"inline name":    {"cluster:\n  inlineManifests:\n    - name: t0001\n      contents: \"kind: ConfigMap\\nmetadata: {name: t0001}\\n\"\n"},
	"set machine ca": {"machine:\n  nodeLabels:\n    a: b\n", "machine:\n  ca:\n    crt: Y3J0\n    key: a2V5\n"},
	"remove token":   {`[{"op": "remove", "path": "/cluster/token"}]`},
}

// The proof that a kept shape covers every input its check depends on:
// for every tenant, patch set, role and mode, in two orders of the tenants
// (so that each shape is kept from another tenant), CheckMachineConfig
// reports exactly what MachineConfig reports, the patch to blame and its
// file:line included; and the kept shapes did spare round trips.
func TestCheckMachineConfigSameAsMachineConfig(t *testing.T) {
	bundle, err := ValidationSecrets("1.12.6")
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(shapePatches))
	for n := range shapePatches {
		names = append(names, n)
	}
	slices.Sort(names)
	valid, spared := 0, 0
	for _, order := range []string{"forward", "reverse"} {
		resetShapes()
		tenants := slices.Clone(shapeTenants)
		if order == "reverse" {
			slices.Reverse(tenants)
		}
		for _, name := range names {
			for _, m := range shapeModes(name) {
				for _, role := range []string{RoleControlPlane, RoleWorker} {
					for _, tn := range tenants {
						in := shapeInput(bundle, tn, role, shapePatches[name])
						in.Mode, in.InstallDisk = m.mode, m.disk
						want := machineConfigErr(in)
						t1 := roundTrips.Load()
						got := CheckMachineConfig(in)
						if want == nil {
							valid++
							if roundTrips.Load() == t1 {
								spared++
							}
						}
						what := fmt.Sprintf("%s, %s %q, %s, tenant %s %s", order, m.mode, m.disk, role, tn[0], tn[1])
						if !sameError(got, want) {
							t.Errorf("patches %q, %s:\n CheckMachineConfig: %v\n MachineConfig:      %v", name, what, got, want)
						}
					}
				}
			}
		}
	}
	t.Logf("%d valid configs, %d of them without a round trip", valid, spared)
	if spared < valid/2 {
		t.Errorf("of %d valid configs, the shapes spared %d round trips", valid, spared)
	}
}

type shapeMode struct {
	mode Mode
	disk string
}

// shapeModes: every patch set in the cloud mode; the ones about the
// install disk also on metal, with a disk and without.
func shapeModes(patches string) []shapeMode {
	modes := []shapeMode{{ModeCloud, ""}}
	switch patches {
	case "none", "install disk", "replace disk", "disk selector", "copy name":
		modes = append(modes, shapeMode{ModeMetal, "/dev/sda"}, shapeMode{ModeMetal, ""})
	}
	return modes
}

// shapeInput is tenant tn's input for role, its patches declared at
// patches.yaml:1, :2 and so on.
func shapeInput(bundle []byte, tn [2]string, role string, patches []string) ConfigInput {
	in := ConfigInput{ClusterName: tn[0], ControlPlaneEndpoint: tn[1], KubernetesVersion: "1.34.1",
		TalosVersion: "1.12.6", Role: role, Secrets: bundle}
	for i, p := range patches {
		in.Patches = append(in.Patches, Patch{Name: fmt.Sprintf("p%d", i), Patch: p, Source: fmt.Sprintf("patches.yaml:%d", i+1)})
	}
	return in
}

func machineConfigErr(in ConfigInput) error {
	_, err := MachineConfig(in)
	return err
}

// sameError: both nil, or the same message and, for a patch's error, the
// same patch and position.
func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var pa, pb *PatchError
	if errors.As(a, &pa) != errors.As(b, &pb) {
		return false
	}
	if pa != nil && pa.Patch != pb.Patch {
		return false
	}
	return a.Error() == b.Error()
}

// Tenants that differ only in name and endpoint share one round trip per
// role; a tenant's own bundle is never kept, so its configs make theirs.
func TestCheckMachineConfigRoundTripsOncePerShape(t *testing.T) {
	bundle, err := ValidationSecrets("1.12.6")
	if err != nil {
		t.Fatal(err)
	}
	resetShapes()
	patches := shapePatches["sysctl"]
	before := roundTrips.Load()
	var copies map[*shape][2][]config.Document
	for i := range 20 {
		for _, role := range []string{RoleControlPlane, RoleWorker} {
			tn := [2]string{fmt.Sprintf("t%04d", i), fmt.Sprintf("https://t%04d.example.internal:6443", i)}
			if err := CheckMachineConfig(shapeInput(bundle, tn, role, patches)); err != nil {
				t.Fatal(err)
			}
		}
		if i == 0 {
			copies = copyShapes(t)
		}
	}
	if n := roundTrips.Load() - before; n != 2 {
		t.Errorf("40 configs of two shapes made %d round trips, want 2", n)
	}
	// Checking the later tenants left the kept configs as they were.
	for s, c := range copies {
		if !reflect.DeepEqual(s.built, c[0]) || !reflect.DeepEqual(s.loaded, c[1]) {
			t.Errorf("the shape kept from %s changed while later configs were checked", s.from[3])
		}
	}
	own := testSecrets(t)
	kept := len(shapes.m)
	before = roundTrips.Load()
	for i := range 3 {
		tn := [2]string{fmt.Sprintf("t%04d", i), fmt.Sprintf("https://t%04d.example.internal:6443", i)}
		if err := CheckMachineConfig(shapeInput(own, tn, RoleWorker, patches)); err != nil {
			t.Fatal(err)
		}
	}
	if n := roundTrips.Load() - before; n != 3 {
		t.Errorf("3 configs with a tenant's own bundle made %d round trips, want 3", n)
	}
	if len(shapes.m) != kept {
		t.Errorf("configs with a tenant's own bundle were kept: %d shapes, want %d", len(shapes.m), kept)
	}
}

// copyShapes deep-copies the kept shapes' configs.
func copyShapes(t *testing.T) map[*shape][2][]config.Document {
	t.Helper()
	shapes.mu.Lock()
	defer shapes.mu.Unlock()
	out := map[*shape][2][]config.Document{}
	for _, s := range shapes.m {
		var c [2][]config.Document
		for i, docs := range [][]config.Document{s.built, s.loaded} {
			p, err := container.New(docs...)
			if err != nil {
				t.Fatal(err)
			}
			c[i] = p.Clone().Documents()
		}
		out[s] = c
	}
	return out
}

// BenchmarkCheckFleetConfigs: one op checks the worker config of the first
// 100 tenants of the load benchmarks' fleet (manifestfleet.TenFiles), which
// share seven patch texts, as a fleet's first load does, with
// CheckMachineConfig (check=shapes) or MachineConfig (check=round-trip).
func BenchmarkCheckFleetConfigs(b *testing.B) {
	bundle, err := ValidationSecrets("1.12.6")
	if err != nil {
		b.Fatal(err)
	}
	fleet := manifestfleet.TenFiles(100)
	var patches []string
	for _, p := range fleet.Tenant(0).ConfigPatches {
		patches = append(patches, p.Text)
	}
	tenants := make([][2]string, fleet.Tenants) // name and endpoint
	for i := range tenants {
		t := fleet.Tenant(i)
		tenants[i] = [2]string{t.Name, t.Endpoint}
	}
	for _, c := range []struct {
		name  string
		check func(ConfigInput) error
	}{{"shapes", CheckMachineConfig}, {"round-trip", machineConfigErr}} {
		b.Run("check="+c.name, func(b *testing.B) {
			for b.Loop() {
				resetShapes()
				for _, tn := range tenants {
					if err := c.check(shapeInput(bundle, tn, RoleWorker, patches)); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
