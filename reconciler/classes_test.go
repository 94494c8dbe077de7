package reconciler

import (
	"context"
	"errors"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/modeldiff"
	"github.com/rezuscloud/rezuscloud/schema"
)

// TestProviderClassesStall: a run whose tenant declares node groups of a
// disabled provider class stalls, naming the class, the node groups and
// why; one that was applied on such a class stalls its destroy too; other
// classes, and every class when none is disabled, go on.
func TestProviderClassesStall(t *testing.T) {
	ng := func(name, class string) *schema.NodeGroup {
		return &schema.NodeGroup{Metadata: schema.ObjectMeta{Name: name}, Spec: schema.NodeGroupSpec{ProviderClass: class}}
	}
	disabled := map[string]string{schema.ProviderSim: "no simulated cloud here"}
	run := func(disabled map[string]string, desired *schema.TenantDesired, prev *appliedRecord) error {
		tr := &tenantRun{r: &Reconciler{opts: Options{DisabledClasses: disabled}}, desired: desired, prev: prev}
		res, err := tr.providerClasses(context.Background())
		if res != stepNext {
			t.Fatalf("providerClasses returned %v, want stepNext", res)
		}
		return err
	}
	sim := &schema.TenantDesired{NodeGroups: []*schema.NodeGroup{ng("workers", "sim"), ng("cp", "sim"), ng("edge", "metal")}}
	var stalled *StalledError
	err := run(disabled, sim, nil)
	if !errors.As(err, &stalled) || stalled.Reason != schema.ReasonProviderClassDisabled ||
		err.Error() != "providerClass sim of node groups cp, workers: no simulated cloud here" {
		t.Errorf("an apply of sim node groups: %#v (%v)", err, err)
	}
	applied := &appliedRecord{Model: modeldiff.Model{NodeGroups: map[string]schema.NodeGroupSpec{"cp": {ProviderClass: "sim"}}}}
	if err := run(disabled, nil, applied); !errors.As(err, &stalled) || err.Error() != "providerClass sim of node group cp: no simulated cloud here" {
		t.Errorf("a destroy of a tenant applied on sim: %v", err)
	}
	metal := &schema.TenantDesired{NodeGroups: []*schema.NodeGroup{ng("edge", "metal")}}
	if err := run(disabled, metal, applied); err != nil {
		t.Errorf("an apply of metal node groups: %v", err)
	}
	if err := run(nil, sim, nil); err != nil {
		t.Errorf("sim node groups with no class disabled: %v", err)
	}
}

// TestDriftSkipsDisabledClasses: a drift check of a tenant applied on a
// class the server does not run ends at its first step, unchecked, where
// it would refresh against a cloud that is not there; other tenants, and
// every tenant when no class is disabled, go on to be checked.
func TestDriftSkipsDisabledClasses(t *testing.T) {
	applied := &appliedRecord{Model: modeldiff.Model{NodeGroups: map[string]schema.NodeGroupSpec{"cp": {ProviderClass: "sim"}}}}
	metal := &appliedRecord{Model: modeldiff.Model{NodeGroups: map[string]schema.NodeGroupSpec{"cp": {ProviderClass: "metal"}}}}
	for _, c := range []struct {
		name      string
		disabled  map[string]string
		prev      *appliedRecord
		res       stepResult
		unchecked bool
	}{
		{"sim disabled", map[string]string{schema.ProviderSim: "off"}, applied, stepDone, true},
		{"metal with sim disabled", map[string]string{schema.ProviderSim: "off"}, metal, stepNext, false},
		{"nothing disabled", nil, applied, stepNext, false},
	} {
		d := &driftRun{tenantRun: &tenantRun{r: &Reconciler{opts: Options{DisabledClasses: c.disabled}}, prev: c.prev}}
		res, err := d.classesRun(context.Background())
		if err != nil || res != c.res || d.unchecked != c.unchecked {
			t.Errorf("%s: %v, %v, unchecked %v; want %v, unchecked %v", c.name, res, err, d.unchecked, c.res, c.unchecked)
		}
	}
}
