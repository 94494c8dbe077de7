package talos

import (
	"fmt"
	"slices"
	"testing"

	rtalos "github.com/rezuscloud/rezuscloud/render/talos"
)

// ownConfigs gives each worker of tr a config of its own: cfg with the
// host name w-N, as a bare-metal machine has.
func (tr *tenantRig) ownConfigs(t *testing.T, cfg []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for i, m := range tr.ms {
		if m.ControlPlane {
			continue
		}
		own, err := rtalos.MetalMachineConfig(cfg, fmt.Sprintf("w-%d", i), "/dev/sda")
		if err != nil {
			t.Fatal(err)
		}
		out[m.ID] = own
	}
	return out
}

// TestRollAppliesEachMachineItsOwnConfig: a machine with a config of its
// own (Desired.Configs) is compared with and given that config, never its
// node group's, so that a patch of the group keeps its host name.
func TestRollAppliesEachMachineItsOwnConfig(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 2)
	ctx := ctxT(t)
	workers := ids(tr.ms[1:])

	d := tr.desired(tr.cpCfg, tr.wCfg, "1.12.6")
	d.Configs = tr.ownConfigs(t, tr.wCfg)
	if _, err := r.plane.Roll(ctx, d); err != nil {
		t.Fatal(err)
	}
	if got := machineIDs(tr.ops("ApplyConfiguration")); !slices.Equal(got, workers) {
		t.Fatalf("applies on %v, want one on each worker, which runs its group's config: %v", got, workers)
	}
	check := func(when string, d Desired) {
		t.Helper()
		for i, m := range tr.ms[1:] {
			info, _ := r.host.Node(m.ID)
			if want := sha256Hex(d.Configs[m.ID]); info.ConfigSHA256 != want {
				t.Errorf("%s: %s runs config %.12s, want its own %.12s", when, m.ID, info.ConfigSHA256, want)
			}
			if want := fmt.Sprintf("w-%d", i+1); info.Hostname != want {
				t.Errorf("%s: %s runs as %q, want %q", when, m.ID, info.Hostname, want)
			}
		}
		rec, _, _ := r.plane.Rollout("acme")
		for id, cfg := range d.Configs {
			if rec.Machines[id] != sha256Hex(cfg) {
				t.Errorf("%s: the rollout record has config %.12s for %s, want %.12s", when, rec.Machines[id], id, sha256Hex(cfg))
			}
		}
	}
	check("own configs", d)

	// The same target again changes nothing.
	if _, err := r.plane.Roll(ctx, d); err != nil {
		t.Fatal(err)
	}
	if n := len(tr.ops("ApplyConfiguration")); n != 2 {
		t.Fatalf("%d applies after a second roll of the same configs, want 2", n)
	}

	// A patch of the node groups reaches every machine once; the workers
	// get their own configs of the patched group and keep their names.
	patch := "machine:\n  sysctls:\n    net.core.somaxconn: \"65535\"\n"
	cp2, w2 := renderConfig(t, "acme", tr.secrets, "controlplane", patch), renderConfig(t, "acme", tr.secrets, "worker", patch)
	d2 := tr.desired(cp2, w2, "1.12.6")
	d2.Configs = tr.ownConfigs(t, w2)
	if _, err := r.plane.Roll(ctx, d2); err != nil {
		t.Fatal(err)
	}
	if got, want := machineIDs(tr.ops("ApplyConfiguration")), append(slices.Clone(workers), ids(tr.ms)...); !slices.Equal(got, want) {
		t.Fatalf("applies on %v, want %v", got, want)
	}
	check("after the patch", d2)
}
