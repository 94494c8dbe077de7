package manifestfleet

import (
	"os"
	"testing"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/schema"
)

// A fleet is what the package says: ten valid manifests a tenant, in a
// directory of its own, written to disk as Files gives them.
func TestFleetLoads(t *testing.T) {
	fsys := fstest.MapFS{}
	for i := range 3 {
		for name, content := range Files(i, i+1) {
			fsys[name] = &fstest.MapFile{Data: []byte(content)}
		}
	}
	d, err := schema.Load(fsys, ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Files != 30 || len(d.Tenants) != 3 {
		t.Fatalf("%d files, %d tenants: want 30 and 3", d.Files, len(d.Tenants))
	}
	for i, td := range d.Tenants {
		if td.Tenant.Metadata.Name != Name(i) || len(td.NodeGroups) != 2 || len(td.Patches) != 7 || td.NodeGroups[1].Spec.Count != i+1 {
			t.Errorf("tenant %d: %s with %d node groups, %d patches", i, td.Tenant.Metadata.Name, len(td.NodeGroups), len(td.Patches))
		}
	}
	dir := t.TempDir()
	if err := WriteTenant(dir, 2, 3); err != nil {
		t.Fatal(err)
	}
	onDisk, err := schema.Load(os.DirFS(dir), ".", nil)
	if err != nil || onDisk.Files != 10 || onDisk.Tenants[0].NodeGroups[1].Spec.Count != 3 {
		t.Fatalf("written tenant: %v", err)
	}
}
