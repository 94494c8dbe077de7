// Package modeldiff compares what a tenant is declared to be with what was
// applied, object by object and field by field: the one diff that the
// reconciler, the API and `rezusctl diff` all show. It reads only schema types.
package modeldiff

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Action says what a change does to an object.
type Action string

// The actions of a diff.
const (
	ActionCreate Action = "create"
	ActionUpdate Action = "update"
	ActionDelete Action = "delete"
)

// FieldChange is one changed field of an updated object.
type FieldChange struct {
	Path string `json:"path"`
	Old  any    `json:"old,omitempty"`
	New  any    `json:"new,omitempty"`
}

// ObjectChange is one object of a tenant that a commit creates, changes or
// deletes.
type ObjectChange struct {
	Action Action        `json:"action"`
	Kind   string        `json:"kind"`
	Name   string        `json:"name"`
	Fields []FieldChange `json:"fields,omitempty"`
}

// Model is what a tenant is made of, in a form that compares field by
// field: the specs of its manifests and its machine slots. Desired models
// come from a commit, applied ones from the store.
type Model struct {
	Tenant     *schema.TenantSpec                `json:"tenant,omitempty"`
	NodeGroups map[string]schema.NodeGroupSpec   `json:"nodeGroups,omitempty"`
	Patches    map[string]schema.ConfigPatchSpec `json:"patches,omitempty"`
	// Machines maps "nodegroup/index" to the machine's shape.
	Machines map[string]MachineSlot `json:"machines,omitempty"`
}

// MachineSlot is one machine of a node group, by its place in the group.
type MachineSlot struct {
	Role  string `json:"role"`
	Shape string `json:"shape,omitempty"`
}

// DesiredModel builds the model of a tenant as a commit declares it.
func DesiredModel(td *schema.TenantDesired) Model {
	m := Model{
		Tenant:     &td.Tenant.Spec,
		NodeGroups: map[string]schema.NodeGroupSpec{},
		Patches:    map[string]schema.ConfigPatchSpec{},
		Machines:   map[string]MachineSlot{},
	}
	for _, ng := range td.NodeGroups {
		m.NodeGroups[ng.Metadata.Name] = ng.Spec
		shape, _ := ng.Spec.ProviderConfig["shape"].(string)
		if shape == "" && ng.Spec.ProviderClass == schema.ProviderSim {
			shape = "small"
		}
		for i := 0; i < ng.Spec.Count; i++ {
			m.Machines[SlotKey(ng.Metadata.Name, i)] = MachineSlot{Role: ng.Role(), Shape: shape}
		}
	}
	for _, p := range td.Patches {
		m.Patches[p.Metadata.Name] = p.Spec
	}
	return m
}

// AnnotationSlot records on a Machine its node group and index, "workers/3".
const AnnotationSlot = "rezuscloud.io/slot"

// SlotKey names a machine's place: its node group and index.
func SlotKey(nodeGroup string, index int) string {
	return nodeGroup + "/" + strconv.Itoa(index)
}

// AppliedModel builds the model of a tenant from what the API serves: its
// Tenant, NodeGroup and ConfigPatch resources as last applied, and its
// Machines, placed by their slot annotation.
func AppliedModel(t *schema.Tenant, ngs []*schema.NodeGroup, patches []*schema.ConfigPatch, machines []*schema.Machine) Model {
	m := Model{
		NodeGroups: map[string]schema.NodeGroupSpec{},
		Patches:    map[string]schema.ConfigPatchSpec{},
		Machines:   map[string]MachineSlot{},
	}
	if t != nil {
		spec := t.Spec
		m.Tenant = &spec
	}
	for _, ng := range ngs {
		m.NodeGroups[ng.Metadata.Name] = ng.Spec
	}
	for _, p := range patches {
		m.Patches[p.Metadata.Name] = p.Spec
	}
	for _, mc := range machines {
		slot := mc.Metadata.Annotations[AnnotationSlot]
		if slot == "" {
			slot = mc.Spec.NodeGroup + "/" + mc.Metadata.Name
		}
		m.Machines[slot] = MachineSlot{Role: mc.Spec.Role, Shape: mc.Spec.Shape}
	}
	return m
}

