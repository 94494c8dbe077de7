package schema_test

import (
	"errors"
	"fmt"
	"os"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/examples"
	"github.com/rezuscloud/rezuscloud/schema"
)

func ExampleLoad() {
	d, err := schema.Load(examples.SimOnly(os.DirFS(".."), "examples"), "examples", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, td := range d.Tenants {
		machines := 0
		for _, g := range td.NodeGroups {
			machines += g.Spec.Count
		}
		fmt.Printf("%s: Talos %s, %d machines, %d patches\n", td.Tenant.Metadata.Name, td.Tenant.Spec.TalosVersion, machines, len(td.Patches))
	}
	// Output:
	// production: Talos 1.12.6, 5 machines, 2 patches
	// staging: Talos 1.12.6, 2 machines, 1 patches
}

func ExampleProblemList() {
	fsys := fstest.MapFS{"prod.yaml": {Data: []byte(`apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: workers
  labels:
    rezuscloud.io/tenant: prod
    rezuscloud.io/role: workre
spec:
  count: 2
  providerClass: sim
`)}}
	_, err := schema.Load(fsys, ".", nil)
	var list *schema.ProblemList
	if errors.As(err, &list) {
		for _, p := range list.Problems {
			fmt.Println(p)
		}
	}
	// Output:
	// prod.yaml:6:5: /metadata/labels/rezuscloud.io~1tenant: tenant "prod" is not declared by any Tenant manifest
	// prod.yaml:7:5: /metadata/labels/rezuscloud.io~1role: must be one of "controlplane", "worker", not "workre"
}
