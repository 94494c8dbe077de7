package reconciler

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	tfjson "github.com/hashicorp/terraform-json"
	"github.com/rezuscloud/rezuscloud/internal/modeldiff"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// project turns a tenant's TF state into Machines through the provider
// modules' mappings.
func (r *Reconciler) project(tenant string, st *tfjson.State) ([]*schema.Machine, error) {
	if st == nil || st.Values == nil || st.Values.RootModule == nil {
		return nil, nil
	}
	mappings := map[string]struct {
		class string
		m     render.Mapping
	}{}
	for _, class := range r.modules.Names() {
		for _, mp := range r.modules[class].Mappings() {
			mappings[mp.TFType] = struct {
				class string
				m     render.Mapping
			}{class, mp}
		}
	}
	var out []*schema.Machine
	var walk func(m *tfjson.StateModule)
	walk = func(m *tfjson.StateModule) {
		for _, res := range m.Resources {
			mp, ok := mappings[res.Type]
			if !ok || mp.m.Kind != schema.KindMachine || res.Mode != tfjson.ManagedResourceMode {
				continue
			}
			f := mp.m.Extract(res.AttributeValues)
			if f.ProviderID == "" {
				continue
			}
			ng := f.NodeGroup
			if ng == "" {
				ng = nodeGroupOf(res.Name)
			}
			idx := indexOf(res.Index)
			if f.Index != nil {
				idx = *f.Index
			}
			mc := &schema.Machine{
				APIVersion: schema.APIVersion, Kind: schema.KindMachine,
				Metadata: schema.ObjectMeta{
					Name: f.ProviderID,
					Labels: map[string]string{
						schema.LabelTenant:    tenant,
						schema.LabelRole:      f.Role,
						schema.LabelNodeGroup: ng,
						schema.LabelProvider:  mp.class,
					},
					Annotations: map[string]string{modeldiff.AnnotationSlot: modeldiff.SlotKey(ng, idx)},
				},
				Spec: schema.MachineSpec{
					ManagementAddress: f.Address, ProviderID: f.ProviderID, ProviderClass: mp.class,
					Shape: f.Shape, Hostname: f.Hostname, Role: f.Role, Tenant: tenant, NodeGroup: ng,
					TFAddress: res.Address,
				},
			}
			projectCloudFacts(mc, f)
			out = append(out, mc)
		}
		for _, c := range m.ChildModules {
			walk(c)
		}
	}
	walk(st.Values.RootModule)
	sort.Slice(out, func(i, j int) bool { return out[i].Metadata.Name < out[j].Metadata.Name })
	return out, nil
}

// withMachines returns the plan summary sum with its machines counted
// apart: the changes of a node group's resources (render.ResourceName)
// whose TF type a provider module maps to Machines. Other resources of a
// mapped type are no machines, such as the Talos secrets, a
// terraform_data like a bare-metal machine's record.
func (r *Reconciler) withMachines(sum schema.PlanSummary, changes []tofu.PlannedChange) schema.PlanSummary {
	machine := map[string]bool{}
	for _, class := range r.modules.Names() {
		for _, mp := range r.modules[class].Mappings() {
			if mp.Kind == schema.KindMachine {
				machine[mp.TFType] = true
			}
		}
	}
	sum.Machines = schema.PlanCounts{}
	for _, c := range changes {
		if typ, name := resourceOf(c.Address); !machine[typ] || !strings.HasPrefix(name, render.ResourceName("")) {
			continue
		}
		for _, a := range c.Actions {
			switch a {
			case "create":
				sum.Machines.Add++
			case "update":
				sum.Machines.Change++
			case "delete":
				sum.Machines.Destroy++
			}
		}
	}
	return sum
}

// resourceOf splits a managed resource's address such as
// "module.m.rezussim_machine.ng_cp[0]" into its TF type and name; both
// are "" for a data source.
func resourceOf(addr string) (typ, name string) {
	for {
		rest, ok := strings.CutPrefix(addr, "module.")
		if !ok {
			break
		}
		if _, addr, ok = strings.Cut(rest, "."); !ok {
			return "", ""
		}
	}
	if strings.HasPrefix(addr, "data.") {
		return "", ""
	}
	typ, name, _ = strings.Cut(addr, ".")
	name, _, _ = strings.Cut(name, "[")
	return typ, name
}

// projectCloudFacts records what a real cloud's provider says about a
// machine beyond the spec: its zone as the Kubernetes topology label, its
// public address and the cloud's state of it as annotations.
func projectCloudFacts(mc *schema.Machine, f render.MachineFacts) {
	if f.Zone != "" {
		mc.Metadata.Labels[schema.LabelZone] = f.Zone
	}
	if f.PublicAddress != "" {
		mc.Metadata.Annotations[schema.AnnotationPublicAddress] = f.PublicAddress
	}
	if f.State != "" {
		mc.Metadata.Annotations[schema.AnnotationProviderState] = f.State
	}
}

// storedMachines returns the machines of a tenant as the store has them.
func (r *Reconciler) storedMachines(tenant string) ([]*schema.Machine, error) {
	var out []*schema.Machine
	err := r.store.View(func(tx store.Tx) error {
		return tx.TenantObjects(tenant, schema.KindMachine, func(res store.Resource) error {
			m := new(schema.Machine)
			if err := json.Unmarshal(res.Object, m); err != nil {
				return fmt.Errorf("machine %s: %w", res.Name, err)
			}
			out = append(out, m)
			return nil
		})
	})
	return out, err
}

func nodeGroupOf(resourceName string) string {
	if len(resourceName) > 3 && resourceName[:3] == "ng_" {
		return resourceName[3:]
	}
	return resourceName
}

func indexOf(v any) int {
	switch x := v.(type) {
	case float64:
		return int(x)
	case int:
		return x
	case json.Number:
		n, _ := x.Int64()
		return int(n)
	}
	return 0
}