// Diff compares an applied model with a desired one, object by object, and
// field by field within an object, using go-cmp. The result is sorted by
// kind and name.
func Diff(applied, desired Model) []ObjectChange {
	var out []ObjectChange
	switch {
	case applied.Tenant == nil && desired.Tenant != nil:
		out = append(out, ObjectChange{Action: ActionCreate, Kind: schema.KindTenant})
	case applied.Tenant != nil && desired.Tenant == nil:
		out = append(out, ObjectChange{Action: ActionDelete, Kind: schema.KindTenant})
	case applied.Tenant != nil:
		if f := fieldDiff(*applied.Tenant, *desired.Tenant); len(f) > 0 {
			out = append(out, ObjectChange{Action: ActionUpdate, Kind: schema.KindTenant, Fields: f})
		}
	}
	out = append(out, diffMap(schema.KindNodeGroup, applied.NodeGroups, desired.NodeGroups)...)
	out = append(out, diffMap(schema.KindConfigPatch, applied.Patches, desired.Patches)...)
	out = append(out, diffMap(schema.KindMachine, applied.Machines, desired.Machines)...)
	return out
}

func diffMap[V any](kind string, applied, desired map[string]V) []ObjectChange {
	names := map[string]bool{}
	for n := range applied {
		names[n] = true
	}
	for n := range desired {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Slice(sorted, func(i, j int) bool { return naturalLess(sorted[i], sorted[j]) })
	var out []ObjectChange
	for _, n := range sorted {
		a, inA := applied[n]
		d, inD := desired[n]
		switch {
		case !inA:
			out = append(out, ObjectChange{Action: ActionCreate, Kind: kind, Name: n})
		case !inD:
			out = append(out, ObjectChange{Action: ActionDelete, Kind: kind, Name: n})
		default:
			if f := fieldDiff(a, d); len(f) > 0 {
				out = append(out, ObjectChange{Action: ActionUpdate, Kind: kind, Name: n, Fields: f})
			}
		}
	}
	return out
}

// naturalLess orders "workers/10" after "workers/9".
func naturalLess(a, b string) bool {
	ai, bi := strings.LastIndexByte(a, '/'), strings.LastIndexByte(b, '/')
	if ai >= 0 && bi >= 0 && a[:ai] == b[:bi] {
		x, errA := strconv.Atoi(a[ai+1:])
		y, errB := strconv.Atoi(b[bi+1:])
		if errA == nil && errB == nil {
			return x < y
		}
	}
	return a < b
}

// fieldDiff lists the leaf fields that differ between a and b, compared as
// their JSON forms so that paths read like the manifests.
func fieldDiff(a, b any) []FieldChange {
	ja, jb := toJSONValue(a), toJSONValue(b)
	var r fieldReporter
	cmp.Equal(ja, jb, cmp.Reporter(&r))
	return r.changes
}

func toJSONValue(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return string(b)
	}
	return out
}

// fieldReporter collects the differing leaves of a go-cmp comparison as
// JSON pointers.
type fieldReporter struct {
	path    cmp.Path
	changes []FieldChange
}

func (r *fieldReporter) PushStep(ps cmp.PathStep) { r.path = append(r.path, ps) }
func (r *fieldReporter) PopStep()                 { r.path = r.path[:len(r.path)-1] }

func (r *fieldReporter) Report(rs cmp.Result) {
	if rs.Equal() {
		return
	}
	vx, vy := r.path.Last().Values()
	fc := FieldChange{Path: pointer(r.path)}
	if vx.IsValid() {
		fc.Old = vx.Interface()
	}
	if vy.IsValid() {
		fc.New = vy.Interface()
	}
	r.changes = append(r.changes, fc)
}

func pointer(p cmp.Path) string {
	var b strings.Builder
	for _, step := range p {
		switch s := step.(type) {
		case cmp.MapIndex:
			b.WriteString("/" + fmt.Sprint(s.Key().Interface()))
		case cmp.SliceIndex:
			x, y := s.SplitKeys()
			i := x
			if i < 0 {
				i = y
			}
			b.WriteString("/" + strconv.Itoa(i))
		}
	}
	if b.Len() == 0 {
		return "/"
	}
	return b.String()
}
