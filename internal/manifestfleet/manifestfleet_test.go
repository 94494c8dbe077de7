package manifestfleet

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
)

// load loads a fleet's files and fails the test on any problem, also one
// of the provider modules.
func load(t *testing.T, o Options) *schema.Desired {
	t.Helper()
	d, err := schema.Load(o.MapFS(), ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	if probs := render.Builtin().Validate(d); len(probs) > 0 {
		t.Fatalf("the provider modules reject the fleet: %v", probs)
	}
	return d
}

// A fleet is what the package says: ten valid manifests a tenant, in a
// directory of its own, written to disk as Files gives them.
func TestFleetLoads(t *testing.T) {
	o := TenFiles(3)
	o.Edit = func(t *Tenant) { t.Groups[1].Count = t.Index + 1 }
	d := load(t, o)
	if d.Files != 30 || len(d.Tenants) != 3 {
		t.Fatalf("%d files, %d tenants: want 30 and 3", d.Files, len(d.Tenants))
	}
	for i, td := range d.Tenants {
		if td.Tenant.Metadata.Name != o.Name(i) || len(td.NodeGroups) != 2 || len(td.Patches) != 7 || td.NodeGroups[1].Spec.Count != i+1 {
			t.Errorf("tenant %d: %s with %d node groups, %d patches", i, td.Tenant.Metadata.Name, len(td.NodeGroups), len(td.Patches))
		}
	}
	if o.Machines() != 3+1+2+3 {
		t.Errorf("Machines() = %d, want 9", o.Machines())
	}
	dir := t.TempDir()
	if err := o.WriteTenant(dir, 2); err != nil {
		t.Fatal(err)
	}
	onDisk, err := schema.Load(os.DirFS(dir), ".", nil)
	if err != nil || onDisk.Files != 10 || onDisk.Tenants[0].NodeGroups[1].Spec.Count != 3 {
		t.Fatalf("written tenant: %v", err)
	}
}

// values is what a load of a fleet declares, without where it declares it.
func values(t *testing.T, d *schema.Desired) string {
	t.Helper()
	var v []any
	for _, td := range d.Tenants {
		v = append(v, td.Tenant.Metadata, td.Tenant.Spec)
		for _, ng := range td.NodeGroups {
			v = append(v, ng.Metadata, ng.Spec)
		}
		for _, p := range td.Patches {
			v = append(v, p.Metadata, p.Spec)
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Every layout declares the same fleet, in the files it names; a file of
// several documents starts each with "---".
func TestLayouts(t *testing.T) {
	o := Options{Tenants: 2, Digits: 3, ControlPlanes: 3, Workers: 2, Patches: 2, SchemaComment: true,
		Edit: func(t *Tenant) {
			t.Labels["env"], t.Labels["zone"] = "prod", "a"
			t.Patches = []Patch{{Name: "name", Text: "cluster:\n  clusterName: " + t.Name + "\n"}}
			t.Groups[1].Patches = []Patch{{Name: "own", Text: "machine:\n  sysctls:\n    vm.swappiness: \"1\"\n"}}
			t.ConfigPatches[1].TargetRole = schema.RoleWorker
		}}
	want := map[Layout][]string{
		FilePerDocument: {"tenants/t001/ng-controlplane.yaml", "tenants/t001/ng-workers.yaml", "tenants/t001/patch-0.yaml", "tenants/t001/patch-1.yaml", "tenants/t001/tenant.yaml"},
		FilePerKind:     {"tenants/t001/nodegroups.yaml", "tenants/t001/patches.yaml", "tenants/t001/tenant.yaml"},
		FilePerTenant:   {"tenants/t001.yaml"},
	}
	var first string
	for _, layout := range []Layout{FilePerDocument, FilePerKind, FilePerTenant} {
		o.Layout = layout
		files := o.TenantFiles(1)
		if got := slices.Sorted(maps.Keys(files)); !slices.Equal(got, want[layout]) {
			t.Errorf("layout %d: files %v, want %v", layout, got, want[layout])
		}
		for p, b := range files {
			if docs := strings.Count(string(b), "\nkind: "); docs > 1 != strings.HasPrefix(string(b), "---\n") {
				t.Errorf("layout %d: %s has %d documents and starts %q", layout, p, docs, b[:4])
			}
		}
		if !reflect.DeepEqual(o.Files(), o.Files()) {
			t.Errorf("layout %d: two calls of Files differ", layout)
		}
		d := load(t, o)
		td := d.Tenant("t001")
		if td == nil || len(td.NodeGroups) != 2 || len(td.Patches) != 2 || len(td.Tenant.Spec.ConfigPatches) != 1 ||
			len(td.NodeGroups[1].Spec.ConfigPatches) != 1 || td.Patches[1].Spec.TargetRole != schema.RoleWorker || td.Tenant.Metadata.Labels["zone"] != "a" {
			t.Fatalf("layout %d: t001 is %+v", layout, td)
		}
		if v := values(t, d); first == "" {
			first = v
		} else if v != first {
			t.Errorf("layout %d declares\n%s\nthe first layout\n%s", layout, v, first)
		}
	}
}

// Names, directory, machines, provider, patches and the service-account
// key are the options'.
func TestOptions(t *testing.T) {
	for _, c := range []struct {
		o    Options
		name string
		file string
	}{
		{Options{Tenants: 43}, "t0042", "tenants/t0042/tenant.yaml"},
		{Options{Tenants: 43, Digits: 3, Dir: "."}, "t042", "t042/tenant.yaml"},
		{Options{Tenants: 1043, Digits: 2, Dir: "clusters/prod"}, "t1042", "clusters/prod/t1042/tenant.yaml"},
	} {
		last := c.o.Tenants - 1
		if got := c.o.Name(last); got != c.name {
			t.Errorf("Digits %d: tenant %d is %s, want %s", c.o.Digits, last, got, c.name)
		}
		if files := c.o.TenantFiles(last); files[c.file] == nil {
			t.Errorf("Digits %d, Dir %q: files %v, want %s among them", c.o.Digits, c.o.Dir, slices.Sorted(maps.Keys(files)), c.file)
		}
	}
	o := Options{Tenants: 4, ControlPlanes: 3, Workers: 0, Patches: 1, Provider: "openstack",
		ProviderConfig: "cloud: rezus-openstack\nflavor: m1.medium\nimage: talos-1.12.6\nnetworks:\n  - tenant-net\n", ServiceAccountKey: "ecdsa"}
	d := load(t, o)
	for _, td := range d.Tenants {
		cp, w := td.NodeGroups[0].Spec, td.NodeGroups[1].Spec
		if cp.Count != 3 || w.Count != 0 || cp.ProviderClass != "openstack" || w.ProviderConfig["flavor"] != "m1.medium" ||
			len(td.Patches) != 1 || td.Patches[0].Spec.Patch != PatchText(0) || td.Tenant.Spec.ServiceAccountKey != "ecdsa" {
			t.Errorf("%s: control planes %+v, workers %+v, %d patches, service-account key %q", td.Tenant.Metadata.Name, cp, w, len(td.Patches), td.Tenant.Spec.ServiceAccountKey)
		}
	}
	if o.Machines() != 12 {
		t.Errorf("Machines() = %d, want 12", o.Machines())
	}
	if cfg := (Options{Tenants: 1, ControlPlanes: 1}).Tenant(0).Groups[0].ProviderConfig; cfg != "shape: small" {
		t.Errorf("the default provider's config is %q, want shape: small", cfg)
	}
	bare := Options{Tenants: 1, Layout: FilePerKind, Edit: func(t *Tenant) { t.Groups = nil }}
	if files := bare.TenantFiles(0); len(files) != 1 || files["tenants/t0000/tenant.yaml"] == nil {
		t.Errorf("a tenant without node groups and patches has the files %v, want its tenant.yaml", slices.Sorted(maps.Keys(files)))
	}
}

// WriteDir writes every file of the fleet, and then only those whose
// content changed.
func TestWriteDirRewritesOnlyChanges(t *testing.T) {
	dir := t.TempDir()
	o := Options{Tenants: 3, ControlPlanes: 1, Workers: 1, Layout: FilePerTenant, Extra: map[string][]byte{"README.md": []byte("# Fleet\n")}}
	if err := o.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "README.md")); err != nil || string(b) != "# Fleet\n" {
		t.Fatalf("README.md: %q, %v", b, err)
	}
	old := filepath.Join(dir, "tenants", "t0000.yaml")
	changed := filepath.Join(dir, "tenants", "t0001.yaml")
	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	for _, p := range []string{old, changed} {
		if err := os.Chtimes(p, past, past); err != nil {
			t.Fatal(err)
		}
	}
	o.Edit = func(t *Tenant) {
		if t.Name == "t0001" {
			t.Groups[1].Count = 5
		}
	}
	if err := o.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	for p, rewritten := range map[string]bool{old: false, changed: true} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.ModTime().Equal(past) == rewritten {
			t.Errorf("%s: rewritten %v, want %v", p, !rewritten, rewritten)
		}
	}
	d, err := schema.Load(os.DirFS(dir), ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Tenant("t0001").NodeGroups[1].Spec.Count; got != 5 {
		t.Fatalf("t0001 workers = %d after the rewrite, want 5", got)
	}
}
